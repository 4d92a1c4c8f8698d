"""Learning signals in the history: stored with each recorded cell, and a run whose learning moved reported as such.

- `learning_metric_values(cell)`: a report cell's per-signal values (analysis/learning.py::cell_learning) as history
  metric values named `learning.<signal>`, with no better direction: they are never gated as throughput.
- `learning_changes(store, runs, window)`: per run and signal, the candidate against the median of the last
  `window` trusted values of its series; a move beyond the signal's margin (the one the run's report judged with:
  the spec's `learning.margins`, else bench_metrics.LEARNING_SIGNALS; absolute or relative) gives a "learning
  changed" note. A PR that changes what the policy learns is named as such, beside (never inside) the speed
  verdict, and does not change the check's exit code.
- `recorded_repeat_values(store_url, plan)` / `series_repeat_values(store, series)`: per signal, the per-repeat
  window means of recorded runs (of a plan's cells, or of a series' trusted runs): the spread between runs that the
  learning guard's power statements use (analysis/learning_power.py).
"""

from __future__ import annotations

import math
import statistics

from scripts.benchmark.contracts.history_record import MetricValue, RunToRecord
from scripts.benchmark.contracts.report import CellModel
from scripts.benchmark.history.store import HistoryStore, baseline_runs

from miles.utils.bench_metrics import LEARNING_SIGNALS, is_finite_number

LEARNING_PREFIX = "learning."
SPREAD_RUNS = 20
"""The newest recorded runs a spread between repeats is pooled over."""


def learning_metric_values(cell: CellModel) -> list[MetricValue]:
    """Every learning signal of a report cell as a history value (None where the cell has none)."""
    values = []
    for name in LEARNING_SIGNALS:
        summary = cell.learning.get(name)
        value = summary.value if summary is not None else None
        repeats = [float(v) for v in summary.repeat_values] if summary is not None else []
        values.append(
            MetricValue(
                metric=LEARNING_PREFIX + name,
                value=float(value) if is_finite_number(value) else None,
                repeat_values=repeats,
                n=len(repeats),
                unit=LEARNING_SIGNALS[name].unit,
            )
        )
    return values


def moved_beyond_margin(name: str, baseline: float, candidate: float, margin: float | None) -> float | None:
    """The change (absolute, or relative to the level for relative signals) when it leaves the margin, else None."""
    if margin is None:
        return None
    spec = LEARNING_SIGNALS[name]
    if spec.margin_kind == "relative":
        if spec.level(baseline) <= 0 or spec.level(candidate) <= 0:
            return None
        change = spec.level(candidate) / spec.level(baseline) - 1
        return change if abs(math.log1p(change)) > math.log1p(margin) else None
    change = candidate - baseline
    return change if abs(change) > margin else None


def _note(cell_id: str, name: str, baseline: float, candidate: float, change: float, margin: float) -> str:
    spec = LEARNING_SIGNALS[name]
    shown = f"{change * 100:+.1f}%" if spec.margin_kind == "relative" else f"{change:+.4g}"
    margin = f"±{margin * 100:.0f}%" if spec.margin_kind == "relative" else f"±{margin:g}"
    return (
        f"learning changed: `{cell_id}` {name} {baseline:.4g} -> {candidate:.4g} ({shown}, margin {margin}) "
        "against the trusted history: this change alters what the policy learns, not only its speed."
    )


def learning_changes(
    store: HistoryStore, runs: list[RunToRecord], *, window: int = 10, margins: dict[str, float | None] | None = None
) -> list[str]:
    """`margins`: the ones the run's report judged with (report.json `learning_margins`); defaults where absent."""
    margins = {name: spec.margin for name, spec in LEARNING_SIGNALS.items()} | (margins or {})
    notes = []
    for run in runs:
        trusted = baseline_runs(store.runs(run.series.label()))
        candidate = {v.metric: v.value for v in run.values}
        for name in LEARNING_SIGNALS:
            value = candidate.get(LEARNING_PREFIX + name)
            history = store.values([r.id for r in trusted], LEARNING_PREFIX + name)
            recent = [history[r.id] for r in trusted if is_finite_number(history.get(r.id))][-window:]
            if not is_finite_number(value) or not recent:
                continue
            baseline = statistics.median(recent)
            change = moved_beyond_margin(name, baseline, value, margins.get(name))
            if change is not None:
                notes.append(_note(run.cell_id, name, baseline, value, change, margins[name]))
    return notes


def series_repeat_values(store: HistoryStore, series: list[str]) -> dict[str, list[list[float]]]:
    """Signal -> each trusted run's per-repeat values, over the newest SPREAD_RUNS runs of each series."""
    ids = [r.id for label in series for r in baseline_runs(store.runs(label))[-SPREAD_RUNS:]]
    return _repeat_values(store, ids)


def recorded_repeat_values(store_url: str, plan: dict) -> dict[str, list[list[float]]]:
    """Signal -> each recorded run's per-repeat values, over the newest SPREAD_RUNS runs of each cell of `plan`
    (same preset, spec hash and cell: a learning run's own series)."""
    with HistoryStore(store_url, create=False) as store:
        ids = [
            run_id
            for cell in plan["cells"]
            for run_id in store.latest_cell_runs(
                preset=plan.get("preset"), spec_hash=plan["spec_hash"], cell_id=cell["id"], limit=SPREAD_RUNS
            )
        ]
        return _repeat_values(store, ids)


def _repeat_values(store: HistoryStore, ids: list[int]) -> dict[str, list[list[float]]]:
    out = {}
    for name in LEARNING_SIGNALS:
        stored = store.repeat_values(ids, LEARNING_PREFIX + name)
        out[name] = [[v for v in values if is_finite_number(v)] for values in stored.values()]
    return out
