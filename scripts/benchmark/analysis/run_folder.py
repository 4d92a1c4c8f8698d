# doc-dev: docs/benchmark.md
"""Read a run folder (contract 2) into cells: repeats of one (framework, backend, layout), with their step records.

- `read_run_folder(run_dir)` reads manifest.json, plan.json and parity.json (each optional but the manifest) and,
  for every cell repeat in state "complete", its metrics.jsonl (schema v1) and environment.json.
- `REPORT_METRICS` are the metrics the report summarises: every `METRICS` key of bench_metrics plus the derived
  per-token costs and the mean response length; `metric_value(record, name)` reads one of them from a record.
- Repeats in any other state are kept as `IncompleteRepeat`s so the report can say what is missing and why.

Caveats:
- A metric a framework does not report is None in the record and stays None here (never 0).
- Per-token costs divide a phase time by the step's token count; a step without token counts has no cost.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miles.utils.bench_metrics import METRICS, MetricSpec, StepRecord, decode_nonfinite, read_records
from scripts.benchmark.contracts.manifest import MANIFEST_NAME, read_manifest_json

DERIVED_METRICS: dict[str, MetricSpec] = {
    m.name: m
    for m in [
        MetricSpec(
            name="generate_s_per_1k_response_tokens",
            unit="s/1k tokens",
            direction="lower",
            description="generate phase seconds per 1000 response tokens of the step",
        ),
        MetricSpec(
            name="train_s_per_1k_tokens",
            unit="s/1k tokens",
            direction="lower",
            description="train phase seconds per 1000 trained (prompt + response) tokens of the step",
        ),
        MetricSpec(
            name="response_length_mean",
            unit="tokens",
            direction="lower",
            description="mean response length of the step's samples (a workload property, not a speed)",
        ),
    ]
}
_REPORT_ORDER = (
    "step_time_s",
    "phases_s.generate",
    "generate_s_per_1k_response_tokens",
    "phases_s.rollout_wait",
    "overlap_s",
    "phases_s.train",
    "train_s_per_1k_tokens",
    "phases_s.old_logprob",
    "phases_s.ref_logprob",
    "phases_s.weight_sync",
    "phases_s.other",
    "rollout_tokens_per_gpu_s",
    "train_tflops_per_gpu",
    "train_mfu",
    "train_tokens_per_s",
    "wait_ratio",
    "response_length_mean",
)
_ALL_METRICS = {**METRICS, **DERIVED_METRICS}
REPORT_METRICS: dict[str, MetricSpec] = {
    **{name: _ALL_METRICS[name] for name in _REPORT_ORDER if name in _ALL_METRICS},
    **{name: spec for name, spec in _ALL_METRICS.items() if name not in _REPORT_ORDER},
}
"""Report order: each per-token cost sits right under the raw phase time it normalises."""

RESPONSE_LENGTH_RAW_KEYS = {
    "min": ("rollout/response_len/min", "response_length/min"),
    "max": ("rollout/response_len/max", "response_length/max"),
}
"""Per-step response-length extremes as Miles (rollout/response_len/*) and VERL (response_length/*) log them."""


@dataclass(kw_only=True)
class Repeat:
    repeat: int
    dir: str
    records: list[StepRecord]
    environment: dict[str, Any]


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
    backend: str
    layout: str
    repeats: list[Repeat] = field(default_factory=list)


@dataclass(kw_only=True)
class RunFolder:
    run_dir: Path
    manifest: dict[str, Any]
    plan: dict[str, Any] | None
    parity: dict[str, Any] | list[Any] | None
    cells: list[Cell]
    incomplete: list[IncompleteRepeat]


def _finite(value: Any, nonfinite: float | None = None) -> float | None:
    """A finite float; `nonfinite` (None, or NaN to keep the difference) for NaN/Inf; None when absent."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else nonfinite


def _per_1k(seconds: Any, tokens: Any, nonfinite: float | None) -> float | None:
    seconds, tokens = _finite(seconds, nonfinite), _finite(tokens, nonfinite)
    if seconds is None or tokens is None:
        return None
    if math.isnan(seconds) or math.isnan(tokens):
        return nonfinite
    return seconds / (tokens / 1000.0) if tokens > 0 else None


def metric_value(record: StepRecord, name: str, *, nonfinite: float | None = None) -> float | None:
    """One report metric of one step as a finite float, or None (missing, NaN or Inf).

    With `nonfinite=math.nan`, a value the step recorded as NaN/Inf (or derived from one) is NaN, while a value the
    framework did not measure in this step (null, e.g. the last Miles step's step time) stays None.
    """
    tokens = record.tokens or {}
    phases = record.phases_s or {}
    if name == "generate_s_per_1k_response_tokens":
        return _per_1k(phases.get("generate"), tokens.get("response"), nonfinite)
    if name == "train_s_per_1k_tokens":
        prompt, response = _finite(tokens.get("prompt"), nonfinite), _finite(tokens.get("response"), nonfinite)
        total = None if prompt is None or response is None else prompt + response
        return _per_1k(phases.get("train"), total, nonfinite)
    if name == "response_length_mean":
        response, samples = _finite(tokens.get("response"), nonfinite), _finite(record.samples, nonfinite)
        if response is None or not samples:
            return None
        return nonfinite if math.isnan(response) or math.isnan(samples) else response / samples
    if name.startswith("phases_s."):
        return _finite(phases.get(name.split(".", 1)[1]), nonfinite)
    return _finite(getattr(record, name, None), nonfinite)


def raw_value(record: StepRecord, keys: tuple[str, ...]) -> float | None:
    """The first of `keys` present in the record's raw framework metrics, as a finite float."""
    for key in keys:
        if key in (record.raw or {}):
            return _finite(record.raw[key])
    return None


def _read_json(path: Path, *, required: bool) -> Any:
    if not path.is_file():
        if required:
            raise FileNotFoundError(f"{path} does not exist: is this a benchmark run folder?")
        return None
    return decode_nonfinite(json.loads(path.read_text(encoding="utf-8")))


def read_run_folder(run_dir: Path) -> RunFolder:
    """Everything the report needs from a run folder; records of each complete repeat sorted by step."""
    run_dir = Path(run_dir)
    manifest_path = run_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{manifest_path} does not exist: is this a benchmark run folder?")
    manifest = decode_nonfinite(read_manifest_json(manifest_path))
    plan = _read_json(run_dir / manifest.get("plan", "plan.json"), required=False)
    parity = _read_json(run_dir / "parity.json", required=False)
    cells: dict[str, Cell] = {}
    incomplete: list[IncompleteRepeat] = []
    for entry in manifest["cells"]:
        for key in ("id", "framework", "backend", "layout", "repeat", "state"):
            if key not in entry:
                raise ValueError(f"{manifest_path}: a cell entry lacks field {key!r}: {entry}")
        cell = cells.setdefault(
            entry["id"],
            Cell(id=entry["id"], framework=entry["framework"], backend=entry["backend"], layout=entry["layout"]),
        )
        metrics_path = run_dir / entry.get("metrics", f"{entry.get('dir', '')}/metrics.jsonl")
        if entry["state"] != "complete" or not metrics_path.is_file():
            reason = entry.get("reason") if metrics_path.is_file() else (entry.get("reason") or "no metrics.jsonl")
            incomplete.append(
                IncompleteRepeat(cell_id=entry["id"], repeat=entry["repeat"], state=entry["state"], reason=reason)
            )
            continue
        records = sorted(read_records(metrics_path), key=lambda r: r.step)
        if not records:
            reason = f"state complete but {metrics_path.name} holds no step"
            incomplete.append(
                IncompleteRepeat(cell_id=entry["id"], repeat=entry["repeat"], state="empty", reason=reason)
            )
            continue
        environment = _read_json(metrics_path.parent / "environment.json", required=False) or {}
        cell.repeats.append(
            Repeat(repeat=entry["repeat"], dir=str(metrics_path.parent), records=records, environment=environment)
        )
    for cell in cells.values():
        cell.repeats.sort(key=lambda r: r.repeat)
    return RunFolder(
        run_dir=run_dir,
        manifest=manifest,
        plan=plan,
        parity=parity,
        cells=[c for c in cells.values() if c.repeats],
        incomplete=incomplete,
    )


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
