"""Glue between the history store and the pure statistics: judge a run folder, find change points per series.

- `check_runs(store, runs, settings)` returns one `MetricCheck` per (cell, gated metric) plus notes naming the
  baseline runs and commits; required metrics (step_time_s, and every gated metric the baseline has) that are missing
  or non-finite in the candidate are ERROR.
- `series_changes(store, ...)` runs change-point detection on the trusted values of every series and gated metric and
  maps each change point to its run ids and commit range.

Caveats:
- Only trusted runs since the latest baseline reset form a baseline; change points use every trusted run.
"""

from __future__ import annotations

from dataclasses import dataclass

from scripts.benchmark.common.markdown import markdown_table
from scripts.benchmark.contracts.history_record import RunToRecord, StoredRun
from scripts.benchmark.history.change_points import ChangePoint, find_change_points
from scripts.benchmark.history.check import (
    OUTLIER_SDS,
    CheckSettings,
    MetricCheck,
    Verdict,
    check_metric,
    step_time_family,
)
from scripts.benchmark.history.store import HistoryStore, baseline_runs

from miles.utils.bench_metrics import is_finite_number


def check_runs(
    store: HistoryStore, runs: list[RunToRecord], settings: CheckSettings
) -> tuple[list[MetricCheck], list[str]]:
    checks: list[MetricCheck] = []
    notes: list[str] = []
    for run in runs:
        label = run.series.label()
        stored = store.runs(label)
        if (own := store.recorded_run_id(run)) is not None:
            # `check` after `record` of the same run: judged against the history before it, never against itself
            stored = [r for r in stored if r.id < own]
            notes.append(
                f"`{run.cell_id}`: this run is already recorded as run {own}; judged against the runs before it."
            )
        trusted = baseline_runs(stored)
        candidate = {v.metric: v.value for v in run.values}
        if not trusted:
            notes.append(f"`{run.cell_id}`: cold start, no trusted history for series `{label}`; passes.")
        for metric, gate in settings.gates.items():
            by_id = store.values([r.id for r in trusted], metric)
            window_runs = [r for r in trusted if is_finite_number(by_id.get(r.id))]
            history = [by_id[r.id] for r in window_runs]
            if not is_finite_number(candidate.get(metric)) and not gate.required and not history:
                continue  # not measured in this series at all (e.g. MFU on a GPU without a peak entry)
            recent = history[-settings.window :]
            anchor_end = len(history) - settings.drift_horizon
            anchor = history[max(0, anchor_end - settings.anchor_window) : anchor_end] if anchor_end > 0 else []
            checks.append(
                check_metric(
                    cell_id=run.cell_id,
                    metric=metric,
                    candidate=candidate.get(metric),
                    recent=recent,
                    anchor=anchor,
                    settings=settings,
                    num_cells=len(runs),
                )
            )
            if metric == "step_time_s" and recent:
                used = window_runs[-settings.window :]
                notes.append(
                    f"`{run.cell_id}`: baseline = trusted runs {_id_range(used)} "
                    f"(commits {_commit_range(used)}) of series `{label}`; "
                    f"runs beyond {OUTLIER_SDS:g} robust SDs are left out."
                )
    checks = step_time_family(checks)
    if any(c.verdict is Verdict.ERROR for c in checks):
        notes.append("ERROR: a metric the check needs is missing or non-finite (NaN/Inf); that is not a pass.")
    return checks, notes


@dataclass(frozen=True, kw_only=True)
class SeriesChange:
    series: str
    metric: str
    point: ChangePoint
    last_run_before: StoredRun
    first_run_after: StoredRun


@dataclass(frozen=True, kw_only=True)
class SeriesTrace:
    """What the trend plot draws: every run with a value, trusted or not, and the detected change indices."""

    series: str
    metric: str
    runs: list[StoredRun]
    values: list[float | None]
    trusted_runs: list[StoredRun]
    changes: list[SeriesChange]


def series_changes(
    store: HistoryStore,
    *,
    metrics: list[str],
    series_filter: str | None,
    max_pvalue: float,
    min_segment: int,
    window: int,
    min_magnitude: float,
) -> list[SeriesTrace]:
    traces = []
    for label in store.list_series():
        if series_filter and series_filter not in label:
            continue
        runs = store.runs(label)
        for metric in metrics:
            by_id = store.values([r.id for r in runs], metric)
            if not any(is_finite_number(v) for v in by_id.values()):
                continue
            trusted = [r for r in runs if r.trusted and is_finite_number(by_id.get(r.id))]
            points = find_change_points(
                [by_id[r.id] for r in trusted],
                max_pvalue=max_pvalue,
                min_segment=min_segment,
                window=window,
                min_magnitude=min_magnitude,
            )
            changes = [
                SeriesChange(
                    series=label,
                    metric=metric,
                    point=p,
                    last_run_before=trusted[p.index - 1],
                    first_run_after=trusted[p.index],
                )
                for p in points
            ]
            values = [by_id.get(r.id) for r in runs]
            traces.append(
                SeriesTrace(
                    series=label, metric=metric, runs=runs, values=values, trusted_runs=trusted, changes=changes
                )
            )
    return traces


def render_changes_markdown(traces: list[SeriesTrace], *, plots: dict[tuple[str, str], str]) -> str:
    lines = ["### Benchmark history: change points", ""]
    rows = []
    for t in traces:
        if not t.changes:
            rows.append([t.series, t.metric, str(len(t.trusted_runs)), "none", "-", "-", "-", "-"])
        for c in t.changes:
            rows.append(
                [t.series, t.metric, str(len(t.trusted_runs)), f"run {c.first_run_after.id}"]
                + [f"{c.point.mean_before:.4g} -> {c.point.mean_after:.4g}", f"{c.point.change:+.1%}"]
                + [f"{c.point.p_value:.2g}", f"{c.last_run_before.commit or '?'}..{c.first_run_after.commit or '?'}"]
            )
    header = ["series", "metric", "trusted runs", "change point (first run)", "before -> after", "change", "p"]
    lines.append(markdown_table([*header, "commit range"], rows))
    if plots:
        lines += ["", "Trend plots:", ""]
        lines += [f"- {series} {metric}: `{path}`" for (series, metric), path in sorted(plots.items())]
    return "\n".join(lines) + "\n"


def _id_range(runs: list[StoredRun]) -> str:
    return f"{runs[0].id}..{runs[-1].id}" if len(runs) > 1 else str(runs[0].id)


def _commit_range(runs: list[StoredRun]) -> str:
    first, last = runs[0].commit or "?", runs[-1].commit or "?"
    return first if first == last else f"{first[:12]}..{last[:12]}"
