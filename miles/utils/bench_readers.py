# doc-dev: docs/benchmark.md
"""Readers that turn each framework's own metric sink into schema-v1 `StepRecord`s, with no change to either framework.

- `read_verl_file_logger(paths, ctx)`: VERL 0.9.1 `trainer.logger=[file]` JSONL, one `{"step", "data"}` line per
  step; the step-0 validation line (only `val-*` keys) is skipped.
- `read_miles_event_log(paths, ctx)`: the files written by Miles's `--save-debug-event-data` (one JSONL per process;
  every `tracking.log` call is a `{"type": "metric", "metrics": {...}, "timestamp", "source", ...}` line), the
  `perf N:` / `rollout N:` dict lines of a Miles job's stdout (fallback), or files written by `BenchMetricsBackend`;
  the kind is detected per file. The RolloutManager's and the train rank's records of one rollout are merged.
- `normalize_miles_steps` moves the work Miles books into the next step's `train_wait` (weight update, trainer
  offload, checkpoint save; miles.md Gotchas 4-7) back into the step that caused it, as VERL books it.
- `build_step_records(framework, sources, ctx)` is the one entry point: read, normalise, map, derive.
- Real-run defects are kept and flagged on the records, never dropped silently: a truncated last line, NaN/Inf or
  null values (`nonfinite:<key>`, `null:<key>`), missing keys (`missing:<key>`, value None), a step logged again
  after a restart (the last complete attempt wins, `duplicate_step:...`), two processes logging one step (merged;
  differing values flagged `conflict:<key>`).

Caveats:
- Miles's time after its last training block (the final weight update) is in no record, so the last Miles step has
  step_time_s and phases_s.weight_sync None (`miles_shift:no_next_step`).
- Token counts come from per-step means and totals, not per-sample lengths (see `_verl_tokens`, `_miles_tokens`).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miles.utils.bench_metrics import PHASES, Framework, RunContext, StepRecord, derive_step_fields

VERL_STEP_TIME_KEY = "timing_s/step"
VERL_PHASE_KEYS: dict[str, str] = {
    "generate": "timing_s/gen",
    "old_logprob": "timing_s/old_log_prob",
    "ref_logprob": "timing_s/ref",
    "train": "timing_s/update_actor",
    "weight_sync": "timing_s/update_weights",
}
VERL_REQUIRED_KEYS: tuple[str, ...] = (
    VERL_STEP_TIME_KEY,
    *(VERL_PHASE_KEYS[p] for p in ("generate", "old_logprob", "train", "weight_sync")),
    "perf/total_num_tokens",
    "prompt_length/mean",
    "response_length/mean",
)

MILES_STEP_KEY = "rollout/step"
MILES_PHASE_KEYS: dict[str, str] = {
    "generate": "perf/rollout_time",
    "old_logprob": "perf/log_probs_time",
    "ref_logprob": "perf/ref_log_probs_time",
    "train": "perf/actor_train_time",
    "weight_sync": "perf/update_weights_time",
}
# Timers of work done after training N that Miles books into record N+1 (its train_wait). Nested timers
# (update_weights_implementation, finalize_and_resume_engines) are inside update_weights and are not added again.
MILES_CARRIED_KEYS: tuple[str, ...] = (MILES_PHASE_KEYS["weight_sync"], "perf/sleep_time", "perf/save_model_time")
MILES_REQUIRED_KEYS: tuple[str, ...] = (
    "perf/train_wait_time",
    "perf/train_time",
    *(MILES_PHASE_KEYS[p] for p in ("train", "old_logprob", "generate")),
    "perf/actor_train_tok_per_s",
    "rollout/total_lengths",
    "rollout/response_lengths",
)
# A process's record of a step is complete once its anchor metric is there (the train rank's timers, or the
# RolloutManager's rollout perf, or VERL's step timer).
COMPLETE_ANCHORS: tuple[str, ...] = ("perf/train_time", "perf/rollout_time", VERL_STEP_TIME_KEY)
_FILE_ORDER_STRIDE = 1_000_000_000
_STEP_KEYS = frozenset({MILES_STEP_KEY, "training/global_step"})


@dataclass(kw_only=True)
class NativeEvent:
    """One native log call: which process wrote it, at which native step, with which metrics."""

    source: str
    order: int
    """Position in its source (file index * 1e9 + line), to tell restarts apart and attach file defects."""
    step: int
    metrics: dict[str, Any]


@dataclass(kw_only=True)
class NativeStep:
    """The merged native metrics of one step, with flags about how they were assembled."""

    step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class _Issue:
    """A defect of a source file, attached to the record of the step that process was writing when it happened."""

    source: str
    order: int
    flag: str


def _read_json_lines(path: Path, source: str, issues: list[_Issue], *, offset: int = 0) -> list[tuple[int, Any]]:
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
        recovered = _recover_trailing_object(line)
        if recovered is not None:
            issues.append(_Issue(source=source, order=offset + index, flag=f"recovered_line:{path.name}:{index}"))
            parsed.append((index, recovered))
        else:
            kind = "truncated_last_line" if index == len(lines) else "corrupt_line"
            issues.append(_Issue(source=source, order=offset + index, flag=f"{kind}:{path.name}:{index}"))
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


def _verl_events(paths: Iterable[Path], issues: list[_Issue]) -> list[NativeEvent]:
    """All files are one driver process (FileLogger truncates on start, so a restart gives a new file)."""
    events: list[NativeEvent] = []
    for file_index, path in enumerate(paths):
        offset = file_index * _FILE_ORDER_STRIDE
        for line, obj in _read_json_lines(path, "verl-driver", issues, offset=offset):
            if not (isinstance(obj, dict) and isinstance(obj.get("data"), dict) and isinstance(obj.get("step"), int)):
                raise ValueError(f"{path}:{line}: not a VERL FileLogger line (expected {{'step': int, 'data': {{}}}})")
            data = obj["data"]
            if all(k.startswith("val-") or k == "timing_s/testing" for k in data):
                continue  # validation-only line (step 0 before training, or a final validation)
            events.append(NativeEvent(source="verl-driver", order=offset + line, step=obj["step"], metrics=data))
    return events


_STDOUT_DICT_LINE = re.compile(
    r"(?:\[(?P<prefix>[^\]]*)\][^\n]*? - )?\b(?P<kind>perf|rollout) (?P<id>\d+): (?P<d>\{.*\})"
)
_NUMPY_SCALAR = re.compile(r"\bnp\.\w+\(([^()]*)\)")
_BARE_NONFINITE = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")
_NONFINITE_SENTINEL = "__bench_nonfinite__"


def _literal_dict(text: str) -> dict[str, Any]:
    """A Python dict repr as Miles prints it; nan/inf and numpy scalar reprs are accepted, nothing is eval'd."""
    text = _NUMPY_SCALAR.sub(r"\1", text)
    text = _BARE_NONFINITE.sub(lambda m: f"'{_NONFINITE_SENTINEL}{m.group(1)}{m.group(2)}'", text)
    value = ast.literal_eval(text)
    if not isinstance(value, dict):
        raise ValueError("not a dict")
    return {
        k: float(v[len(_NONFINITE_SENTINEL) :]) if isinstance(v, str) and v.startswith(_NONFINITE_SENTINEL) else v
        for k, v in value.items()
    }


def _miles_events(paths: Iterable[Path], issues: list[_Issue]) -> list[NativeEvent]:
    events: list[NativeEvent] = []
    for file_index, path in enumerate(paths):
        head = path.read_text(encoding="utf-8", errors="replace").lstrip()[:1]
        offset = file_index * _FILE_ORDER_STRIDE
        if head == "{":
            events.extend(_miles_jsonl_events(path, issues, offset))
        else:
            events.extend(_miles_stdout_events(path, issues, offset))
    return events


def _process_name(identity: Any) -> str | None:
    """Miles's ProcessIdentity.to_name(): `rollout_manager`, `main`, or `actor_cell<i>_rank<j>`."""
    if not isinstance(identity, dict) or "component" not in identity:
        return None
    if "cell_index" in identity:
        return f"{identity['component']}_cell{identity['cell_index']}_rank{identity.get('rank_within_cell')}"
    return str(identity["component"])


def _miles_jsonl_events(path: Path, issues: list[_Issue], offset: int) -> list[NativeEvent]:
    """An event-log file (one process) or a BenchMetricsBackend file (schema-v1 records, `raw` = native metrics).

    The process is the event's `source` identity (the file name for backend files), so a process whose events are
    spread over several files (a restart writing elsewhere) is still one process.
    """
    first_issue = len(issues)
    lines = _read_json_lines(path, path.stem, issues, offset=offset)
    source = next((_process_name(obj.get("source")) for _, obj in lines if isinstance(obj, dict)), None) or path.stem
    for issue in issues[first_issue:]:
        issue.source = source
    events = []
    for line, obj in lines:
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{line}: expected a JSON object per line")
        if "schema_version" in obj:
            metrics = obj.get("raw") or {}
        elif obj.get("type") == "metric":
            metrics = obj.get("metrics") or {}
        else:
            continue  # other audit events (weight checksums, witness ids, ...)
        step = metrics.get(MILES_STEP_KEY)
        if isinstance(step, (int, float)) and not isinstance(step, bool):
            events.append(NativeEvent(source=source, order=offset + line, step=int(step), metrics=metrics))
    return events


def _miles_stdout_events(path: Path, issues: list[_Issue], offset: int) -> list[NativeEvent]:
    """`perf N: {...}` / `rollout N: {...}` lines; the process is the last word of the `[<time> <process>]` prefix."""
    events = []
    for index, line in enumerate(path.read_text(encoding="utf-8", errors="replace").split("\n"), start=1):
        match = _STDOUT_DICT_LINE.search(line)
        if match is None:
            continue
        source = (match.group("prefix") or "stdout").split()[-1] if match.group("prefix") else "stdout"
        try:
            metrics = _literal_dict(match.group("d"))
        except (ValueError, SyntaxError):
            issues.append(_Issue(source=source, order=offset + index, flag=f"corrupt_line:{path.name}:{index}"))
            continue
        events.append(NativeEvent(source=source, order=offset + index, step=int(match.group("id")), metrics=metrics))
    return events


def merge_native_events(events: list[NativeEvent], issues: list[_Issue] = ()) -> dict[int, NativeStep]:
    """Per process: group by step, start a new attempt when the step goes backwards (a restart), keep the last
    complete attempt. Across processes: union of metrics (a key two processes give different values is flagged)."""
    by_source: dict[str, list[NativeEvent]] = defaultdict(list)
    for event in events:
        by_source[event.source].append(event)
    steps: dict[int, NativeStep] = {}
    for source in sorted(by_source):
        source_events = sorted(by_source[source], key=lambda e: e.order)
        attempts: dict[int, list[tuple[int, dict[str, Any]]]] = defaultdict(list)
        epoch, max_seen = 0, None
        for event in source_events:
            step_attempts = attempts[event.step]
            # One process logs each metric of a step once; the same key again means the step is being re-run.
            relogged = bool(step_attempts) and any(
                k in step_attempts[-1][1] for k in event.metrics if k not in _STEP_KEYS
            )
            if relogged or (max_seen is not None and event.step < max_seen):
                epoch += 1  # the process restarted and logs this step again
            max_seen = event.step if max_seen is None or event.step < max_seen else max(max_seen, event.step)
            if not step_attempts or step_attempts[-1][0] != epoch:
                step_attempts.append((epoch, {}))
            step_attempts[-1][1].update(event.metrics)
        for step, step_attempts in attempts.items():
            merged = steps.setdefault(step, NativeStep(step=step))
            chosen_index = max(
                (i for i, (_, m) in enumerate(step_attempts) if any(k in m for k in COMPLETE_ANCHORS)),
                default=len(step_attempts) - 1,
            )
            chosen = step_attempts[chosen_index][1]
            if len(step_attempts) > 1:
                merged.flags.append(f"duplicate_step:{source}:kept_attempt_{chosen_index + 1}_of_{len(step_attempts)}")
            if not any(k in chosen for k in COMPLETE_ANCHORS):
                merged.flags.append(f"incomplete:{source}")
            for key, value in chosen.items():
                if key in merged.metrics and not _same_value(merged.metrics[key], value):
                    merged.flags.append(f"conflict:{key}")
                    continue
                merged.metrics[key] = value
        for issue in (i for i in issues if i.source == source):
            before = [e.step for e in source_events if e.order < issue.order]
            step = before[-1] if before else (source_events[0].step if source_events else None)
            if step is None and steps:
                step = min(steps)
            if step is not None:
                steps.setdefault(step, NativeStep(step=step)).flags.append(issue.flag)
    return steps


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def _scan_values(metrics: dict[str, Any]) -> list[str]:
    """Flags for values that are there but unusable: NaN/Inf kept as they are, null (how orjson and pydantic write
    NaN/Inf) kept as None."""
    flags = []
    for key, value in metrics.items():
        if value is None:
            flags.append(f"null:{key}")
        elif isinstance(value, float) and not math.isfinite(value):
            flags.append(f"nonfinite:{key}")
    return flags


def _value(metrics: dict[str, Any] | None, key: str, flags: list[str], *, required: bool) -> float | None:
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


def _residual(step_time: float | None, phases: dict[str, float | None], flags: list[str]) -> float | None:
    """phases_s.other: the step minus every reported phase (a phase that is None counts as not there)."""
    known = [v for p, v in phases.items() if p != "other" and v is not None]
    if step_time is None or not math.isfinite(step_time) or not all(math.isfinite(v) for v in known):
        return None
    other = step_time - sum(known)
    if other < -0.01 * step_time:
        flags.append("negative_other:phases overlap or exceed the step")
    return other


def _verl_tokens(metrics: dict[str, Any], flags: list[str], ctx: RunContext) -> tuple[int | None, dict]:
    """Samples from perf/total_num_tokens / (prompt_length/mean + response_length/mean); totals from the means."""
    total = _value(metrics, "perf/total_num_tokens", flags, required=True)
    prompt_mean = _value(metrics, "prompt_length/mean", flags, required=True)
    response_mean = _value(metrics, "response_length/mean", flags, required=True)
    if not all(v is not None and math.isfinite(v) for v in (prompt_mean, response_mean)):
        return None, {"prompt": None, "response": None}
    samples = None
    if total is not None and math.isfinite(total) and prompt_mean + response_mean > 0:
        samples = round(total / (prompt_mean + response_mean))
    samples = _reconcile_samples(samples, ctx, flags)
    if not samples:
        return samples, {"prompt": None, "response": None}
    prompt = round(prompt_mean * samples)
    response = round(total) - prompt if total is not None and math.isfinite(total) else round(response_mean * samples)
    flags.append("tokens:from_means")
    return samples, {"prompt": prompt, "response": response}


def _reconcile_samples(from_sink: int | None, ctx: RunContext, flags: list[str]) -> int | None:
    if from_sink is None:
        if ctx.samples_per_step is not None:
            flags.append("samples:from_spec")
        return ctx.samples_per_step
    if ctx.samples_per_step is not None and from_sink != ctx.samples_per_step:
        flags.append(f"samples_mismatch:sink={from_sink},spec={ctx.samples_per_step}")
    return from_sink


def _verl_record(native: NativeStep, ctx: RunContext) -> StepRecord:
    metrics, flags = native.metrics, [*native.flags, *_scan_values(native.metrics)]
    step_time = _value(metrics, VERL_STEP_TIME_KEY, flags, required=True)
    phases = {
        phase: _value(metrics, key, flags, required=key in VERL_REQUIRED_KEYS)
        for phase, key in VERL_PHASE_KEYS.items()
    }
    phases["other"] = _residual(step_time, phases, flags)
    samples, tokens = _verl_tokens(metrics, flags, ctx)
    return StepRecord(
        framework="verl",
        step=native.step,
        step_time_s=step_time,
        phases_s={p: phases.get(p) for p in PHASES},
        tokens=tokens,
        samples=samples,
        flags=list(dict.fromkeys(flags)),
        raw=metrics,
    )


def _carried_seconds(metrics: dict[str, Any]) -> float:
    """Seconds of MILES_CARRIED_KEYS work in a record (absent timer = that work did not run)."""
    values = [metrics.get(k) for k in MILES_CARRIED_KEYS if k in metrics]
    return sum(math.nan if v is None else float(v) for v in values)


def _miles_tokens(metrics: dict[str, Any], flags: list[str], ctx: RunContext) -> tuple[int | None, dict]:
    """Train side: sum(seq_lens) = perf/actor_train_tok_per_s x perf/actor_train_time; samples = that / the mean
    rollout/total_lengths; response = samples x mean rollout/response_lengths; prompt = the rest."""
    tok_per_s = _value(metrics, "perf/actor_train_tok_per_s", flags, required=True)
    train_s = _value(metrics, "perf/actor_train_time", flags, required=False)
    total_mean = _value(metrics, "rollout/total_lengths", flags, required=True)
    response_mean = _value(metrics, "rollout/response_lengths", flags, required=True)
    usable = all(v is not None and math.isfinite(v) for v in (tok_per_s, train_s, total_mean, response_mean))
    if not usable or total_mean <= 0:
        return _reconcile_samples(None, ctx, flags), {"prompt": None, "response": None}
    total = tok_per_s * train_s
    samples = _reconcile_samples(round(total / total_mean), ctx, flags)
    response = round(response_mean * samples)
    flags.append("tokens:from_means")
    return samples, {"prompt": round(total) - response, "response": response}


def normalize_miles_steps(steps: dict[int, NativeStep], ctx: RunContext) -> list[StepRecord]:
    """Rollout k -> schema step k+1 (VERL counts from 1), with the work done after training k moved into it.

    Miles's record k holds, in train_wait, the weight update / trainer offload / save that followed training k-1;
    record k+1 holds those that followed training k. So:
    step_time(k) = train_wait(k) + train(k) - carried(k) + carried(k+1), weight_sync(k) = update_weights(k+1),
    where carried = update_weights + sleep + save_model. Rollout 0's carried work is the initial weight sync and
    offload, which VERL also leaves out of its steps.
    """
    records = []
    for rollout_id in sorted(steps):
        native, following = steps[rollout_id], steps.get(rollout_id + 1)
        metrics, flags = native.metrics, [*native.flags, *_scan_values(native.metrics)]
        train_wait = _value(metrics, "perf/train_wait_time", flags, required=True)
        train_block = _value(metrics, "perf/train_time", flags, required=True)
        phases = {
            phase: _value(metrics, key, flags, required=key in MILES_REQUIRED_KEYS)
            for phase, key in MILES_PHASE_KEYS.items()
            if phase != "weight_sync"
        }
        step_time = weight_sync = None
        if following is None or "perf/train_wait_time" not in following.metrics:
            flags.append("miles_shift:no_next_step")
        else:
            weight_sync = _value(following.metrics, "perf/update_weights_time", flags, required=True)
            if train_wait is not None and train_block is not None:
                carried_in, carried_out = _carried_seconds(metrics), _carried_seconds(following.metrics)
                step_time = train_wait + train_block - carried_in + carried_out
        phases["weight_sync"] = weight_sync
        phases["other"] = _residual(step_time, phases, flags)
        samples, tokens = _miles_tokens(metrics, flags, ctx)
        records.append(
            StepRecord(
                framework="miles",
                step=rollout_id + 1,
                step_time_s=step_time,
                phases_s={p: phases.get(p) for p in PHASES},
                tokens=tokens,
                samples=samples,
                flags=list(dict.fromkeys(flags)),
                raw=metrics,
            )
        )
    return records


def read_verl_file_logger(paths: Iterable[str | Path], ctx: RunContext) -> list[StepRecord]:
    return build_step_records("verl", paths, ctx)


def read_miles_event_log(paths: Iterable[str | Path], ctx: RunContext) -> list[StepRecord]:
    return build_step_records("miles", paths, ctx)


def expand_sources(sources: Iterable[str | Path]) -> list[Path]:
    """Files as given; a folder stands for its *.jsonl files (a Miles event dir, a sink/ folder), sorted."""
    paths: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            found = sorted(path.rglob("*.jsonl"))
            if not found:
                raise ValueError(f"{path}: folder holds no *.jsonl file")
            paths.extend(found)
        elif path.is_file():
            paths.append(path)
        else:
            raise ValueError(f"{path}: no such file or folder")
    return paths


def build_step_records(framework: Framework, sources: Iterable[str | Path], ctx: RunContext) -> list[StepRecord]:
    """Read a framework's sink files, merge processes and restarts, normalise, map to schema v1, derive."""
    paths = expand_sources(sources)
    issues: list[_Issue] = []
    if framework == "verl":
        events = _verl_events(paths, issues)
    elif framework == "miles":
        events = _miles_events(paths, issues)
    else:
        raise ValueError(f"framework must be 'miles' or 'verl', got {framework!r}")
    if not events:
        raise ValueError(f"no {framework} step metrics found in {', '.join(str(p) for p in paths)}")
    steps = merge_native_events(events, issues)
    if framework == "verl":
        records = [_verl_record(steps[s], ctx) for s in sorted(steps)]
    else:
        records = normalize_miles_steps(steps, ctx)
    return [derive_step_fields(record, ctx) for record in records]
