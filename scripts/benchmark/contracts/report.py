# doc-dev: docs/benchmark.md
"""report.json (contract 3) as pydantic models: what `run.py report` writes and `run.py record/check` may rely on.

- `ReportDocument.model_validate(json.loads(text))` checks a report; `validate_report_file(path)` does it for a file.
- Fields listed here are the contract; extra fields (per-repeat steady state, p-values, response-length spread,
  step-time series for plots, the calibration view) are allowed and documented in docs/benchmark.md.
- Non-finite floats are written as the strings "NaN" / "Infinity" (bench_metrics markers) and decoded before
  validation; a metric that was never reported is null, never 0.

Caveats:
- `samples` hold every steady-state step of each repeat, in step order; a step whose value is missing or non-finite
  is NaN there (so a consumer can refuse it); a metric the framework never reported has an empty list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from miles.utils.bench_metrics import decode_nonfinite


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class SteadyStateModel(_Open):
    start_step: int | None
    reached: bool
    method: str


class SummaryModel(_Open):
    median: float | None
    ci_low: float | None
    ci_high: float | None
    n: int = Field(ge=0)
    method: str
    unit: str
    direction: Literal["lower", "higher"]


class CellModel(_Open):
    id: str
    framework: Literal["miles", "verl"]
    backend: str
    layout: str
    repeats: int = Field(ge=1)
    hardware: str | None
    environment: dict[str, Any]
    steady_state: SteadyStateModel
    summaries: dict[str, SummaryModel]
    samples: dict[str, list[list[float]]]


class ComparisonModel(_Open):
    backend: str
    layout: str
    metric: str
    miles: float | None
    verl: float | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    significant: bool
    method: str


class ReportDocument(_Open):
    schema_version: Literal[1]
    run_dir: str
    generated_at: str
    spec_hash: str | None
    preset: str | None
    cells: list[CellModel]
    comparisons: list[ComparisonModel]
    attribution: list[dict[str, Any]]
    parity: dict[str, Any] | list[Any] | None
    practical_thresholds: dict[str, float] = Field(default_factory=dict)
    """Per metric, the relative change the headline's verdicts read intervals against (empty in older documents)."""


def validate_report_file(path: Path) -> ReportDocument:
    return ReportDocument.model_validate(decode_nonfinite(json.loads(Path(path).read_text(encoding="utf-8"))))
