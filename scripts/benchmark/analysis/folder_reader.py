"""Read a run folder into cells: repeats of one (side, backend, layout), with their step records.

- `read_run_folder(run_dir)` reads manifest.json, plan.json and parity.json (each optional but the manifest; the
  parity proof through contracts/parity.py), the run's sides (sides.py) and, for every cell repeat in state
  "complete", its metrics.jsonl (schema v2 or v1) and environment.json.
- Each complete repeat holds every metric the report summarises (bench_metrics.REPORT_METRICS, the registry's
  shown metrics) as columns (step_columns.py).
- Repeats in any other state are kept as `IncompleteRepeat`s so the report can say what is missing and why, but for
  the rounds a sequential pair did not need (state "not-needed"): the paired check decided before them.

Caveats:
- A metric a framework does not report is None in the record and stays None here (never 0).
- Per-token costs divide a phase time by the step's token count; a step without token counts has no cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scripts.benchmark.analysis.sides import cell_side, run_sides
from scripts.benchmark.analysis.step_columns import DamagedFile, StepColumns, read_step_columns, read_utf8
from scripts.benchmark.contracts.manifest import MANIFEST_NAME, NOT_NEEDED, read_manifest_json
from scripts.benchmark.contracts.parity import ParityFile, read_parity_file
from scripts.benchmark.contracts.sides import SidePair

from miles.utils.bench_metrics import REPORT_METRICS, decode_nonfinite

RESPONSE_LENGTH_EXTREMES = {
    "min": ("rollout/response_len/min", "response_length/min"),
    "max": ("rollout/response_len/max", "response_length/max"),
}
"""Per-step response-length extremes as Miles (rollout/response_len/*) and VERL (response_length/*) log them."""


def stat_column(stat: str) -> str:
    """The column name of a response-length extreme ("min", "max") read from the raw metrics."""
    return f"raw.response_length_{stat}"


@dataclass(kw_only=True)
class Repeat:
    repeat: int
    dir: str
    columns: StepColumns
    """Every report metric (and the raw response-length extremes) of every step, in step order."""
    environment: dict[str, Any]
    started_at: str | None = None
    ended_at: str | None = None
    """The launch's start and end as the manifest recorded them (ISO-8601 UTC): its wall time, start-up included."""


@dataclass(kw_only=True)
class IncompleteRepeat:
    cell_id: str
    repeat: int
    state: str
    reason: str | None


@dataclass(kw_only=True)
class Cell:
    id: str
    framework: str
    side: str
    backend: str
    layout: str
    repeats: list[Repeat] = field(default_factory=list)


@dataclass(kw_only=True)
class RunFolder:
    run_dir: Path
    manifest: dict[str, Any]
    plan: dict[str, Any] | None
    sides: SidePair
    parity: ParityFile | None
    parity_error: str | None
    """Why parity.json could not be read (None when it was, or when there is none)."""
    cells: list[Cell]
    incomplete: list[IncompleteRepeat]


def _read_json(path: Path, *, required: bool) -> Any:
    if not path.is_file():
        if required:
            raise FileNotFoundError(f"{path} does not exist: is this a benchmark run folder?")
        return None
    try:
        return decode_nonfinite(json.loads(read_utf8(path)))
    except json.JSONDecodeError as exc:
        raise DamagedFile(f"{path} is damaged: not valid JSON ({exc}); was the folder fully copied?") from exc


def read_run_folder(run_dir: Path) -> RunFolder:
    """Everything the report needs from a run folder; records of each complete repeat sorted by step."""
    run_dir = Path(run_dir)
    manifest_path = run_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} does not exist: is this a benchmark run folder?")
    manifest = decode_nonfinite(read_manifest_json(manifest_path))
    plan = _read_json(run_dir / manifest.get("plan", "plan.json"), required=False)
    parity, parity_error = _read_parity(run_dir / "parity.json")
    for entry in manifest["cells"]:
        for key in ("id", "framework", "backend", "layout", "repeat", "state"):
            if key not in entry:
                raise ValueError(f"{manifest_path}: a cell entry lacks field {key!r}: {entry}")
    sides = run_sides(manifest, plan, [entry["framework"] for entry in manifest["cells"]])
    cells: dict[str, Cell] = {}
    incomplete: list[IncompleteRepeat] = []
    for entry in manifest["cells"]:
        cell = cells.setdefault(
            entry["id"],
            Cell(
                id=entry["id"],
                framework=entry["framework"],
                side=cell_side(entry, sides),
                backend=entry["backend"],
                layout=entry["layout"],
            ),
        )
        metrics_path = run_dir / entry.get("metrics", f"{entry.get('dir', '')}/metrics.jsonl")
        if entry["state"] == NOT_NEEDED:  # a sequential pair decided before this round: nothing is missing
            continue
        if entry["state"] != "complete" or not metrics_path.is_file():
            reason = entry.get("reason") if metrics_path.is_file() else (entry.get("reason") or "no metrics.jsonl")
            incomplete.append(
                IncompleteRepeat(cell_id=entry["id"], repeat=entry["repeat"], state=entry["state"], reason=reason)
            )
            continue
        columns = _report_columns(
            read_step_columns(metrics_path, {stat_column(s): keys for s, keys in RESPONSE_LENGTH_EXTREMES.items()})
        )
        if not len(columns):
            reason = f"state complete but {metrics_path.name} holds no step"
            incomplete.append(
                IncompleteRepeat(cell_id=entry["id"], repeat=entry["repeat"], state="empty", reason=reason)
            )
            continue
        cell.repeats.append(_repeat(entry, metrics_path, columns))
    for cell in cells.values():
        cell.repeats.sort(key=lambda r: r.repeat)
    return RunFolder(
        run_dir=run_dir,
        manifest=manifest,
        plan=plan,
        sides=sides,
        parity=parity,
        parity_error=parity_error,
        cells=[c for c in cells.values() if c.repeats],
        incomplete=incomplete,
    )


def _repeat(entry: dict[str, Any], metrics_path: Path, columns: StepColumns) -> Repeat:
    environment = _read_json(metrics_path.parent / "environment.json", required=False) or {}
    return Repeat(
        repeat=entry["repeat"],
        dir=str(metrics_path.parent),
        columns=columns,
        environment=environment,
        started_at=entry.get("started_at"),
        ended_at=entry.get("ended_at"),
    )


def _read_parity(path: Path) -> tuple[ParityFile | None, str | None]:
    """parity.json through its typed contract (a version-1 file upgraded); the error text when it cannot be read."""
    if not path.is_file():
        return None, None
    try:
        return read_parity_file(path), None
    except ValueError as exc:
        return None, str(exc)


def _report_columns(columns: StepColumns) -> StepColumns:
    """Every report metric present as a column: a metric no step reports is all NaN and never measured."""
    n = len(columns)
    values, measured = dict(columns.values), dict(columns.measured)
    for name in REPORT_METRICS:
        if name not in values:
            values[name], measured[name] = np.full(n, np.nan), np.zeros(n, dtype=bool)
    return StepColumns(steps=columns.steps, values=values, measured=measured, flags=columns.flags)


def gpu_of(environment: dict[str, Any]) -> tuple[str | None, int | None]:
    """(GPU model, GPU count) from an environment record, tolerant of the usual layouts; None where unknown."""
    model = count = None
    gpu = environment.get("gpu")
    if isinstance(gpu, dict):
        model, count = gpu.get("model") or gpu.get("name"), gpu.get("count")
    gpus = environment.get("gpus")
    if model is None and isinstance(gpus, list) and gpus:
        model = (gpus[0].get("name") or gpus[0].get("model")) if isinstance(gpus[0], dict) else gpus[0]
        count = len(gpus)
    model = model or environment.get("gpu_model") or environment.get("gpu_name")
    count = count or environment.get("gpu_count")
    return (str(model) if model else None), (int(count) if count else None)


def hardware_of(environment: dict[str, Any]) -> str | None:
    """'<count>x <GPU model>' (or the model alone), None when the record names no GPU."""
    model, count = gpu_of(environment)
    if model is None:
        return None
    return f"{count}x {model}" if count else model
