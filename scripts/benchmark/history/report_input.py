# doc-dev: docs/benchmark.md
"""Turn a run folder's report.json (contract 3) into the runs the history records, and CI provenance into fields.

- `read_report_runs(run_dir)` validates report.json and returns one `RunToRecord` per cell; a field that is missing or
  of the wrong type raises `ValueError` naming it.
- A run-level metric value is the median of the per-repeat medians of the steady-state samples (one slow repeat
  cannot move it); without samples it falls back to the report's summary median.
- `provenance_from_env` reads the GitHub Actions variables (GITHUB_SHA, GITHUB_RUN_ID, GITHUB_EVENT_NAME, GITHUB_REF);
  explicit CLI values win.

Caveats:
- Non-finite values ("NaN"/"Infinity" string markers, or JSON NaN) become None: the check treats them as an error.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from pathlib import Path
from typing import Any

from miles.utils.bench_metrics import METRICS, decode_nonfinite
from scripts.benchmark.history.store import MetricValue, Provenance, RunToRecord, SeriesKey

REPORT_FILE = "report.json"


def read_report(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / REPORT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `python scripts/benchmark/run.py report {run_dir}` first")
    report = decode_nonfinite(json.loads(path.read_text(encoding="utf-8")))
    if report.get("schema_version") != 1:
        raise ValueError(f"{path}: schema_version is {report.get('schema_version')!r}, expected 1")
    if not report.get("spec_hash"):
        raise ValueError(f"{path}: spec_hash is {report.get('spec_hash')!r}; a run without a spec hash has no series")
    for key, kind in (("spec_hash", str), ("generated_at", str), ("cells", list)):
        if not isinstance(report.get(key), kind):
            raise ValueError(f"{path}: field {key!r} must be a {kind.__name__}, got {report.get(key)!r}")
    return report


def read_report_runs(run_dir: Path) -> list[RunToRecord]:
    """One run per cell of the report, with every metric the cell summarises."""
    report = read_report(run_dir)
    runs = []
    for i, cell in enumerate(report["cells"]):
        where = f"report.json cells[{i}]"
        for key in ("id", "framework", "backend", "layout"):
            if not isinstance(cell.get(key), str):
                raise ValueError(f"{where}: field {key!r} must be a string, got {cell.get(key)!r}")
        summaries = cell.get("summaries")
        if not isinstance(summaries, dict):
            raise ValueError(f"{where} ({cell['id']}): field 'summaries' must be an object")
        samples = cell.get("samples") or {}
        values = [
            _metric_value(name, summary, samples.get(name), f"{where}.summaries.{name}")
            for name, summary in sorted(summaries.items())
        ]
        runs.append(
            RunToRecord(
                series=SeriesKey(
                    preset=report.get("preset"),
                    framework=cell["framework"],
                    backend=cell["backend"],
                    layout=cell["layout"],
                    hardware=cell.get("hardware"),
                    spec_hash=report["spec_hash"],
                ),
                cell_id=cell["id"],
                report_generated_at=report["generated_at"],
                run_dir=str(report.get("run_dir") or run_dir),
                environment=cell.get("environment") or {},
                values=values,
            )
        )
    return runs


def _metric_value(name: str, summary: Any, samples: Any, where: str) -> MetricValue:
    if not isinstance(summary, dict):
        raise ValueError(f"{where} must be an object, got {summary!r}")
    repeat_medians = []
    for k, repeat in enumerate(samples or []):
        if not isinstance(repeat, list):
            raise ValueError(f"{where}: samples[{k}] must be a list of floats")
        finite = [float(x) for x in repeat if _is_finite(x)]
        if len(finite) < len(repeat) or not finite:
            repeat_medians.append(math.nan)  # a non-finite step makes the repeat (and the run) unusable
        else:
            repeat_medians.append(statistics.median(finite))
    if repeat_medians:
        value = statistics.median(repeat_medians) if all(map(math.isfinite, repeat_medians)) else None
    else:
        value = float(summary["median"]) if _is_finite(summary.get("median")) else None
    spec = METRICS.get(name)
    return MetricValue(
        metric=name,
        value=value,
        repeat_values=repeat_medians,
        ci_low=float(summary["ci_low"]) if _is_finite(summary.get("ci_low")) else None,
        ci_high=float(summary["ci_high"]) if _is_finite(summary.get("ci_high")) else None,
        n=int(summary.get("n") or 0),
        unit=summary.get("unit") or (spec.unit if spec else None),
        direction=spec.direction if spec else summary.get("direction"),
    )


def _is_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


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
