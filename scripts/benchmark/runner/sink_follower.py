"""Follow a cell's metric sink while it grows and append each completed step to metrics.jsonl at once.

- `read_sink(format, path, context) -> list[StepRecord]`: the one call into the metric readers
  (`frameworks.sinks.build_step_records`), through the adapter that declares the cell's sink format
  (`registry.by_sink_format`; a format no adapter reads is an error). The readers' RunContext comes from the plan
  cell (model_config, gpus, layout) and the cell's environment record (GPU name).
- `SinkFollower.poll(final=False)` re-reads the sink and appends (fsync per line)
  every record of a step not written yet; returns the records it appended. `final=True` is the last read after the
  process ended (a reader may then release a step it was holding back as incomplete).
- One restart rule with `run.py ingest`: when the readers' record of a step already written changes (a restart
  inside the cell ran the step again: the last attempt wins and carries `duplicate_step`), metrics.jsonl is
  rewritten at once (tmp + fsync + rename) with the new record; a step that vanished from the sink (VERL truncates
  its file when it restarts) keeps the record written before. So metrics.jsonl at the end equals what ingest gives.
  When the sink no longer holds the earlier attempt, the replaced step is flagged
  `duplicate_step:sink:earlier_record_replaced`.
- While the cell runs, a last line without its newline may still be being written: its `truncated_last_line` flag
  is only kept by the final read.
- String values in a record's `raw` pass through the run's redactor before they are written.
- A write error leaves metrics.jsonl as it was before the failed write (a partial line is cut off) and raises
  `RunFolderWriteError`.

Caveats:
- A sink that does not exist yet is simply "no steps yet" while the cell runs, and an error naming the sink once it
  ended (a framework checkout without the hook that writes it, e.g. without the patch series' tracking backend); a
  sink the readers cannot parse raises, and the runner records that as the cell's failure reason.
- A Miles step reaches metrics.jsonl one rollout late (when the next rollout trained), or at the end of the cell.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.benchmark.common.redaction import Redactor
from scripts.benchmark.runner.write_errors import RunFolderWriteError

from miles.utils.bench_metrics import StepRecord, write_text_atomic

SinkReader = Callable[[str, Path, Mapping[str, Any]], list[StepRecord]]


def read_sink(format: str, path: Path, context: Mapping[str, Any]) -> list[StepRecord]:
    """Every step record the sink holds so far, in step order (the framework readers do the parsing).

    While the cell runs (final False) only complete steps are returned: up to, not including, the first record the
    readers flag as incomplete, or with one of its adapter's `incomplete_flags` (a Miles step's weight sync is booked
    in the next rollout, so Miles step k is complete once rollout k+1 trained).
    """
    from scripts.benchmark.frameworks import registry

    adapter = registry.by_sink_format(format)
    if not path.exists() or (path.is_dir() and not any(path.rglob("*.jsonl"))):
        if context.get("final"):
            raise ValueError(
                f"the {format} sink {path} holds no files after the cell ended: the framework never wrote it "
                f"(a {adapter.label} without the hook that writes {format}?); the job's console is in log.txt"
            )
        return []
    from scripts.benchmark.frameworks.native_events import NoStepsError
    from scripts.benchmark.frameworks.sinks import build_step_records

    try:
        records = build_step_records(adapter.name, [path], build_run_context(context))
    except NoStepsError:
        return []
    if context.get("final"):
        return records
    complete: list[StepRecord] = []
    for record in records:
        if any(flag.startswith("incomplete:") or flag in adapter.incomplete_flags for flag in record.flags):
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
        cell.get("optimizer_steps_per_step"),
        cell.get("max_response_tokens"),
        bool(cell.get("replay")),
    )


@functools.lru_cache(maxsize=16)
def _cached_run_context(
    model_config: str,
    num_train: int,
    num_rollout: int,
    device: str | None,
    layout: str | None,
    run_context_cls,
    optimizer_steps_per_step: int | None = None,
    max_response_tokens: int | None = None,
    replay: bool = False,
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
        arch=arch,
        num_train_gpus=num_train,
        num_rollout_gpus=num_rollout,
        device_name=device,
        optimizer_steps_per_step=optimizer_steps_per_step,
        max_response_tokens=max_response_tokens,
        layout=layout,
        replay=replay,
    )


@dataclass
class SinkFollower:
    format: str
    path: Path
    metrics_path: Path
    context: Mapping[str, Any]
    redactor: Redactor = field(default_factory=Redactor)
    reader: SinkReader = read_sink
    written: dict[int, str] = field(default_factory=dict)
    """step -> the JSON line written for it."""
    replaced: set[int] = field(default_factory=set)
    """Steps whose earlier record was replaced by a later attempt's."""

    @property
    def steps_written(self) -> int:
        return len(self.written)

    @property
    def last_step(self) -> int | None:
        return max(self.written, default=None)

    def poll(self, *, final: bool = False) -> list[StepRecord]:
        records = self.reader(self.format, self.path, {**self.context, "final": final})
        updated = dict(self.written)
        fresh: list[StepRecord] = []
        changed = False
        for record in sorted(records, key=lambda r: r.step):
            if not final:
                record.flags = [f for f in record.flags if not f.startswith("truncated_last_line:")]
            record.raw = self.redactor.redact_json(record.raw)
            if record.step in updated and _replaces_an_attempt(record, updated[record.step]):
                self.replaced.add(record.step)
            if record.step in self.replaced and not any(f.startswith("duplicate_step:") for f in record.flags):
                record.flags.append("duplicate_step:sink:earlier_record_replaced")
            line = record.to_json()
            if updated.get(record.step) == line:
                continue
            if record.step in updated or (updated and record.step < max(updated)):
                changed = True
            else:
                fresh.append(record)
            updated[record.step] = line
        if changed:
            self._rewrite(updated)
            self.written = updated
            return fresh
        for record in fresh:  # each step counts as written once it is on disk
            self._append(updated[record.step])
            self.written[record.step] = updated[record.step]
        return fresh

    def _append(self, line: str) -> None:
        size = self.metrics_path.stat().st_size if self.metrics_path.exists() else 0
        try:
            self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.metrics_path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            _truncate_quietly(self.metrics_path, size)
            raise RunFolderWriteError(self.metrics_path, exc) from exc

    def _rewrite(self, lines: dict[int, str]) -> None:
        try:
            write_text_atomic(self.metrics_path, "".join(lines[step] + "\n" for step in sorted(lines)))
        except OSError as exc:
            raise RunFolderWriteError(self.metrics_path, exc) from exc


def _replaces_an_attempt(record: StepRecord, earlier_line: str) -> bool:
    """A step whose metrics changed after it was written was run again (a restart inside the cell); when the sink
    no longer holds the earlier attempt (VERL truncates its file on restart) the readers cannot flag it: we do."""
    earlier, now = json.loads(earlier_line).get("raw") or {}, json.loads(record.to_json()).get("raw") or {}
    return any(key in now and now[key] != value for key, value in earlier.items())  # added keys are no re-run


def _truncate_quietly(path: Path, size: int) -> None:
    try:
        os.truncate(path, size)
    except OSError:
        pass
