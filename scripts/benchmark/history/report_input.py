"""Turn a run folder's report.json into the runs the history records, and CI provenance into fields.

- `read_report_runs(run_dir)` reads report.json through its typed definition (contracts/report.py) and returns one
  `RunToRecord` per cell; a field that is missing or of the wrong type raises `ValueError` naming it.
- A run-level metric value is the median of the per-repeat medians of the steady-state samples (one slow repeat
  cannot move it); without samples it falls back to the report's summary median.
- `provenance_from_env` reads the GitHub Actions variables (GITHUB_SHA, GITHUB_RUN_ID, GITHUB_EVENT_NAME, GITHUB_REF);
  explicit CLI values win.

Caveats:
- Non-finite values ("NaN"/"Infinity" string markers, or JSON NaN) become None: the check treats them as an error.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from pathlib import Path

from scripts.benchmark.contracts.history_record import MetricValue, Provenance, RunToRecord, SeriesKey
from scripts.benchmark.contracts.report import REPORT_FILE, CellModel, ReportDocument, SummaryModel, read_run_report
from scripts.benchmark.history.learning_check import learning_metric_values

from miles.utils.bench_metrics import METRICS, is_finite_number


def read_report(run_dir: Path) -> ReportDocument:
    """report.json validated through its typed definition; a run without a spec hash cannot be recorded."""
    report = read_run_report(run_dir)
    path = Path(run_dir) / REPORT_FILE
    if not report.spec_hash:
        raise ValueError(f"{path}: spec_hash is {report.spec_hash!r}; a run without a spec hash has no series")
    return report


def read_report_runs(run_dir: Path) -> list[RunToRecord]:
    """One run per cell of the report, with every metric the cell summarises (the registry's shown metrics); the
    series names the cell's framework as data, so two sides of one framework are two cells of one series family."""
    report = read_report(run_dir)
    runs = []
    for cell in report.cells:
        values = [
            _metric_value(name, summary, cell.samples.get(name)) for name, summary in sorted(cell.summaries.items())
        ]
        series = SeriesKey(
            preset=report.preset,
            framework=cell.framework,
            side=cell.side,
            backend=cell.backend,
            layout=cell.layout,
            hardware=cell.hardware,
            spec_hash=report.spec_hash,
            repeats=cell.repeats,
            sink=cell.sink,
        )
        runs.append(
            RunToRecord(
                series=series,
                cell_id=cell.id,
                report_generated_at=report.generated_at,
                run_dir=str(report.run_dir or run_dir),
                environment=cell.environment,
                values=values + learning_metric_values(cell) + launch_metric_values(cell),
            )
        )
    return runs


LAUNCH_PREFIX = "launch."
"""History metrics of a cell's launches (not of its steps): what the cost model reads back (history/costs.py)."""


def launch_metric_values(cell: CellModel) -> list[MetricValue]:
    """The cell's launch wall time and start-up as history values: medians over its repeats, each repeat kept."""
    return [
        MetricValue(
            metric=LAUNCH_PREFIX + key,
            value=getattr(cell.launch, key),
            repeat_values=[row[key] for row in cell.launch.repeats],
            n=len(cell.launch.repeats),
            unit="s",
            direction="lower",
        )
        for key in ("wall_s", "startup_s")
    ]


def _metric_value(name: str, summary: SummaryModel, samples: list[list[float]] | None) -> MetricValue:
    repeat_medians = []
    for repeat in samples or []:
        finite = [float(x) for x in repeat if math.isfinite(x)]
        if len(finite) < len(repeat) or not finite:
            repeat_medians.append(math.nan)  # a non-finite step makes the repeat (and the run) unusable
        else:
            repeat_medians.append(statistics.median(finite))
    if repeat_medians:
        value = statistics.median(repeat_medians) if all(map(math.isfinite, repeat_medians)) else None
    else:
        value = summary.median if is_finite_number(summary.median) else None
    spec = METRICS.get(name)
    return MetricValue(
        metric=name,
        value=value,
        repeat_values=repeat_medians,
        ci_low=summary.ci_low if is_finite_number(summary.ci_low) else None,
        ci_high=summary.ci_high if is_finite_number(summary.ci_high) else None,
        n=summary.n,
        unit=summary.unit or (spec.unit if spec else None),
        direction=spec.direction if spec else summary.direction,
    )


def provenance_from_env(
    *, commit: str | None, pr: int | None, ci_run_id: str | None, trigger: str | None, ref: str | None
) -> Provenance:
    """CLI values first, then GitHub Actions' environment (a PR number is parsed from refs/pull/<n>/merge)."""
    env_ref = os.environ.get("GITHUB_REF")
    if pr is None and env_ref:
        match = re.fullmatch(r"refs/pull/(\d+)/merge", env_ref)
        pr = int(match.group(1)) if match else None
    return Provenance(
        commit=commit or os.environ.get("GITHUB_SHA"),
        pr=pr,
        ci_run_id=ci_run_id or os.environ.get("GITHUB_RUN_ID"),
        trigger=trigger or os.environ.get("GITHUB_EVENT_NAME") or "manual",
        ref=ref or env_ref,
    )
