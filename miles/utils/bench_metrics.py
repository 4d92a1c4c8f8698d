"""Schema v2 of the Miles-vs-VERL throughput benchmark: one record per training step, the same for both frameworks.

- `StepRecord` is the record; `METRICS` declares every metric once: unit, better direction, family, where it comes
  from, whether the regression check gates it and whether the report shows it (`REPORT_METRICS`, in report order);
  `NOT_METRICS` says why the record's other fields are not summarised.
- Records are strict JSON, one object per line: NaN and +-Inf are written as the strings "NaN", "Infinity" and
  "-Infinity" (as Miles's ci_history does) and listed in `flags`, never dropped.
- `write_text_atomic` (tmp + fsync + rename) is the one atomic file write of the harness (write_records,
  manifest.json).
- `RunContext` holds what the derived fields need beyond the sink (architecture, GPU counts, the MFU peak and where
  it came from); `derive_step_fields` fills train_tflops_per_gpu, train_mfu, train_tokens_per_s,
  rollout_tokens_per_gpu_s, wait_ratio and overlap_s from phases_s and tokens, the same way for both frameworks.
- Reading: `StepRecord.from_json` accepts v2 and v1 lines; a v1 line is upgraded (`_upgrade_v1`).

Definitions (docs/benchmark/metrics.md has the native-key mapping):
- phases_s.generate = rollout-side generation wall time of the step's batch, only from a rollout-side measurement
  (None with a "generate:not_recorded:<why>" flag where the framework logs none, never the trainer's wait).
- phases_s.rollout_wait = time the trainer was blocked waiting for that batch. STEP_PHASES (every phase but
  generate) partition step_time_s; generate may overlap the previous step's training.
- overlap_s = max(0, generate - rollout_wait): generation seconds hidden behind training (0 when synchronous).
- train_tflops_per_gpu = train FLOPs of the step's sequences (bench_flops, 3x forward) / phases_s.train /
  num_train_gpus / 1e12. phases_s.train is the optimizer-step loop of the step (Miles perf/actor_train_time, VERL
  timing_s/update_actor): forward + backward + optimizer step of every mini-batch, nothing else.
- train_mfu = train_tflops_per_gpu / RunContext.peak_tflops.
- train_tokens_per_s = (prompt + response tokens) / phases_s.train, whole job.
- rollout_tokens_per_gpu_s = response tokens / phases_s.generate / num_rollout_gpus (None when generate is).
- wait_ratio = 1 - (old_logprob + ref_logprob + train) / step_time_s: the share of the step the training GPUs spend
  outside trainer compute (generation, weight sync, offload, bookkeeping). Unreported trainer phases count as 0.

Caveats:
- A phase a framework does not report is None, never 0.
- Native `perf/*` keys of the two frameworks have different meanings; only the fields below are comparable.
- Without per-sequence lengths the attention term uses `samples` sequences of the mean length (flag
  "seq_lens:uniform_mean"): sum(s^2) is underestimated by samples * var(s), the same way for both frameworks.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from miles.utils.bench_flops import ModelArch, batch_train_flops, match_device, peak_tflops_for_device
from miles.utils.bench_metric_registry import (  # noqa: F401 (re-exported: the schema's one import point)
    LEARNING_SIGNALS,
    METRICS,
    NOT_METRICS,
    PHASES,
    REPORT_METRICS,
    STEP_PHASES,
    STEP_TIME_FAMILY,
    LearningSignal,
    MetricSpec,
    Planted,
)

SCHEMA_VERSION = 2
READABLE_SCHEMA_VERSIONS = (1, 2)


@dataclass(kw_only=True)
class StepRecord:
    """One training step of one framework, in schema v2 units (seconds, tokens, TFLOP/s per GPU, fractions)."""

    framework: str
    """The registry name of the framework that ran the step."""
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
    overlap_s: float | None = None
    flags: list[str] = field(default_factory=list)
    """Machine-readable notes on this record, e.g. "nonfinite:perf/x", "mfu_unavailable:unknown device"."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The framework's own metrics for this step, verbatim."""
    learning: dict[str, float | None] = field(default_factory=dict)
    """The step's learning signals (`LEARNING_SIGNALS`, normalised units); empty in records written before them."""
    policy_lag: dict[str, float | None] = field(default_factory=dict)
    """Weight versions between the oldest weights that generated the step's trajectories and the policy that trains
    them, as the framework logs it: {"mean", "max"} over the step's groups; empty where the framework logs none."""
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> str:
        return json.dumps(encode_nonfinite(asdict(self)), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, line: str) -> StepRecord:
        data = decode_nonfinite(json.loads(line))
        if data.get("schema_version") not in READABLE_SCHEMA_VERSIONS:
            found = data.get("schema_version")
            raise ValueError(f"unsupported schema_version {found!r}, expected one of {READABLE_SCHEMA_VERSIONS}")
        return cls(**(_upgrade_v1(data) if data["schema_version"] == 1 else data))


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    """A v1 record in v2 fields. v1 had no rollout_wait: its generate was VERL's timing_s/gen (the trainer's wait
    in separate_async) or Miles's rollout time, and its `other` was computed with it. Kept as written, flagged."""
    phases = {**dict.fromkeys(PHASES), **(data.get("phases_s") or {})}
    flags = [*data.get("flags", []), "schema_v1:generate_may_be_trainer_wait,no_rollout_wait"]
    return {**data, "phases_s": phases, "overlap_s": None, "flags": flags, "schema_version": SCHEMA_VERSION}


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


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: setting it later could race a file created by another thread


def write_text_atomic(path: Path, text: str) -> None:
    """Replace a file's content all at once (tmp file + fsync + rename): a reader never sees half of it."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """`write_text_atomic` for bytes. A failed write (a full disk) names `path` in its OSError, leaves the old file
    whole and no tmp file behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name of its own per write: two writers of one file never share (and tear) one tmp file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # what open() would have given; mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)  # a full disk leaves neither a torn file nor a stray tmp
        if isinstance(exc, OSError) and exc.filename is None:  # a write's ENOSPC names no file: name the target
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def write_records(path: Path, records: Iterable[StepRecord]) -> None:
    """Write a whole metrics.jsonl atomically (tmp file + rename)."""
    write_text_atomic(path, "".join(record.to_json() + "\n" for record in records))


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


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What the derived fields need besides the sink: the model, the GPU counts and the MFU peak with its source."""

    arch: ModelArch | None
    num_train_gpus: int
    num_rollout_gpus: int
    """GPUs that generate: all of them when colocated, the rollout pool when disaggregated."""
    device_name: str | None = None
    peak_tflops: float | None = None
    peak_source: str = "unavailable: no device name and no peak given"
    """"override", "measured", "table:<key>", or "unavailable: <reason>" when peak_tflops is None."""
    samples_per_step: int | None = None
    """Samples per step from the spec, when known; used only when the sink does not give it."""
    optimizer_steps_per_step: int | None = None
    """Optimizer steps per RL step (spec); maps Miles's train-step signals to their rollout."""
    max_response_tokens: int | None = None
    """The response-length cap (spec); tells VERL's batch-max clip ratio from a true truncation fraction."""
    layout: Literal["colocate", "disaggregated"] | None = None
    """The cell's layout: whether the rollout runs alongside training (what a trainer-side timer measures depends on
    it); None = unknown."""
    replay: bool = False
    """The cell trained on a recorded rollout (a train-only run): no generation was logged, no staleness applies."""

    def __post_init__(self) -> None:
        for name in ("num_train_gpus", "num_rollout_gpus"):
            if getattr(self, name) <= 0:
                raise ValueError(f"RunContext.{name} must be > 0, got {getattr(self, name)}")
        if self.peak_tflops is not None and not (math.isfinite(self.peak_tflops) and self.peak_tflops > 0):
            raise ValueError(f"RunContext.peak_tflops must be a finite number > 0, got {self.peak_tflops}")

    @classmethod
    def build(
        cls,
        *,
        arch: ModelArch | None,
        num_train_gpus: int,
        num_rollout_gpus: int | None = None,
        device_name: str | None = None,
        peak_tflops: float | None = None,
        measured_peak_tflops: float | None = None,
        samples_per_step: int | None = None,
        optimizer_steps_per_step: int | None = None,
        max_response_tokens: int | None = None,
        layout: Literal["colocate", "disaggregated"] | None = None,
        replay: bool = False,
    ) -> RunContext:
        """Resolve the MFU peak: an explicit override wins, then a measured peak, then the device table."""
        if peak_tflops is not None:
            peak, source = peak_tflops, "override"
        elif measured_peak_tflops is not None:
            peak, source = measured_peak_tflops, "measured"
        elif device_name is None:
            peak, source = None, "unavailable: no device name and no peak given"
        elif (table_peak := peak_tflops_for_device(device_name)) is not None:
            peak, source = table_peak, f"table:{match_device(device_name)}"
        else:
            peak, source = None, f"unavailable: device {device_name!r} is not in the peak table"
        return cls(
            arch=arch,
            num_train_gpus=num_train_gpus,
            num_rollout_gpus=num_rollout_gpus or num_train_gpus,
            device_name=device_name,
            peak_tflops=peak,
            peak_source=source,
            samples_per_step=samples_per_step,
            optimizer_steps_per_step=optimizer_steps_per_step,
            max_response_tokens=max_response_tokens,
            layout=layout,
            replay=replay,
        )


def is_finite_number(value: Any) -> bool:
    """A usable number: int or float (not bool), neither NaN nor infinite. The one finiteness test of the harness."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def finite_or_none(value: Any) -> float | None:
    """The value as a float when it is a usable number, else None (how missing and non-finite values are stored)."""
    return float(value) if is_finite_number(value) else None


def _ratio(numerator: float | None, denominator: float | None, flags: list[str], what: str) -> float | None:
    if not (is_finite_number(numerator) and is_finite_number(denominator)):
        return None
    if denominator <= 0:
        flags.append(f"nonpositive_denominator:{what}")
        return None
    return numerator / denominator


def overlap_seconds(generate_s: float | None, rollout_wait_s: float | None) -> float | None:
    """Generation seconds the trainer did not wait for (hidden behind training); None unless both are known."""
    if not (is_finite_number(generate_s) and is_finite_number(rollout_wait_s)):
        return None
    return max(0.0, generate_s - rollout_wait_s)


def derive_step_fields(record: StepRecord, ctx: RunContext, *, seq_lens: list[int] | None = None) -> StepRecord:
    """Fill the derived fields from phases_s, tokens and samples; return a new record (flags say what was missing).

    `seq_lens` (prompt+response per sample) makes the attention term exact; without it, `samples` sequences of
    the mean length are used and the record is flagged "seq_lens:uniform_mean".
    """
    flags = [f for f in record.flags]
    phases, tokens = record.phases_s, record.tokens
    train_s, generate_s = phases.get("train"), phases.get("generate")
    trained_tokens = None
    if tokens.get("prompt") is not None and tokens.get("response") is not None:
        trained_tokens = tokens["prompt"] + tokens["response"]

    if seq_lens is None and trained_tokens is not None and record.samples:
        mean_len = trained_tokens / record.samples
        seq_lens = [mean_len] * record.samples
        flags.append("seq_lens:uniform_mean")
    train_tflops = None
    if ctx.arch is None:
        flags.append("tflops_unavailable:no model architecture")
    elif seq_lens is None:
        flags.append("tflops_unavailable:no token counts")
    else:
        train_tflops = _ratio(batch_train_flops(ctx.arch, seq_lens) / 1e12, train_s, flags, "phases_s.train")
        train_tflops = None if train_tflops is None else train_tflops / ctx.num_train_gpus
    train_mfu = None
    if train_tflops is not None:
        if ctx.peak_tflops is None:
            flags.append(f"mfu_unavailable:{ctx.peak_source}")
        else:
            train_mfu = train_tflops / ctx.peak_tflops

    rollout_tps = _ratio(tokens.get("response"), generate_s, flags, "phases_s.generate")
    trainer_compute = [phases.get(p) for p in ("old_logprob", "ref_logprob", "train")]
    wait_ratio = None
    if is_finite_number(train_s) and all(v is None or math.isfinite(v) for v in trainer_compute):
        busy = _ratio(sum(v for v in trainer_compute if v is not None), record.step_time_s, flags, "step_time_s")
        wait_ratio = None if busy is None else 1.0 - busy
    return StepRecord(
        **{
            **asdict(record),
            "train_tflops_per_gpu": train_tflops,
            "train_mfu": train_mfu,
            "train_tokens_per_s": _ratio(trained_tokens, train_s, flags, "phases_s.train"),
            "rollout_tokens_per_gpu_s": None if rollout_tps is None else rollout_tps / ctx.num_rollout_gpus,
            "wait_ratio": wait_ratio,
            "overlap_s": overlap_seconds(generate_s, phases.get("rollout_wait")),
            "flags": list(dict.fromkeys(flags)),
        }
    )
