"""Live progress of a matrix run: cells done and remaining, the running cell's step N of M, last step time, ETA.

- `MatrixProgress(total_cells, live=None)`: a rich live panel when stdout is a terminal, otherwise one plain line per
  event (cell start, step, cell end), which is what CI logs want.
- ETA = remaining steps of the running cell x its mean step time + remaining cells x the mean wall time of the cells
  finished so far in this run (unknown until one finished).

Caveats:
- The ETA ignores that cells differ (a Megatron cell may be slower than an FSDP one); it is a rough guide.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else (f"{minutes}m{secs:02d}s" if minutes else f"{secs}s")


@dataclass
class MatrixProgress:
    total_cells: int
    live: bool | None = None
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    done: int = 0
    failed: int = 0
    label: str | None = None
    num_steps: int | None = None
    steps: int = 0
    last_step_s: float | None = None
    _cell_started: float = 0.0
    _cell_durations: list[float] = field(default_factory=list)
    _live_view: object | None = None

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = self.stream.isatty()
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._live_view = Live(self._render(), console=Console(file=self.stream), refresh_per_second=4)
            self._live_view.start()

    def eta_s(self) -> float | None:
        remaining_cells = self.total_cells - self.done - (1 if self.label else 0)
        current = 0.0
        if self.label and self.num_steps:
            if self.steps:
                current = (time.monotonic() - self._cell_started) / self.steps * (self.num_steps - self.steps)
            elif not self._cell_durations:
                return None
            else:
                current = max(0.0, self._mean_cell_s() - (time.monotonic() - self._cell_started))
        if remaining_cells > 0 and not self._cell_durations:
            return None
        return current + remaining_cells * (self._mean_cell_s() if remaining_cells > 0 else 0.0)

    def _mean_cell_s(self) -> float:
        return sum(self._cell_durations) / len(self._cell_durations)

    def cell_started(self, label: str, num_steps: int | None) -> None:
        self.label, self.num_steps, self.steps, self.last_step_s = label, num_steps, 0, None
        self._cell_started = time.monotonic()
        self._emit(f"[{self.done + 1}/{self.total_cells}] start {label} ({num_steps or '?'} steps)")

    def step(self, steps: int, last_step_s: float | None) -> None:
        self.steps, self.last_step_s = steps, last_step_s
        last = f"{last_step_s:.2f} s" if last_step_s is not None else "?"
        self._emit(
            f"[{self.done + 1}/{self.total_cells}] {self.label}: step {steps}/{self.num_steps or '?'} "
            f"last step {last}, ETA {format_duration(self.eta_s())}"
        )

    def cell_ended(self, state: str, reason: str | None) -> None:
        self._cell_durations.append(time.monotonic() - self._cell_started)
        self.done += 1
        self.failed += state != "complete"
        suffix = f": {reason}" if reason else ""
        self._emit(f"[{self.done}/{self.total_cells}] {state} {self.label}{suffix}")
        self.label = None

    def message(self, text: str) -> None:
        self._emit(text)

    def close(self) -> None:
        if self._live_view is not None:
            self._live_view.stop()
            self._live_view = None

    def _emit(self, line: str) -> None:
        if self._live_view is not None:
            self._live_view.console.log(line)
            self._live_view.update(self._render())
        else:
            print(line, file=self.stream, flush=True)

    def _render(self):
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_row("cells", f"{self.done} done ({self.failed} not complete), {self.total_cells - self.done} to go")
        if self.label:
            last = f"{self.last_step_s:.2f} s" if self.last_step_s is not None else "-"
            table.add_row("running", f"{self.label}: step {self.steps}/{self.num_steps or '?'}, last step {last}")
        table.add_row("ETA", format_duration(self.eta_s()))
        return table
