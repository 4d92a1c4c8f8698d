"""Native sink lines -> per-step native metrics, shared by both frameworks' readers.

A framework's reader turns its files into `NativeEvent`s (one log call each: process, position, step, metrics);
`merge_native_events` groups them per step across processes and restarts. Real-run defects become `SinkIssue`s
and flags on the step they belong to, never exceptions: a truncated or corrupt line, a line recovered from a
fragment, NaN/Inf or null values, missing keys, a step logged again after a restart, two processes giving one key
different values.

The restart rule, the one rule of the runner, `run.py ingest` and the report: attempts are ordered by the data, not
by the order the files were named in (a reader's own proof where its files carry one, such as the tracking
backend's creation sequence; else `files_in_time_order`: a file's first event time where lines carry one, else its
modification time; then the line order inside a file); every step logged by more than one attempt is flagged
`duplicate_step`, and the last attempt that completed it wins. A step an earlier attempt logged at or after the step
a later attempt of the same process restarted from, which the later attempt did not log again, belongs to a run that
was given up (a resume from an earlier checkpoint, or another run written into the same folder): it is kept, flagged
`superseded_attempt`. A negative duration is no duration: `duration_value` flags it and leaves it out.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miles.utils.bench_metrics import RunContext


def files_in_time_order(
    paths: list[Path], first_time: Callable[[Path], float | None] = lambda path: None
) -> list[Path]:
    """Oldest attempt first: by the first event time a file's lines carry, else by modification time, then name."""

    def key(path: Path) -> tuple[float, str]:
        stamp = first_time(path)
        if stamp is None:
            try:
                stamp = path.stat().st_mtime
            except OSError:
                stamp = 0.0
        return (stamp, str(path))

    return sorted(paths, key=key)


FILE_ORDER_STRIDE = 1_000_000_000
"""Event order = file index * stride + line: restarts are told apart and file defects attached to their step."""
STEP_KEYS = frozenset({"rollout/step", "training/global_step"})
"""Keys that name the step in every log call of Miles and VERL: logging them again does not mean a re-run."""


class NoStepsError(ValueError):
    """The sink's files exist but hold no step metrics yet."""


@dataclass(kw_only=True)
class NativeEvent:
    """One native log call: which process wrote it, at which native step, with which metrics."""

    source: str
    order: int
    """Position in its source (file index * FILE_ORDER_STRIDE + line), to tell restarts apart."""
    step: int
    metrics: dict[str, Any]
    new_process: bool = False
    """The first log call of a new process instance (a restart), when the reader can tell (Miles's initial sync)."""
    time: float | None = None
    """Seconds since the epoch, where the line carries a timestamp (Miles's event log)."""


@dataclass(kw_only=True)
class NativeStep:
    """The merged native metrics of one step, with flags about how they were assembled."""

    step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    new_process: bool = False
    """A process's kept attempt of this step is the first step of a restarted process."""
    superseded: bool = False
    """A process's kept attempt of this step comes from an attempt a later one restarted before this step."""


@dataclass(kw_only=True)
class SinkIssue:
    """A defect of a source file, attached to the record of the step that process was writing when it happened."""

    source: str
    order: int
    flag: str
    own_line: bool = False
    """The defect's line still gave an event (a recovered line): the flag belongs to that event's step."""


def read_json_lines(path: Path, source: str, issues: list[SinkIssue], *, offset: int = 0) -> list[tuple[int, Any]]:
    """(line number, parsed object) per line; a truncated or corrupt line becomes an issue, never an exception.

    A killed writer leaves a last line without its end; Miles's event logger reopens the file in append mode after
    a restart, so the next event can be glued to that fragment: the trailing complete object is recovered.
    """
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    parsed: list[tuple[int, Any]] = []
    for index, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed.append((index, json.loads(line)))
            continue
        except json.JSONDecodeError:
            pass
        unterminated = index == len(lines)  # no newline yet: being written (live read) or cut off by a kill
        recovered = None if unterminated else _recover_trailing_object(line)
        if recovered is not None:
            issues.append(
                SinkIssue(
                    source=source, order=offset + index, flag=f"recovered_line:{path.name}:{index}", own_line=True
                )
            )
            parsed.append((index, recovered))
        else:
            kind = "truncated_last_line" if unterminated else "corrupt_line"
            issues.append(SinkIssue(source=source, order=offset + index, flag=f"{kind}:{path.name}:{index}"))
    return parsed


def _recover_trailing_object(line: str) -> dict[str, Any] | None:
    for match in reversed(list(re.finditer(r"\{\"", line))):
        if match.start() == 0:
            return None
        try:
            obj = json.loads(line[match.start() :])
        except json.JSONDecodeError:
            continue
        return obj if isinstance(obj, dict) else None
    return None


def merge_native_events(
    events: list[NativeEvent],
    issues: list[SinkIssue] = (),
    *,
    complete_anchors: tuple[str, ...],
) -> dict[int, NativeStep]:
    """Per process: group by step, start a new attempt at a restart (the step goes backwards, a key is logged again
    for the step, or the reader saw a new process), keep the last attempt that completed the step (one holding a
    `complete_anchors` key), flag every step with several attempts. Across processes: union of metrics (a key two
    processes give different values is flagged)."""
    by_source: dict[str, list[NativeEvent]] = defaultdict(list)
    for event in events:
        by_source[event.source].append(event)
    steps: dict[int, NativeStep] = {}
    for source in sorted(by_source):
        source_events = sorted(by_source[source], key=lambda e: e.order)
        attempts = _attempts_per_step(source_events)
        restarts = _restart_steps(attempts)
        for step, step_attempts in attempts.items():
            merged = steps.setdefault(step, NativeStep(step=step))
            _merge_step(merged, source, step_attempts, complete_anchors, restarts)
        _attach_issues(steps, source_events, [i for i in issues if i.source == source])
    return steps


def _restart_steps(attempts: dict[int, list[_Attempt]]) -> dict[int, int]:
    """Epoch -> the first step it logged, for every attempt after the first."""
    first: dict[int, int] = {}
    for step, step_attempts in attempts.items():
        for attempt in step_attempts:
            first[attempt.epoch] = min(first.get(attempt.epoch, step), step)
    return {epoch: step for epoch, step in first.items() if epoch > 0}


@dataclass
class _Attempt:
    epoch: int
    metrics: dict[str, Any] = field(default_factory=dict)
    new_process: bool = False


def _attempts_per_step(source_events: list[NativeEvent]) -> dict[int, list[_Attempt]]:
    attempts: dict[int, list[_Attempt]] = defaultdict(list)
    epoch, max_seen = 0, None
    for event in source_events:
        step_attempts = attempts[event.step]
        # One process logs each metric of a step once; the same key again in the current attempt means the step is
        # being re-run. A key an earlier attempt logged is this attempt's first log of the step, not another restart.
        relogged = (
            bool(step_attempts)
            and step_attempts[-1].epoch == epoch
            and any(k in step_attempts[-1].metrics for k in event.metrics if k not in STEP_KEYS)
        )
        went_back = max_seen is not None and event.step < max_seen
        restarted = relogged or went_back or (event.new_process and max_seen is not None)
        if restarted:
            epoch += 1  # the process restarted and logs this step again
            max_seen = event.step
        else:
            max_seen = event.step if max_seen is None else max(max_seen, event.step)
        if not step_attempts or step_attempts[-1].epoch != epoch:
            step_attempts.append(_Attempt(epoch=epoch, new_process=restarted or event.new_process))
        step_attempts[-1].metrics.update(event.metrics)
    return attempts


def _merge_step(
    merged: NativeStep,
    source: str,
    step_attempts: list[_Attempt],
    anchors: tuple[str, ...],
    restarts: dict[int, int],
) -> None:
    chosen_index = max(
        (i for i, attempt in enumerate(step_attempts) if any(k in attempt.metrics for k in anchors)),
        default=len(step_attempts) - 1,
    )
    chosen = step_attempts[chosen_index]
    if len(step_attempts) > 1:
        merged.flags.append(f"duplicate_step:{source}:kept_attempt_{chosen_index + 1}_of_{len(step_attempts)}")
    if not any(k in chosen.metrics for k in anchors):
        merged.flags.append(f"incomplete:{source}")
    later = [start for epoch, start in restarts.items() if epoch > chosen.epoch and start <= merged.step]
    if later:
        merged.flags.append(f"superseded_attempt:{source}:a later attempt restarted at step {min(later)}")
        merged.superseded = True
    merged.new_process = merged.new_process or chosen.new_process
    for key, value in chosen.metrics.items():
        if key in merged.metrics and not _same_value(merged.metrics[key], value):
            merged.flags.append(f"conflict:{key}")
            continue
        merged.metrics[key] = value


def _attach_issues(steps: dict[int, NativeStep], source_events: list[NativeEvent], issues: list[SinkIssue]) -> None:
    """A file defect goes on the step that process was writing: the step of its own line for a recovered line,
    else the step of the last event before it."""
    for issue in issues:
        before = [
            e.step for e in source_events if e.order < issue.order or (issue.own_line and e.order == issue.order)
        ]
        step = before[-1] if before else (source_events[0].step if source_events else None)
        if step is None and steps:
            step = min(steps)
        if step is not None:
            steps.setdefault(step, NativeStep(step=step)).flags.append(issue.flag)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def scan_values(metrics: dict[str, Any]) -> list[str]:
    """Flags for values that are there but unusable: NaN/Inf kept as they are, null (how orjson and pydantic write
    NaN/Inf) kept as None."""
    flags = []
    for key, value in metrics.items():
        if value is None:
            flags.append(f"null:{key}")
        elif isinstance(value, float) and not math.isfinite(value):
            flags.append(f"nonfinite:{key}")
    return flags


def metric_value(metrics: dict[str, Any] | None, key: str, flags: list[str], *, required: bool) -> float | None:
    if metrics is None or key not in metrics:
        if required:
            flags.append(f"missing:{key}")
        return None
    value = metrics[key]
    if value is None:
        return math.nan  # reported, but the sink wrote NaN/Inf as null: unusable, not absent
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        flags.append(f"non_numeric:{key}")
        return None
    return float(value)


def duration_value(metrics: dict[str, Any] | None, key: str, flags: list[str], *, required: bool) -> float | None:
    """`metric_value` of a timer: a negative value is no duration (a wall clock stepped back inside the timer), so
    it is flagged `negative_duration:<key>` and left out (None)."""
    value = metric_value(metrics, key, flags, required=required)
    if value is not None and value < 0:
        flags.append(f"negative_duration:{key}")
        return None
    return value


def residual_other(step_time: float | None, phases: dict[str, float | None], flags: list[str]) -> float | None:
    """phases_s.other: the step minus every reported phase (a phase that is None counts as not there)."""
    known = [v for p, v in phases.items() if p != "other" and v is not None]
    if step_time is None or not math.isfinite(step_time) or not all(math.isfinite(v) for v in known):
        return None
    other = step_time - sum(known)
    if other < -0.01 * step_time:
        flags.append("negative_other:phases overlap or exceed the step")
    return other


def reconcile_samples(from_sink: int | None, ctx: RunContext, flags: list[str]) -> int | None:
    if from_sink is None:
        if ctx.samples_per_step is not None:
            flags.append("samples:from_spec")
        return ctx.samples_per_step
    if ctx.samples_per_step is not None and from_sink != ctx.samples_per_step:
        flags.append(f"samples_mismatch:sink={from_sink},spec={ctx.samples_per_step}")
    return from_sink


def policy_lag(metrics: dict[str, Any], mean_key: str, max_key: str) -> dict[str, float | None]:
    """The step's logged staleness as StepRecord.policy_lag ({} when the framework logged neither key)."""
    if mean_key not in metrics and max_key not in metrics:
        return {}
    return {name: _finite(metrics.get(key)) for name, key in (("mean", mean_key), ("max", max_key))}


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
