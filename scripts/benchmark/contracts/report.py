"""report.json as pydantic models: what `run.py report` writes and `run.py record/check` may rely on.

- `ReportDocument.model_validate(json.loads(text))` checks a report; `validate_report_file(path)` does it for a file
  and raises ValueError naming the first field at fault (`cells[0]: field 'layout' must be a string, got None`).
- Fields listed here are the contract; extra fields (per-repeat steady state, p-values, response-length spread,
  step-time series for plots, the calibration view) are allowed and documented in docs/benchmark/report.md.
- Non-finite floats are written as the strings "NaN" / "Infinity" (bench_metrics markers) and decoded before
  validation; a metric that was never reported is null, never 0.

Caveats:
- `samples` hold every steady-state step of each repeat, in step order; a step whose value is missing or non-finite
  is NaN there (so a consumer can refuse it); a metric the framework never reported has an empty list.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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


_EXPECTED = {"string_type": "string", "dict_type": "object", "list_type": "list", "int_type": "integer"}
_EXPECTED |= {"int_parsing": "integer", "float_type": "number", "float_parsing": "number", "bool_type": "boolean"}


def _field_error(data: Any, exc: ValidationError) -> str:
    """The first error as `cells[0]: field 'layout' must be a string, got None`."""
    error = exc.errors()[0]
    loc = list(error["loc"])
    parent, name = loc[:-1], loc[-1] if loc else "report"
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parent).lstrip(".")
    value = data
    for part in loc:
        value = value[part] if isinstance(value, (dict, list)) and _has(value, part) else None
    kind = _EXPECTED.get(error["type"])
    if error["type"] == "missing":
        kind = _TYPE_NAMES.get(_annotation_at(loc))
    message = f"must be a {kind}, got {value!r}" if kind else error["msg"]
    return f"{where}: field {name!r} {message}" if where else f"field {name!r} {message}"


_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "list"}


def _annotation_at(loc: list[Any]) -> Any:
    """The declared type of the field at `loc` (list items and dict values followed), its origin for generics."""
    annotation: Any = ReportDocument
    for part in loc:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part) if isinstance(part, str) else None
            annotation = field.annotation if field else None
        elif typing.get_origin(annotation) in (list, dict):
            annotation = typing.get_args(annotation)[-1]
        else:
            return None
    return typing.get_origin(annotation) or annotation


def _has(container: Any, key: Any) -> bool:
    return key in container if isinstance(container, dict) else isinstance(key, int) and key < len(container)


def validate_report_file(path: Path) -> ReportDocument:
    data = decode_nonfinite(json.loads(Path(path).read_text(encoding="utf-8")))
    try:
        return ReportDocument.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{path}: {_field_error(data, exc)}") from exc
