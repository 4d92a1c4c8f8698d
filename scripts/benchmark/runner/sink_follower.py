# doc-dev: docs/benchmark.md
"""Follow a cell's metric sink while it grows and append each completed step to metrics.jsonl at once.

- `read_sink(format, path, context) -> list[StepRecord]`: the one call into the metric readers
  (`frameworks.sinks.build_step_records`): "verl-file-logger" is VERL's FileLogger JSONL file, "miles-stdout" the
  cell's log.txt (the Miles job's stdout), "miles-event-log" the folder of per-process JSONL files of Miles's
  --save-debug-event-data. The readers' RunContext comes from the plan cell (model_config, gpus, layout) and the
  cell's environment record (GPU name).
- `SinkFollower.poll(final=False)` re-reads the sink and appends, via `bench_metrics.append_record` (fsync per line),
  every record whose step is newer than the last one written; returns the records it appended. `final=True` is the
  last read after the process ended (a reader may then release a step it was holding back as incomplete).
- String values in a record's `raw` pass through the run's redactor before they are written.

Caveats:
- A sink that does not exist yet is simply "no steps yet"; a sink the readers cannot parse raises, and the runner
  records that as the cell's failure reason.
- Steps are written in increasing order only: a record for an older step that appears late is ignored.
- A Miles step reaches metrics.jsonl one rollout late (when the next rollout trained), or at the end of the cell.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miles.utils.bench_metrics import StepRecord, append_record
from scripts.benchmark.contracts.plan import SINK_FORMATS
from scripts.benchmark.runner.redaction import Redactor

SinkReader = Callable[[str, Path, Mapping[str, Any]], list[StepRecord]]


def read_sink(format: str, path: Path, context: Mapping[str, Any]) -> list[StepRecord]:
    """Every step record the sink holds so far, in step order (the framework readers do the parsing).

    While the cell runs (final False) only complete steps are returned: up to, not including, the first record the
    readers flag as incomplete or, for Miles, as lacking the next rollout's record (a Miles step's weight sync is
    booked in the next rollout, so Miles step k is complete once rollout k+1 trained).
    """
    if format not in SINK_FORMATS:
        raise ValueError(f"sink.format {format!r} is not one of {SINK_FORMATS}")
    if not path.exists() or (path.is_dir() and not any(path.rglob("*.jsonl"))):
        return []
    from scripts.benchmark.frameworks.native_events import NoStepsError
    from scripts.benchmark.frameworks.sinks import build_step_records

    framework = "verl" if format == "verl-file-logger" else "miles"
    try:
        records = build_step_records(framework, [path], build_run_context(context))
    except NoStepsError:
        return []
    if context.get("final"):
        return records
    complete: list[StepRecord] = []
    for record in records:
        if any(flag.startswith("incomplete:") or flag == "miles_shift:no_next_step" for flag in record.flags):
            break
        complete.append(record)
    return complete


def build_run_context(context: Mapping[str, Any]):
    """The readers' RunContext from the plan cell (model, GPU counts) and the environment record (device name)."""
    from miles.utils.bench_metrics import RunContext

    cell = context.get("cell") or {}
    gpus = cell.get("gpus") or {}
    return _cached_run_context(
        str(cell.get("model_config") or ""),
        int(gpus.get("train") or gpus.get("total") or 1),
        int(gpus.get("rollout") or gpus.get("total") or 1),
        context.get("device_name"),
        cell.get("layout"),
        RunContext,
    )


@functools.lru_cache(maxsize=16)
def _cached_run_context(
    model_config: str, num_train: int, num_rollout: int, device: str | None, layout: str | None, run_context_cls
):
    from miles.utils.bench_flops import ModelArch

    arch = None
    if model_config:
        try:
            from scripts.benchmark.spec import resolve_model_config

            arch = ModelArch.from_hf_config(resolve_model_config(model_config))
        except Exception:  # no architecture: the readers flag TFLOPs/MFU as unavailable instead
            arch = None
    return run_context_cls.build(
        arch=arch, num_train_gpus=num_train, num_rollout_gpus=num_rollout, device_name=device, layout=layout
    )


@dataclass
class SinkFollower:
    format: str
    path: Path
    metrics_path: Path
    context: Mapping[str, Any]
    redactor: Redactor = field(default_factory=Redactor)
    reader: SinkReader = read_sink
    last_step: int | None = None
    steps_written: int = 0

    def poll(self, *, final: bool = False) -> list[StepRecord]:
        records = self.reader(self.format, self.path, {**self.context, "final": final})
        fresh = sorted((r for r in records if self.last_step is None or r.step > self.last_step), key=lambda r: r.step)
        for record in fresh:
            record.raw = self.redactor.redact_json(record.raw)
            append_record(self.metrics_path, record)
            self.last_step = record.step
            self.steps_written += 1
        return fresh
