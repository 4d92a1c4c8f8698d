"""A metrics.jsonl (schema v2, or v1 written before it) read as columns: one float array per report metric.

- `read_step_columns(path, names)` parses each line once (json.loads), checks its schema version and fields against
  `StepRecord`, and turns every field the report reads into a numpy column in step order. Per column: `values`
  (NaN where the step has no value or a non-finite one) and `measured` (False where the framework recorded null,
  True for a number, NaN or Inf), so the report can keep "not measured" and "measured as NaN" apart.
- Every metric of the registry (bench_metrics.METRICS) is read, so a field declared there reaches the report; the
  metrics of source "columns" (per-token costs, mean response length) are computed column-wise, with the rules of
  the record fields they come from: a missing input gives a missing value, a non-finite one NaN, a token count
  <= 0 missing.

- `flags`: each step's flags as its record carries them, plus what reading found: a step written on more than one
  line (`duplicate_line:metrics.jsonl`: the last line wins, as the runner's restart rule keeps the last attempt) and
  a field holding something that is not a number (`non_numeric:<field>`: left out, never read as "not measured").

Caveats:
- A truncated last line (a writer killed mid-line) is skipped, as bench_metrics.iter_records does; any other bad
  line raises.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from miles.utils.bench_metrics import METRICS, READABLE_SCHEMA_VERSIONS, StepRecord

_MARKERS = frozenset({"NaN", "Infinity", "-Infinity"})
_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(StepRecord))


@dataclass(frozen=True, kw_only=True)
class StepColumns:
    steps: np.ndarray
    values: dict[str, np.ndarray]
    """Metric name -> float column, NaN where the value is missing or non-finite."""
    measured: dict[str, np.ndarray]
    """Metric name -> bool column, False where the framework recorded null (not measured in that step)."""
    flags: tuple[tuple[str, ...], ...] = ()
    """Each step's flags (its record's, and what reading the line found); empty when not read."""

    def __len__(self) -> int:
        return len(self.steps)

    def select(self, keep: np.ndarray) -> StepColumns:
        return StepColumns(
            steps=self.steps[keep],
            values={n: v[keep] for n, v in self.values.items()},
            measured={n: v[keep] for n, v in self.measured.items()},
            flags=tuple(f for f, k in zip(self.flags, keep, strict=True) if k) if self.flags else (),
        )


class DamagedFile(ValueError):
    """A run-folder file that cannot be read at all (not UTF-8, not JSON): a half-copied or corrupted folder."""


def read_utf8(path: Path) -> str:
    """The text of a run-folder file, or DamagedFile naming it."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedFile(
            f"{path} is damaged: not UTF-8 text (byte {exc.start}); was the folder fully copied?"
        ) from exc


def _parse_lines(path: Path) -> list[dict[str, Any]]:
    text = read_utf8(path)
    lines = [line for line in text.split("\n") if line.strip()]
    try:
        # One parse of all lines as a JSON array: a tenth of the time of a json.loads call per line.
        rows = _loads("[" + ",".join(lines) + "]")
    except ValueError:  # json.JSONDecodeError and orjson.JSONDecodeError are both ValueErrors
        rows = _parse_one_by_one(text.split("\n"))
    for index, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
            found = row.get("schema_version") if isinstance(row, dict) else row
            raise ValueError(
                f"{path}: line {index + 1}: unsupported schema_version {found!r}, "
                f"expected one of {READABLE_SCHEMA_VERSIONS}"
            )
        unknown = row.keys() - _RECORD_FIELDS
        if unknown:
            raise ValueError(f"{path}: line {index + 1} has fields the schema does not know: {sorted(unknown)}")
    rows.sort(key=lambda r: r["step"])
    return _one_row_per_step(rows)


def _one_row_per_step(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A step written on several lines is one step: its last line (rows are in step order, lines in file order)."""
    last: dict[Any, dict[str, Any]] = {}
    lines: dict[Any, int] = {}
    for row in rows:
        last[row["step"]] = row
        lines[row["step"]] = lines.get(row["step"], 0) + 1
    return [
        row if lines[step] == 1 else {**row, "flags": [*(row.get("flags") or []), "duplicate_line:metrics.jsonl"]}
        for step, row in last.items()
    ]


def _loads(text: str) -> Any:
    """orjson where installed (3x faster on a 10,000-step file), the standard library otherwise."""
    try:
        import orjson
    except ImportError:
        return json.loads(text)
    return orjson.loads(text)


def _parse_one_by_one(lines: list[str]) -> list[Any]:
    """Line by line: a truncated last line (no trailing newline: the writer died mid-line) is skipped."""
    rows = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if index == len(lines) - 1:
                break
            raise
    return rows


def _column(raw: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """(values, measured) of a list of JSON values: numbers, null, or the strings "NaN"/"Infinity"/"-Infinity"."""
    # map over a C function: no Python frame per value (a 10,000-step file has a million values)
    measured = np.fromiter(map(operator.is_not, raw, itertools.repeat(None)), dtype=bool, count=len(raw))
    try:
        # numpy reads None as NaN and the non-finite markers as the numbers they name, in C.
        values = np.array(raw, dtype=float) if raw else np.zeros(0)
        if values.ndim != 1:  # equal-length lists read as a matrix: not values either
            raise ValueError("not a column of numbers")
    except (TypeError, ValueError):  # a string that is not a number, a list, a dict: not a value
        values = np.array([_number(v) for v in raw], dtype=float)
        measured &= np.asarray([isinstance(v, (int, float, str)) for v in raw], dtype=bool)
        measured &= np.isfinite(values) | np.asarray([isinstance(v, str) and v in _MARKERS for v in raw], dtype=bool)
    return values, measured


def not_numbers(raw: list[Any]) -> list[int]:
    """Positions of values that are neither null, nor a number, nor a non-finite marker, nor text naming a number
    (what `_column` leaves out as not measured)."""
    return [i for i, v in enumerate(raw) if v is not None and not _is_number(v)]


def _is_number(value: Any) -> bool:
    if isinstance(value, str):
        return value in _MARKERS or not math.isnan(_number(value))
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def float_values(raw: list[Any]) -> np.ndarray:
    """A list of JSON values as floats: NaN where a value is null or not a number (the report's sample lists too)."""
    return _column(raw)[0]


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return math.nan
    try:
        return float(value)
    except ValueError:
        return math.nan


def _ratio(num: tuple[np.ndarray, np.ndarray], den: tuple[np.ndarray, np.ndarray], scale: float) -> tuple:
    """num / (den / scale), missing where either input is missing or den <= 0, NaN where an input is NaN."""
    (a, a_ok), (b, b_ok) = num, den
    measured = a_ok & b_ok & ~(np.isfinite(b) & (b <= 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(measured, a / (b / scale), np.nan)
    return values, measured


Column = tuple[np.ndarray, np.ndarray]
_COLUMN_DERIVATIONS: dict[str, Callable[[Callable[[str], Column]], Column]] = {
    "generate_s_per_1k_response_tokens": lambda c: _ratio(c("phases_s.generate"), c("tokens.response"), 1000.0),
    "train_s_per_1k_tokens": lambda c: _ratio(
        c("phases_s.train"),
        (c("tokens.prompt")[0] + c("tokens.response")[0], c("tokens.prompt")[1] & c("tokens.response")[1]),
        1000.0,
    ),
    "response_length_mean": lambda c: _ratio(c("tokens.response"), c("samples"), 1.0),
}
"""How the column reader computes each registry metric of source "columns" (its `derivation`, in code)."""
_MISSING = {n for n, m in METRICS.items() if m.source == "columns"} ^ set(_COLUMN_DERIVATIONS)
if _MISSING:
    raise ValueError(f"registry metrics of source 'columns' and the column derivations differ: {sorted(_MISSING)}")


def read_step_columns(path: Path, raw_keys: dict[str, tuple[str, ...]]) -> StepColumns:
    """Every report metric of a metrics.jsonl as columns; `raw_keys`: extra columns from the framework's raw metrics
    (column name -> the raw keys to try, first present wins)."""
    rows = _parse_lines(path)
    flags = [list(r.get("flags") or []) for r in rows]
    col: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def read(name: str, raw: list[Any]) -> None:
        col[name] = _column(raw)
        if not col[name][1].all():  # something left out: null, or a value that is no number (flagged)
            for index in not_numbers(raw):
                flags[index].append(f"non_numeric:{name}")

    for name, spec in METRICS.items():  # every field the registry declares, read where the record keeps it
        if spec.source != "columns" and "." not in name:
            read(name, [r.get(name) for r in rows])
    for section in sorted({name.split(".")[0] for name in METRICS if "." in name} | {"learning", "policy_lag"}):
        dicts = [r.get(section) if isinstance(r.get(section), dict) else {} for r in rows]
        for key in sorted({k for d in dicts for k in d}):
            read(f"{section}.{key}", [d.get(key) for d in dicts])
    empty = (np.full(len(rows), np.nan), np.zeros(len(rows), dtype=bool))
    for name, derive in _COLUMN_DERIVATIONS.items():
        col[name] = derive(lambda n: col.get(n, empty))
    raws = [r.get("raw") or {} for r in rows]
    for name, keys in raw_keys.items():
        found: list[Any] = [None] * len(rows)
        for key in reversed(keys):  # the first key present wins
            found = [d[key] if key in d else f for d, f in zip(raws, found, strict=True)]
        col[name] = _column(found)
    steps = np.asarray([r["step"] for r in rows], dtype=int)
    _refuse_negative_durations(path, steps, col)
    return StepColumns(
        steps=np.asarray([r["step"] for r in rows], dtype=int),
        values={n: v for n, (v, _) in col.items()},
        measured={n: m for n, (_, m) in col.items()},
        flags=tuple(tuple(dict.fromkeys(f)) for f in flags),
    )


def _refuse_negative_durations(path: Path, steps: np.ndarray, col: dict[str, Column]) -> None:
    """A step or phase time below zero is no measurement (a clock that went back, an edited file): DamagedFile
    naming the step, rather than medians and ratios computed from it. `phases_s.other` is a residual, which
    overlapping phases make negative (flagged by the reader), so it is not judged here."""
    for name in ["step_time_s", *(n for n in col if n.startswith("phases_s.") and n != "phases_s.other")]:
        values, measured = col.get(name, (np.zeros(0), np.zeros(0, dtype=bool)))
        negative = np.flatnonzero(measured & np.isfinite(values) & (values < 0))
        if negative.size:
            first = negative[0]
            raise DamagedFile(
                f"{path}: step {steps[first]}: {name} is {values[first]:g} s, and a duration is never negative "
                f"({negative.size} such steps): a damaged or edited file; regenerate it from the cell's sink "
                "(run.py ingest) or rerun the cell"
            )
