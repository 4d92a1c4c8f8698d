"""The learning guard's power, with the plan's cost at the repeats it needs: the lines a learning run's plan summary,
`ab` and `check` print (analysis/learning_power.py for the power, plan/cost.py's `plan_cost` for the cost).

- `plan_power_lines(data, cost, store_url)`: before a learning run spends its GPU time: per planted difference, the
  repeats a side that see it 9 times in 10 over the plan's steps, from the spread between repeats of the same cells'
  recorded runs (`--cost-store`) or the registry's stated spread, and the plan's cost at that number.
- `report_power_lines(report, plan_data, measured)`: the same from a report's learning rows (the spread between its
  own repeats, or the stated one), for `ab` and `check`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scripts.benchmark.plan.cost import PlanCost


def cost_words(cost: PlanCost, repeats: int) -> str:
    return (
        f"{cost.wall_s('typical', repeats) / 60:.0f}-{cost.wall_s('upper', repeats) / 60:.0f} min node wall time, "
        f"{cost.gpu_hours('typical', repeats):.1f}-{cost.gpu_hours('upper', repeats):.1f} GPU-hours"
    )


def statement_line(statement: Mapping[str, Any], cost: PlanCost | None, subject: str = "this run") -> str:
    """One planted difference: its power with the run's repeats, the repeats for 9 in 10 and their cost."""
    needed, repeats = statement["repeats_needed"], statement["repeats"]
    line = f"learning power, {statement['planted']}: {statement['power']:.0%} with {repeats} repeat(s) a side; "
    if needed is None:
        return line + "more than 64 a side for 90%"
    line += f"90% with {needed} a side"
    if cost is not None:
        line += f" ({cost_words(cost, needed)})"
    return line + (f"; {subject} has fewer" if repeats < needed else "")


def plan_power_lines(data: Mapping[str, Any], cost: PlanCost, store_url: str | None) -> list[str]:
    """A plan's power statements (module docstring), with the source of the spreads first."""
    from scripts.benchmark.analysis.learning import learning_settings, not_comparable_reason
    from scripts.benchmark.analysis.learning_power import history_spreads, power_statement, stated_spreads

    from miles.utils.bench_metrics import LEARNING_SIGNALS

    recorded = _recorded_repeats(data, store_url) if store_url else {}
    settings = learning_settings(dict(data))
    family = sum(1 for n in LEARNING_SIGNALS if settings.margin(n) is not None)
    steps = min(cell["num_steps"] for cell in data["cells"])
    lines = []
    for name in LEARNING_SIGNALS:
        spreads = history_spreads(name, recorded.get(name, [])) or stated_spreads(name)
        drift_only = name == "entropy" and not_comparable_reason(name, dict(data)) is not None
        statement = power_statement(
            name,
            steps,
            settings.margin(name),
            spreads,
            alpha=settings.alpha,
            family=family,
            repeats=cost.repeats,
            drift_only=drift_only,
        )
        if statement is not None:
            lines.append(f"  {statement_line(statement, cost, 'this plan')} [{steps} steps; {spreads.source}]")
    return lines


def _recorded_repeats(data: Mapping[str, Any], store_url: str) -> dict[str, list[list[float]]]:
    """Signal -> the per-repeat window means of each recorded run of the plan's cells (history/learning_check.py);
    nothing when the store cannot be read (the plan's cost step has said why)."""
    from scripts.benchmark.history.learning_check import recorded_repeat_values

    try:
        return recorded_repeat_values(store_url, data)
    except Exception:  # the cost step reports an unreadable store; the power then uses the stated spreads
        return {}


def report_power_lines(report, plan_data: Mapping[str, Any] | None, measured: Mapping | None = None) -> list[str]:
    """Per pair and planted difference of a report (its rows' `power`), with the plan's cost at the repeats needed
    (`measured`: history/costs.py's per-cell costs, where a store is at hand)."""
    from scripts.benchmark.plan.cost import plan_cost

    cost = plan_cost(plan_data, repeats=1, measured=measured) if plan_data and plan_data.get("cells") else None
    lines = []
    for pair in report.learning:
        for row in pair.signals:
            if row.power is not None:
                source = row.power.spread_source
                line = statement_line(row.power.model_dump(), cost)
                lines.append(f"{pair.backend}/{pair.layout} {line} [{row.paired_steps} paired steps; {source}]")
    return lines


def read_plan_data(run_dir: Path) -> dict[str, Any] | None:
    """A run folder's plan.json as a dict, for its cost; None when it is missing or unreadable (no cost then)."""
    try:
        data = json.loads((Path(run_dir) / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def history_power_lines(store, store_url: str, runs, report, plan_data: Mapping[str, Any] | None) -> list[str]:
    """`check`'s statements: the spread between repeats of the trusted runs of the pair's two series (the history),
    else the report's own; the cost at the repeats needed from the plan, with the store's measured step times."""
    from scripts.benchmark.analysis.learning_power import history_spreads, power_statement
    from scripts.benchmark.history.costs import measured_costs
    from scripts.benchmark.history.learning_check import series_repeat_values
    from scripts.benchmark.plan.cost import plan_cost

    cost = None
    if plan_data and plan_data.get("cells"):
        cost = plan_cost(plan_data, repeats=1, measured=measured_costs(store_url, plan_data))
    series_of = {run.cell_id: run.series.label() for run in runs}
    lines = []
    for pair in report.learning:
        cells = (pair.candidate_cell, pair.reference_cell)
        recorded = series_repeat_values(store, [series_of[c] for c in cells if c in series_of])
        family = sum(1 for row in pair.signals if row.margin is not None)
        for row in pair.signals:
            spreads = history_spreads(row.signal, recorded.get(row.signal, [])) if row.power else None
            statement = row.power.model_dump() if row.power else None
            if spreads is not None:
                statement = power_statement(
                    row.signal,
                    row.paired_steps,
                    row.margin,
                    spreads,
                    alpha=pair.alpha,
                    family=family,
                    repeats=min(row.repeats or [1]),
                    drift_only="drift" in row.tested,
                )
            if statement is not None:
                source = statement["spread_source"]
                line = statement_line(statement, cost)
                lines.append(f"{pair.backend}/{pair.layout} {line} [{row.paired_steps} paired steps; {source}]")
    return lines
