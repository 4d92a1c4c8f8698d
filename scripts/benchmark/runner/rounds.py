"""Which launch runs next under the run's time budget, and, for a sequential pair, whether another round is needed.

- Budget (`--budget-minutes N`, ExecuteOptions.budget_s), counted from the start of this execution, less a reserve
  for the end-of-run report (the smaller of `REPORT_RESERVE_S` and `REPORT_RESERVE_SHARE` of the budget): a launch
  starts only when its expected duration fits what is left. Its expected duration is the longest launch of the same
  cell in this run so far, else the plan's typical estimate (plan.json `cost`, plan/cost.py). A launch that does not
  fit is marked skipped with the reason; a launch still running when the budget ends is stopped by the watchdog
  (`deadline`).
- Sequential pair (plan.json `sequential`, `run.py --sequential`): its launches run in rounds, repeat k of both sides
  (the order balanced: AB, BA, ...). After each round the paired check looks at the run folder (`PairLooks`, given
  by the command: history/pair_check.py analyses the folder as `run.py report` does and appends the look to
  looks.json, which `run.py ab` reads back). A look that decides ends the run: the launches left are marked
  not-needed. A round starts only when both of its launches fit the budget, so the look after the last round that
  fits (or after the plan's last round) is the final one, where the check spends what is left of its error.

Caveats:
- A failed launch leaves its round with one repeat fewer on that side; the look counts only complete repeats.
- The analysis between rounds takes seconds; it runs on the harness host while no launch holds the GPUs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from scripts.benchmark.contracts.manifest import NOT_NEEDED, SKIPPED, CellRun, Manifest

REPORT_RESERVE_S = 60.0
REPORT_RESERVE_SHARE = 0.05
_FINAL_STATES = frozenset({"complete", "failed", "interrupted"})


class PairLooks(Protocol):
    """A sequential pair's looks, kept in its run folder (history/pair_check.py `RunFolderLooks`; the command that
    executes passes it in: the runner does not analyse runs itself)."""

    def decided_round(self) -> int | None:
        """The round whose look decided (a resumed run), else None."""

    def look(self, round_number: int, last_round: bool) -> tuple[bool, str]:
        """Judge the run folder after a round: (the run stops here, one progress line)."""


LooksFor = Callable[[Path], PairLooks]


class Rounds:
    """The budget and the sequential rounds of one execution (module docstring)."""

    def __init__(
        self,
        plan: dict[str, Any],
        manifest: Manifest,
        budget_s: float | None,
        looks_for: LooksFor | None = None,
        *,
        now: float | None = None,
    ):
        self.plan = plan
        self.manifest = manifest
        started = time.monotonic() if now is None else now
        reserve = 0.0 if budget_s is None else min(REPORT_RESERVE_S, REPORT_RESERVE_SHARE * budget_s)
        self.deadline = None if budget_s is None else started + budget_s - reserve
        sequential = plan.get("sequential") or None
        self.max_rounds = int(sequential["max_rounds"]) if sequential else None
        self.looks = looks_for(manifest.run_dir) if sequential and looks_for else None
        self.decided: int | None = self.looks.decided_round() if self.looks else None
        self.durations: dict[str, float] = {}
        self._started: dict[tuple[str, int], float] = {}
        self.out_of_budget = False

    @property
    def sequential(self) -> bool:
        return self.max_rounds is not None

    def skip(self, cell_run: CellRun, now: float | None = None) -> tuple[str, str] | None:
        """(state, reason) when this launch must not start, else None."""
        now = time.monotonic() if now is None else now
        if self.decided is not None:
            return NOT_NEEDED, f"not needed: the paired check decided after round {self.decided} (`run.py ab`)"
        if self.deadline is None:
            return None
        if self.out_of_budget:
            return SKIPPED, "budget: the rounds left do not fit the --budget-minutes left"
        first = self._first_of_round(cell_run)
        need = self._round_cost(cell_run.repeat) if first else self.expected(cell_run.id)
        left = self.deadline - now
        if need is not None and need > left:
            self.out_of_budget = self.sequential
            what = "this round" if first else "this launch"
            return SKIPPED, f"budget: {max(left, 0):.0f} s left of --budget-minutes, {what} takes about {need:.0f} s"
        return None

    def started(self, cell_run: CellRun, now: float | None = None) -> None:
        self._started[cell_run.key] = time.monotonic() if now is None else now

    def finished(self, cell_run: CellRun, now: float | None = None) -> str | None:
        """Record the launch's duration; after the last launch of a sequential round, its look's progress line."""
        now = time.monotonic() if now is None else now
        began = self._started.pop(cell_run.key, None)
        if began is not None and cell_run.state == "complete":
            self.durations[cell_run.id] = max(self.durations.get(cell_run.id, 0.0), now - began)
        if self.looks is None or not self._round_done(cell_run.repeat):
            return None
        number = cell_run.repeat + 1
        out_of_budget = number < self.max_rounds and not self._round_fits(cell_run.repeat + 1, now)
        stops, line = self.looks.look(number, number >= self.max_rounds or out_of_budget)
        if out_of_budget:
            self.out_of_budget = True  # the rounds left are skipped for the budget, whatever the look said
        elif stops:
            self.decided = number
        return line

    def after(self, cell_run: CellRun) -> str | None:
        """`finished`, for the runner's loop: a look that fails (an unreadable sink) is a warning in the manifest,
        and the rounds go on as if it could not decide; the line to print, if any."""
        try:
            return self.finished(cell_run)
        except Exception as exc:  # the look is advice to the runner, never a reason to lose the run
            warning = f"the paired check's look after {cell_run.id} rep {cell_run.repeat} failed: {exc!r}"
            self.manifest.warnings.append(warning)
            return warning

    def expected(self, cell_id: str) -> float | None:
        """Seconds one launch of the cell is expected to take: the longest seen in this run, else the plan's typical
        estimate; None when neither is known."""
        if cell_id in self.durations:
            return self.durations[cell_id]
        cost = ((self.plan.get("cost") or {}).get("cells") or {}).get(cell_id) or {}
        return (cost.get("launch_s") or {}).get("typical")

    def _round_runs(self, repeat: int) -> list[CellRun]:
        return [c for c in self.manifest.cells if c.repeat == repeat]

    def _first_of_round(self, cell_run: CellRun) -> bool:
        return self.sequential and all(c.state == "pending" for c in self._round_runs(cell_run.repeat))

    def _round_done(self, repeat: int) -> bool:
        runs = self._round_runs(repeat)
        return bool(runs) and all(c.state in _FINAL_STATES for c in runs)

    def _round_cost(self, repeat: int) -> float | None:
        costs = [self.expected(c.id) for c in self._round_runs(repeat)]
        return None if any(c is None for c in costs) else sum(costs)

    def _round_fits(self, repeat: int, now: float) -> bool:
        if not self._round_runs(repeat):
            return False
        if self.deadline is None:
            return True
        need = self._round_cost(repeat)
        return need is None or need <= self.deadline - now
