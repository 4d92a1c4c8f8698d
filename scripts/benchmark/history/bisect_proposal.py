"""Where a bisect starts: the change points at which a nightly series got slower (history/gate.py `series_changes`),
each as the range `run.py bisect` walks (the commit of the last run before .. the commit of the first run after) and
the command that does it.

- `slowdowns(traces, frameworks)`: the step-time change points where the mean went up, of the series of a framework
  in `frameworks` (those whose adapter runs a checkout) whose side is the framework itself (a PR check's or a
  bisect's base side is not the nightly's), with two different recorded commits around them; newest first.
- `Proposal.command()`: the `run.py bisect` command line; `proposals_markdown` the lines `run.py history` adds to
  history.md under its change points (the nightly posts that file).

Caveats:
- The range is the commits the history recorded (the nightly records the commit its workflow ran on): meaningful for
  the framework whose code that commit is. A change point between two runs of one commit is not a code change.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from scripts.benchmark.history.gate import SeriesTrace

METRIC = "step_time_s"
SERIES_PARTS = 6
"""preset / framework[@side] / backend / layout / hardware / spec_hash (then the design parts)."""


@dataclass(frozen=True, kw_only=True)
class Proposal:
    series: str
    preset: str
    framework: str
    backend: str
    good: str
    bad: str
    change: float
    first_run_after: int

    def command(self) -> str:
        words = ["python", "scripts/benchmark/run.py", "bisect", "--good", self.good[:12], "--bad", self.bad[:12]]
        words += ["--preset", self.preset, "--backend", self.backend, "--framework", self.framework, "--repo", "."]
        words += ["--output-dir", f"bisect-{self.bad[:12]}"]
        return " ".join(shlex.quote(w) for w in words)


def slowdowns(traces: list[SeriesTrace], frameworks: set[str]) -> list[Proposal]:
    """The change points a bisect can walk (module docstring), newest first."""
    found = []
    for trace in traces:
        parts = trace.series.split("/")
        if trace.metric != METRIC or len(parts) < SERIES_PARTS or parts[1] not in frameworks or parts[0] == "-":
            continue
        for change in trace.changes:
            good, bad = change.last_run_before.commit, change.first_run_after.commit
            if change.point.change <= 0 or not good or not bad or good == bad:
                continue
            found.append(
                Proposal(
                    series=trace.series,
                    preset=parts[0],
                    framework=parts[1],
                    backend=parts[2],
                    good=good,
                    bad=bad,
                    change=change.point.change,
                    first_run_after=change.first_run_after.id,
                )
            )
    return sorted(found, key=lambda p: p.first_run_after, reverse=True)


def proposals_markdown(proposals: list[Proposal]) -> str:
    """history.md's bisect section: per slowdown, its range and the command (the workflow takes the same inputs)."""
    if not proposals:
        return ""
    lines = ["", "#### Bisect a slowdown", ""]
    for p in proposals:
        lines.append(
            f"- `{p.series}`: step time {p.change:+.1%} between commits {p.good[:12]}..{p.bad[:12]} (run "
            f"{p.first_run_after}): `{p.command()}` (or dispatch benchmark-bisect.yml with good={p.good[:12]} "
            f"bad={p.bad[:12]} preset={p.preset} backend={p.backend})"
        )
    return "\n".join(lines) + "\n"
