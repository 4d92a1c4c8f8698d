# doc-dev: docs/benchmark.md
"""Follow a cell's metric sink while it grows and append each completed step to metrics.jsonl at once.

- `read_sink(format, path, context) -> list[StepRecord]`: the one call into the metric readers
  (`miles.utils.bench_readers`, owned by the metrics helper): "verl-file-logger" is VERL's FileLogger JSONL file,
  "miles-event-log" is the folder of per-process JSONL files written by Miles's --save-debug-event-data.
- `SinkFollower.poll(final=False)` re-reads the sink and appends, via `bench_metrics.append_record` (fsync per line),
  every record whose step is newer than the last one written; returns the records it appended. `final=True` is the
  last read after the process ended (a reader may then release a step it was holding back as incomplete).
- String values in a record's `raw` pass through the run's redactor before they are written.

Caveats:
- A sink that does not exist yet is simply "no steps yet"; a sink the readers cannot parse raises, and the runner
  records that as the cell's failure reason.
- Steps are written in increasing order only: a record for an older step that appears late is ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miles.utils.bench_metrics import StepRecord, append_record
from scripts.benchmark.redaction import Redactor

SINK_FORMATS = ("verl-file-logger", "miles-event-log")

SinkReader = Callable[[str, Path, Mapping[str, Any]], list[StepRecord]]


def read_sink(format: str, path: Path, context: Mapping[str, Any]) -> list[StepRecord]:
    """Every step record the sink holds so far, in step order (the metrics helper's readers do the parsing)."""
    if format not in SINK_FORMATS:
        raise ValueError(f"sink.format {format!r} is not one of {SINK_FORMATS}")
    if not path.exists():
        return []
    from miles.utils import bench_readers  # the metrics helper's module; imported lazily (pure Python)

    return bench_readers.read_sink(format, path, context)


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
