"""The main command's cost step (plan/cost.py): `--budget-minutes`, `--step-seconds`, `--cost-store`, `--sequential`
checked, the plan's cost written into plan.json, and a plan that does not fit its budget refused before anything is
written (exit 2, `UserError`, with what would fit)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scripts.benchmark.errors import UserError

if TYPE_CHECKING:
    from scripts.benchmark.contracts.sides import SidePair
    from scripts.benchmark.plan.cost import PlanCost

SEQUENTIAL_MAX_ROUNDS = 6
"""Rounds a sequential pair may run when --repeats is not given; the budget usually ends it sooner."""


@dataclass(frozen=True, kw_only=True)
class CostRequest:
    """The main command's cost options: `--sequential`, `--budget-minutes`, `--step-seconds`, `--cost-store`."""

    sequential: bool = False
    budget_minutes: float | None = None
    step_seconds: float | None = None
    cost_store: str | None = None

    def check(self) -> None:
        if self.budget_minutes is not None and not self.budget_minutes > 0:
            raise UserError(f"--budget-minutes must be > 0, got {self.budget_minutes:g}")
        if self.step_seconds is not None and not self.step_seconds > 0:
            raise UserError(f"--step-seconds must be > 0, got {self.step_seconds:g}")

    def repeats(self, given: int | None, sides: SidePair, backends: tuple[str, ...]) -> int:
        """The repeats to plan: given, else a sequential pair's most rounds, else the comparison default."""
        from scripts.benchmark.analysis.settings import COMPARISON_REPEATS

        if self.sequential:
            _check_sequential(sides, backends)
        if given is not None:
            return given
        if self.sequential:
            return SEQUENTIAL_MAX_ROUNDS
        return COMPARISON_REPEATS if sides.reference is not None else 1

    def estimate(self, data: dict[str, Any], repeats: int, *, pr_workload: bool) -> PlanCost:
        """The plan's cost (plan/cost.py) into plan.json; UserError when it does not fit --budget-minutes (nothing
        is written then), or when --cost-store cannot be read."""
        from scripts.benchmark.history.pair_check import MIN_REPEATS
        from scripts.benchmark.plan.cost import budget_problem, plan_cost

        data["workload"] = "pr" if pr_workload else "full"
        min_rounds = min(MIN_REPEATS, repeats) if self.sequential else None
        if min_rounds is not None:
            data["sequential"] = {"min_rounds": min_rounds, "max_rounds": repeats}
        measured, note = _measured_costs(data, self.cost_store) if self.cost_store else (None, None)
        cost = plan_cost(
            data, repeats=repeats, min_rounds=min_rounds, step_seconds=self.step_seconds, measured=measured
        )
        if note:
            cost.notes.append(note)
        data["cost"] = cost.to_json()
        if self.budget_minutes is not None:
            data["budget_minutes"] = self.budget_minutes
            problem = budget_problem(cost, self.budget_minutes)
            if problem:
                raise UserError(problem)
        return cost


def _check_sequential(sides: SidePair, backends: tuple[str, ...]) -> None:
    """A sequential run is the paired PR check's: two builds of one framework, one backend (one pair per round)."""
    if sides.reference is None or sides.reference.framework != sides.candidate.framework:
        raise UserError(
            "--sequential runs rounds of a head against its base: give two builds of one framework "
            "(--candidate NAME --candidate-root HEAD --reference NAME --reference-root BASE)"
        )
    if len(backends) != 1:
        raise UserError("--sequential judges one pair a round: give one --backend (fsdp or megatron)")


def _measured_costs(data: dict[str, Any], cost_store: str) -> tuple[dict[str, Any], str | None]:
    """Per cell, the step time and start-up its series measured in the history store (history/costs.py), and a note
    when the store does not exist yet (the model then estimates: a first run has nothing to read back)."""
    from scripts.benchmark.history.costs import measured_costs
    from scripts.benchmark.history.store import NoHistoryYet

    try:
        return measured_costs(cost_store, data), None
    except NoHistoryYet as exc:
        return {}, f"{str(exc).split(' (pass --create')[0]}: the cost model estimates every cell"
    except Exception as exc:  # an unreadable store is bad input of this command, never a traceback
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise UserError(f"--cost-store: {type(exc).__name__}: {first}") from exc
