# doc-dev: docs/benchmark.md
"""Schema v1 of the Miles-vs-VERL throughput benchmark: one record per training step, the same for both frameworks.

- `StepRecord` is the record; `METRICS` declares every reported metric once, with its unit and better direction.
- Records are strict JSON, one object per line: NaN and +-Inf are written as the strings "NaN", "Infinity" and
  "-Infinity" (as Miles's ci_history does) and listed in `flags`, never dropped.
- `append_record` flushes and fsyncs each line, so a killed run keeps every step that completed.

Caveats:
- A phase a framework does not report is None, never 0.
- Native `perf/*` keys of the two frameworks have different meanings; only the fields below are comparable.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

SCHEMA_VERSION = 1

Framework = Literal["miles", "verl"]

PHASES: tuple[str, ...] = ("generate", "old_logprob", "ref_logprob", "train", "weight_sync", "other")


@dataclass(frozen=True, kw_only=True)
class MetricSpec:
    """What a reported number is: its unit and which direction is better (declared, never guessed)."""

    name: str
    unit: str
    direction: Literal["lower", "higher"]
    description: str


METRICS: dict[str, MetricSpec] = {
    m.name: m
    for m in [
        MetricSpec(name="step_time_s", unit="s", direction="lower", description="wall time of one RL step"),
        *(
            MetricSpec(name=f"phases_s.{p}", unit="s", direction="lower", description=f"time in the {p} phase")
            for p in PHASES
        ),
        MetricSpec(
            name="train_tflops_per_gpu",
            unit="TFLOP/s/GPU",
            direction="higher",
            description="model FLOPs of the train phase (one FLOPs model, 3x forward) per second per training GPU",
        ),
        MetricSpec(name="train_mfu", unit="fraction", direction="higher", description="train_tflops_per_gpu / peak"),
        MetricSpec(
            name="train_tokens_per_s",
            unit="tokens/s",
            direction="higher",
            description="prompt+response tokens trained per second of the train phase, whole job",
        ),
        MetricSpec(
            name="rollout_tokens_per_gpu_s",
            unit="tokens/s/GPU",
            direction="higher",
            description="response tokens generated per second of the generate phase per rollout GPU",
        ),
        MetricSpec(
            name="wait_ratio",
            unit="fraction",
            direction="lower",
            description="share of the step the trainer spends outside the train phase",
        ),
    ]
}


@dataclass(kw_only=True)
class StepRecord:
    """One training step of one framework, in schema v1 units (seconds, tokens, TFLOP/s per GPU, fractions)."""

    framework: Framework
    step: int
    step_time_s: float | None
    phases_s: dict[str, float | None] = field(default_factory=lambda: dict.fromkeys(PHASES))
    tokens: dict[str, int | None] = field(default_factory=lambda: {"prompt": None, "response": None})
    """prompt and response tokens summed over all samples of the step (a prompt counts once per sample)."""
    samples: int | None = None
    train_tflops_per_gpu: float | None = None
    train_mfu: float | None = None
    train_tokens_per_s: float | None = None
    rollout_tokens_per_gpu_s: float | None = None
    wait_ratio: float | None = None
    flags: list[str] = field(default_factory=list)
    """Machine-readable notes on this record, e.g. "nonfinite:perf/x", "mfu_unavailable:unknown device"."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The framework's own metrics for this step, verbatim."""
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(encode_nonfinite(asdict(self)), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, line: str) -> StepRecord:
        data = decode_nonfinite(json.loads(line))
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
        return cls(**data)


_NONFINITE_TO_STR = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_STR_TO_NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def encode_nonfinite(value: Any) -> Any:
    """Replace NaN/Inf floats anywhere in a JSON-like value by their string markers, so the JSON stays strict."""
    if isinstance(value, float) and not math.isfinite(value):
        return _NONFINITE_TO_STR[repr(value)]
    if isinstance(value, dict):
        return {k: encode_nonfinite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_nonfinite(v) for v in value]
    return value


def decode_nonfinite(value: Any) -> Any:
    """Inverse of `encode_nonfinite`."""
    if isinstance(value, str) and value in _STR_TO_NONFINITE:
        return _STR_TO_NONFINITE[value]
    if isinstance(value, dict):
        return {k: decode_nonfinite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode_nonfinite(v) for v in value]
    return value


def append_record(path: Path, record: StepRecord) -> None:
    """Append one record and make it durable before returning (a crash right after keeps it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(record.to_json() + "\n")
        f.flush()
        os.fsync(f.fileno())


def write_records(path: Path, records: Iterable[StepRecord]) -> None:
    """Write a whole metrics.jsonl atomically (tmp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(record.to_json() + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def iter_records(path: Path) -> Iterator[StepRecord]:
    """Read a metrics.jsonl; a truncated last line (a killed writer) is skipped, any other bad line raises."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            yield StepRecord.from_json(line)
        except json.JSONDecodeError:
            if index == len(lines) - 1:  # no trailing newline: the writer died mid-line
                return
            raise


def read_records(path: Path) -> list[StepRecord]:
    return list(iter_records(path))
