"""Why a running cell must be stopped: it exited non-zero, ran past its time limit, or stopped making steps.

- `WatchdogLimits`: cell_timeout_s (whole cell), first_step_timeout_s (start-up: model load, engine start, CUDA
  graphs), stall_timeout_s (no new step since the previous one). 0 disables a limit. `deadline`: the end of the
  run's time budget (runner/rounds.py), past which the cell is stopped.
- `Watchdog.check(now, exit_code)` returns None while the cell may continue, else a `CellOutcome` (state + reason).
  A cell that exits 0 having made fewer steps than the plan's num_steps is failed, not complete; so is one that made
  more than num_steps + 1 (a trainer configured for another workload).

Caveats:
- A step counts when the metric sink shows it complete (see sink_follower); a framework that computes but does not
  log steps looks stalled.
- Hung health checks (slime#199) and an idle GPU (slime#385) are caught only as a stall: the watchdog reads no GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class WatchdogLimits:
    cell_timeout_s: float = 4 * 3600.0
    first_step_timeout_s: float = 3600.0
    stall_timeout_s: float = 1200.0


@dataclass(frozen=True)
class CellOutcome:
    state: str
    """complete or failed."""
    reason: str | None


@dataclass
class Watchdog:
    limits: WatchdogLimits
    started_at: float
    num_steps: int | None
    steps_done: int = 0
    last_step_at: float | None = None
    deadline: float | None = None
    """When the run's time budget ends (same clock as `started_at`); None: no budget."""

    def on_step(self, now: float, steps_done: int) -> None:
        if steps_done > self.steps_done:
            self.steps_done = steps_done
            self.last_step_at = now

    def check(self, now: float, exit_code: int | None) -> CellOutcome | None:
        if exit_code is not None:
            return self._verdict_on_exit(exit_code)
        limits = self.limits
        elapsed = now - self.started_at
        if self.deadline is not None and now > self.deadline:
            return CellOutcome("failed", f"budget: --budget-minutes ended after {elapsed:.0f} s of this launch")
        if limits.cell_timeout_s and elapsed > limits.cell_timeout_s:
            return CellOutcome(
                "failed", f"time limit: ran {elapsed:.0f} s > --cell-timeout-s {limits.cell_timeout_s:g}"
            )
        if self.last_step_at is None:
            if limits.first_step_timeout_s and elapsed > limits.first_step_timeout_s:
                return CellOutcome(
                    "failed",
                    f"stalled: no step within {elapsed:.0f} s of start "
                    f"(--first-step-timeout-s {limits.first_step_timeout_s:g})",
                )
        elif limits.stall_timeout_s and now - self.last_step_at > limits.stall_timeout_s:
            return CellOutcome(
                "failed",
                f"stalled: no new step for {now - self.last_step_at:.0f} s after step {self.steps_done} "
                f"(--stall-timeout-s {limits.stall_timeout_s:g})",
            )
        return None

    def _verdict_on_exit(self, exit_code: int) -> CellOutcome:
        if exit_code != 0:
            how = f"killed by signal {-exit_code}" if exit_code < 0 else f"exited with code {exit_code}"
            return CellOutcome("failed", f"{how} after {self.steps_done} of {self.num_steps or '?'} steps")
        if self.num_steps is not None and self.steps_done < self.num_steps:
            return CellOutcome("failed", f"exited with code 0 after only {self.steps_done} of {self.num_steps} steps")
        if self.num_steps is not None and self.steps_done > self.num_steps + 1:  # one more: Miles's last rollout
            return CellOutcome(
                "failed",
                f"exited with code 0 after {self.steps_done} steps, more than the plan's {self.num_steps}: "
                "the trainer did not run the planned workload",
            )
        return CellOutcome("complete", None)
