"""Miles's sinks -> schema records: the `perf N:` / `rollout N:` dict lines of a Miles job's stdout (what the
harness reads: Miles prints them anyway), or the event log of `--save-debug-event-data` (one JSONL per process;
every `tracking.log` call is a `{"type": "metric", "metrics": {...}, "source", ...}` line), or the files of the
benchmark tracking backend (tracking_sink.py); the kind is detected per file. The RolloutManager's and the train
rank's records of one rollout are merged.

phases_s.generate = the RolloutManager's perf/rollout_time (rollout side, the rollout id whose data it is);
phases_s.rollout_wait = the trainer's perf/train_wait_time minus the work booked into it from the previous step.

`normalize_miles_steps` moves the work Miles books into the next step's `train_wait` (weight update, trainer
offload, checkpoint save, and from stdout the post-train time: the Megatron actor's CPU weight backup and any
debug dump between the `Timer train end` line and the `perf N:` line of the train rank) back into the step that
caused it, as VERL books it. Miles's time after its last training
block (the final weight update) is in no record, so the last Miles step has step_time_s and phases_s.weight_sync
None (`miles_shift:no_next_step`). Token counts come from per-step means and totals (`_miles_tokens`).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scripts.benchmark.frameworks.miles.tracking_sink import attempt_order, tracking_events
from scripts.benchmark.frameworks.native_events import (
    FILE_ORDER_STRIDE,
    NativeEvent,
    NativeStep,
    SinkIssue,
    duration_value,
    files_in_time_order,
    metric_value,
    policy_lag,
    read_json_lines,
    reconcile_samples,
    residual_other,
    scan_values,
)

from miles.utils.bench_metrics import PHASES, RunContext, StepRecord

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
MILES_VERSION_KEYS = ("rollout/weight_version/mean", "rollout/weight_version/min")
"""Every loop (`log_rollout_data`, miles/ray/rollout/metrics.py): statistics over the rollout's samples of each
sample's oldest weight version (`Sample.weight_versions`, one per generation call from SGLang's meta_info: the
engine's version when the call finished), logged when the engines report numeric versions. The policy lag is read
from these against the training policy's version, in every loop; --fully-async's own
`rollout/fully_async/max_staleness` is not a lag against the training policy (the buffer compares with the engines'
version when the batch is drained, one update before it trains), so it stays in `raw` only."""
POST_TRAIN_KEY = "stdout/post_train_time"
"""Seconds from the train rank's `Timer train end` line to its `perf N:` line (stdout timestamps, ms): work after the
train timer that Miles books into the next record's train_wait. Only in stdout sinks."""
POST_TRAIN_TIMERS: tuple[str, ...] = ("perf/weight_backup_time", "perf/ref_model_update_time")
"""Timers of the work the train rank does after its train timer and before its perf line, logged in that perf line
(the Megatron actor's CPU weight copy: the patch series' `weight_backup` timer; the reference model's update): the
post-train time where no console timestamps give it (the tracking backend, an event log)."""
NEGATIVE_SLACK_S = 0.01
"""A derived duration below minus this is no duration: a wall clock stepped back inside a timer (Miles's Timer reads
time.time()); within it, the rounding of timers and console timestamps (1 ms)."""
COMPLETE_ANCHORS: tuple[str, ...] = ("perf/train_time", "perf/rollout_time")
"""A process's record of a step is complete once its anchor is there (the train rank's timers, or the
RolloutManager's rollout perf)."""


_STDOUT_DICT_LINE = re.compile(
    r"(?:\[(?P<prefix>[^\]]*)\][^\n]*? - )?\b(?P<kind>perf|rollout) (?P<id>\d+): (?P<d>\{.*\})"
)
_DICT_START = re.compile(r"\b(?:perf|rollout) \d+: \{")
_SEGMENT_PREFIX = re.compile(r"(?:\[(?P<prefix>[^\]]*)\][^\n]*? - )?\b(?:perf|rollout) \d+: \{")
_BRACKET = re.compile(r"\[[^\[\]]*\]")
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


def miles_events(paths: Iterable[Path], issues: list[SinkIssue]) -> list[NativeEvent]:
    """Files oldest first: the tracking backend's by the creation sequence their processes claimed, after any other
    file (first event timestamp, else modification time); a process restart is marked on the first metric event of
    each process after an initial weight sync (see `_mark_new_processes`)."""
    events: list[NativeEvent] = []
    initial_syncs: list[float] = []
    tracking = {path: order for path in paths if (order := attempt_order(path)) is not None}
    others = files_in_time_order([path for path in paths if path not in tracking], first_time=_first_event_time)
    ordered = others + sorted(tracking, key=lambda path: (tracking[path], str(path)))
    for file_index, path in enumerate(ordered):
        offset = file_index * FILE_ORDER_STRIDE
        if path in tracking:
            events.extend(tracking_events(path, issues, offset))
        elif path.read_text(encoding="utf-8", errors="replace").lstrip()[:1] == "{":
            events.extend(_miles_jsonl_events(path, issues, offset, initial_syncs))
        else:
            events.extend(_miles_stdout_events(path, issues, offset))
    _mark_new_processes(events, initial_syncs)
    return events


def _event_time(obj: Any) -> float | None:
    """An event's `timestamp` (pydantic's ISO-8601, `Z` or an offset) as seconds since the epoch."""
    stamp = obj.get("timestamp") if isinstance(obj, dict) else None
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _first_event_time(path: Path) -> float | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.strip():
                    try:
                        return _event_time(json.loads(line))
                    except json.JSONDecodeError:
                        return None
    except OSError:
        return None
    return None


def _mark_new_processes(events: list[NativeEvent], initial_syncs: list[float]) -> None:
    """Miles logs an `inference_engine_weight_checksum` event with rollout_id null for the initial weight sync a
    new process does before its first rollout. After a resume with --load at rollout r, that first record (r)
    carries the new process's initial sync in its train_wait, not the update that followed training r-1."""
    by_source: dict[str, list[NativeEvent]] = {}
    for event in events:
        if event.time is not None:
            by_source.setdefault(event.source, []).append(event)
    for sync_time in initial_syncs:
        for source_events in by_source.values():
            after = [e for e in source_events if e.time > sync_time]
            if after:
                min(after, key=lambda e: (e.time, e.order)).new_process = True


def _process_name(identity: Any) -> str | None:
    """Miles's ProcessIdentity.to_name(): `rollout_manager`, `main`, or `actor_cell<i>_rank<j>`."""
    if not isinstance(identity, dict) or "component" not in identity:
        return None
    if "cell_index" in identity:
        return f"{identity['component']}_cell{identity['cell_index']}_rank{identity.get('rank_within_cell')}"
    return str(identity["component"])


def _miles_jsonl_events(
    path: Path, issues: list[SinkIssue], offset: int, initial_syncs: list[float]
) -> list[NativeEvent]:
    """An event-log file (one process).

    The process is the event's `source` identity (else the file name), so a process whose events are
    spread over several files (a restart writing elsewhere) is still one process; other event types (weight
    checksums, witness ids) are skipped.
    """
    first_issue = len(issues)
    lines = read_json_lines(path, path.stem, issues, offset=offset)
    source = next((_process_name(obj.get("source")) for _, obj in lines if isinstance(obj, dict)), None) or path.stem
    for issue in issues[first_issue:]:
        issue.source = source
    events = []
    for line, obj in lines:
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{line}: expected a JSON object per line")
        if obj.get("type") == "inference_engine_weight_checksum" and obj.get("rollout_id") is None:
            if (sync_time := _event_time(obj)) is not None:
                initial_syncs.append(sync_time)
        if obj.get("type") != "metric":
            continue
        metrics = obj.get("metrics") or {}
        step = metrics.get(MILES_STEP_KEY)
        if isinstance(step, (int, float)) and not isinstance(step, bool):
            events.append(
                NativeEvent(source=source, order=offset + line, step=int(step), metrics=metrics, time=_event_time(obj))
            )
    return events


_LOG_PREFIX = re.compile(r"\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) (?P<process>[^\]\s]+)\]")
_TIMER_LINE = re.compile(r" - Timer (?P<name>\S+) (?P<what>start|end)\b")


def _stamp(line: str) -> tuple[str, float] | None:
    """(process, seconds) from Miles's `[%Y-%m-%d %H:%M:%S.mmm <process>]` log prefix."""
    match = _LOG_PREFIX.search(line)
    if match is None:
        return None
    when = datetime.strptime(match.group("time"), "%Y-%m-%d %H:%M:%S.%f")
    return match.group("process"), when.replace(tzinfo=timezone.utc).timestamp()


def _train_group(process: str) -> str:
    """The component a train process belongs to (`actor`, `critic`): Miles's Timer lines come from global rank 0
    only, its `perf N:` line from the last pipeline stage, so with PP>1 the two are different ranks of one group."""
    return process.split("_cell", 1)[0]


def _dict_segments(line: str) -> list[str]:
    """A stdout line cut into one piece per `perf N: {` / `rollout N: {` it holds, each from its log prefix: a line
    cut by a crash has the next process's line glued to it."""
    starts = [m.start() for m in _DICT_START.finditer(line)]
    cuts = [0]
    for start in starts[1:]:
        prefixes = [m.start() for m in _BRACKET.finditer(line, cuts[-1], start)]
        cuts.append(prefixes[-1] if prefixes else start)
    return [line[a:b] for a, b in zip(cuts, [*cuts[1:], len(line)], strict=True)]


class _TimerLines:
    """What a train group's `Timer` lines (global rank 0 only) tell the stdout reader: when its last train block
    ended, and whether a new process has started. The train actor starts its `train_wait` timer once at the end of
    its init and then after every train block; a `train_wait` start with no `train` end before it is a new process
    (the first one, or a restart such as a resume with --load, which keeps the process names)."""

    def __init__(self) -> None:
        self.train_end: dict[str, float] = {}
        self.after_train: dict[str, bool] = {}
        self.new_process: set[str] = set()

    def read(self, line: str) -> None:
        match = _TIMER_LINE.search(line)
        stamp = _stamp(line) if match else None
        if stamp is None:
            return
        group = _train_group(stamp[0])
        if match.group("name") == "train" and match.group("what") == "end":
            self.train_end[group], self.after_train[group] = stamp[1], True
        elif match.group("name") == "train_wait" and match.group("what") == "start":
            if not self.after_train.get(group):
                self.new_process.add(group)
            self.after_train[group] = False

    def post_train(self, group: str, stamp: tuple[str, float] | None) -> float | None:
        """Seconds from the group's last `Timer train end` to a `perf N:` line, once per train end."""
        if stamp is None or group not in self.train_end:
            return None
        return round(stamp[1] - self.train_end.pop(group), 3)


def _miles_stdout_events(path: Path, issues: list[SinkIssue], offset: int) -> list[NativeEvent]:
    """`perf N: {...}` / `rollout N: {...}` lines; the process is the last word of the `[<time> <process>]` prefix.

    A line still being written (no newline yet) is left for the next read; a dict line cut short (a crash) is
    flagged on the step its process was writing. A train rank's `perf N:` line following its group's
    `Timer train end` line gets POST_TRAIN_KEY; the first event of a group after a new process started is marked."""
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    events, timers = [], _TimerLines()
    for index, line in enumerate(lines, start=1):
        unfinished = index == len(lines) and line != ""
        timers.read(line)
        segments = _dict_segments(line) if _DICT_START.search(line) else []
        for number, segment in enumerate(segments, start=1):
            match = _STDOUT_DICT_LINE.search(segment)
            stamp, prefix = _stamp(segment), _SEGMENT_PREFIX.search(segment).group("prefix")
            source = prefix.split()[-1] if prefix and prefix.split() else "stdout"
            last = number == len(segments)
            metrics = _segment_metrics(match, path, index, offset, unfinished and last, source, issues)
            if metrics is None:
                continue
            group = _train_group(source)
            if match.group("kind") == "perf" and "perf/train_time" in metrics:
                if (post_train := timers.post_train(group, stamp)) is not None:
                    metrics[POST_TRAIN_KEY] = post_train
            event = NativeEvent(source=source, order=offset + index, step=int(match.group("id")), metrics=metrics)
            if group in timers.new_process:
                timers.new_process.discard(group)
                event.new_process = True
            events.append(event)
    return events


def _segment_metrics(
    match: re.Match | None, path: Path, index: int, offset: int, unfinished: bool, source: str, issues: list
) -> dict[str, Any] | None:
    """The dict of one line piece, or None with an issue (none for a line still being written)."""
    try:
        if match is None:
            raise ValueError("no closing brace")
        return _literal_dict(match.group("d"))
    except (ValueError, SyntaxError):
        if not unfinished:
            kind = "truncated_line" if match is None else "corrupt_line"
            issues.append(SinkIssue(source=source, order=offset + index, flag=f"{kind}:{path.name}:{index}"))
        return None


def _carried_seconds(metrics: dict[str, Any], flags: list[str]) -> float:
    """Seconds of MILES_CARRIED_KEYS work in a record (absent timer = that work did not run; a negative one is no
    duration: NaN, flagged)."""
    values = [duration_value(metrics, k, flags, required=False) for k in MILES_CARRIED_KEYS if k in metrics]
    return sum(math.nan if v is None else v for v in values)


def _post_train_seconds(native: NativeStep | None, flags: list[str]) -> float:
    """The post-train time of a record: the console's timestamps where the sink has them, else the timers of that
    work (0 with a flag when neither is there: an older Miles's event log, or a console without timer lines)."""
    if native is None:
        return 0.0
    value = native.metrics.get(POST_TRAIN_KEY)
    if value is None:
        timed = [duration_value(native.metrics, k, flags, required=False) for k in POST_TRAIN_TIMERS]
        timed = [v for k, v in zip(POST_TRAIN_TIMERS, timed, strict=True) if k in native.metrics]
        if not timed:
            flags.append("miles_shift:post_train_untimed")
            return 0.0
        return sum(math.nan if v is None else v for v in timed)
    if float(value) < 0:  # the wall clock stepped back between `Timer train end` and the perf line: not a duration
        flags.append("miles_shift:post_train_clock_stepped_back")
        return 0.0
    return float(value)


def _required_keys(ctx: RunContext) -> tuple[str, ...]:
    """In a replay (`--load-debug-rollout-data`) the rollout manager returns from `log_rollout_data` before logging
    (miles/ray/rollout/metrics.py): its perf/rollout_time is not missing, it is not there by design."""
    if not ctx.replay:
        return MILES_REQUIRED_KEYS
    return tuple(key for key in MILES_REQUIRED_KEYS if key != MILES_PHASE_KEYS["generate"])


def _miles_tokens(metrics: dict[str, Any], flags: list[str], ctx: RunContext) -> tuple[int | None, dict]:
    """Train side: sum(seq_lens) = perf/actor_train_tok_per_s x perf/actor_train_time; samples = that / the mean
    rollout/total_lengths; response = samples x mean rollout/response_lengths; prompt = the rest."""
    tok_per_s = metric_value(metrics, "perf/actor_train_tok_per_s", flags, required=True)
    train_s = metric_value(metrics, "perf/actor_train_time", flags, required=False)
    total_mean = metric_value(metrics, "rollout/total_lengths", flags, required=True)
    response_mean = metric_value(metrics, "rollout/response_lengths", flags, required=True)
    usable = all(v is not None and math.isfinite(v) for v in (tok_per_s, train_s, total_mean, response_mean))
    if not usable or total_mean <= 0:
        return reconcile_samples(None, ctx, flags), {"prompt": None, "response": None}
    total = tok_per_s * train_s
    samples = reconcile_samples(round(total / total_mean), ctx, flags)
    response = round(response_mean * samples)
    flags.append("tokens:from_means")
    return samples, {"prompt": round(total) - response, "response": response}


REFUSED_FLAGS: dict[str, str] = {
    "--wandb-always-use-train-step": "it puts Miles's rollout/step on the optimizer-step axis "
    "(rollout_id x rollout_batch_size x n_samples_per_prompt // global_batch_size), which breaks the step shift",
}
"""Miles flags the readers cannot measure under; a plan's Miles cell carrying one is refused before it runs."""


def find_refused_flags(argv: Iterable[str]) -> list[str]:
    return [
        f"{word.split('=')[0]}: {REFUSED_FLAGS[word.split('=')[0]]}"
        for word in argv
        if word.split("=")[0] in REFUSED_FLAGS
    ]


def _check_rollout_axis(steps: dict[int, NativeStep]) -> None:
    """rollout/step advancing by k > 1 per rollout is --wandb-always-use-train-step: refuse rather than mis-shift."""
    ids = sorted(steps)
    if len(ids) < 2:
        return
    stride = math.gcd(*(b - a for a, b in zip(ids[:-1], ids[1:], strict=True)))
    if stride > 1 and ids[0] % stride == 0:
        shown = ", ".join(str(i) for i in ids[:4])
        raise ValueError(
            f"Miles rollout/step advances by {stride} per rollout ({shown}, ...): the job ran with "
            f"--wandb-always-use-train-step; {REFUSED_FLAGS['--wandb-always-use-train-step']}; rerun without it"
        )


def normalize_miles_steps(steps: dict[int, NativeStep], ctx: RunContext) -> list[StepRecord]:
    """Rollout k -> schema step k+1 (VERL counts from 1), with the work done after training k moved into it.

    Miles's record k holds, in train_wait, the work that followed training k-1; record k+1 holds the work that
    followed training k. With carried(k) = update_weights + sleep + save_model of record k plus the post-train time
    of record k-1: step_time(k) = train_wait(k) + train(k) - carried(k) + carried(k+1),
    rollout_wait(k) = train_wait(k) - carried(k), weight_sync(k) = update_weights(k+1). The post-train time of k
    stays in step k's `other`. Rollout 0's carried work is the initial weight sync and offload, which VERL also
    leaves out of its steps.
    """
    _check_rollout_axis(steps)
    records = []
    for rollout_id in sorted(steps):
        native, following = steps[rollout_id], steps.get(rollout_id + 1)
        metrics, flags = native.metrics, [*native.flags, *scan_values(native.metrics)]
        train_wait = duration_value(metrics, "perf/train_wait_time", flags, required=True)
        train_block = duration_value(metrics, "perf/train_time", flags, required=True)
        required = _required_keys(ctx)
        phases = {
            phase: duration_value(metrics, key, flags, required=key in required)
            for phase, key in MILES_PHASE_KEYS.items()
            if phase != "weight_sync"
        }
        if ctx.replay:  # the rollout manager logs no rollout record when it loads a recording (metrics.py)
            flags.append("generate:not_recorded:replay")
        # A new process's first record waited for its own start, not for the previous process's post-train work.
        previous = None if native.new_process else steps.get(rollout_id - 1)
        carried_in = _carried_seconds(metrics, flags) + _post_train_seconds(previous, flags)
        phases["rollout_wait"] = None if train_wait is None else train_wait - carried_in
        if phases["rollout_wait"] is not None and phases["rollout_wait"] < -NEGATIVE_SLACK_S:
            # train_wait is shorter than the work inside it: the clock stepped back while it ran, so it and the step
            # time built on it are no durations
            flags.append("negative_duration:phases_s.rollout_wait")
            phases["rollout_wait"] = train_wait = None
        step_time = weight_sync = None
        if following is None or "perf/train_wait_time" not in following.metrics:
            flags.append("miles_shift:no_next_step")
        elif following.new_process:  # its train_wait holds a restarted process's initial sync, not our update
            flags.append("miles_shift:next_step_restarted")
        elif following.superseded and not native.superseded:  # the next record is another attempt's, not ours
            flags.append("miles_shift:next_step_superseded")
        else:
            # a replay (debug_train_only) syncs no weights: no update timer is expected
            weight_sync = duration_value(following.metrics, "perf/update_weights_time", flags, required=not ctx.replay)
            if train_wait is not None and train_block is not None:
                carried_out = _carried_seconds(following.metrics, flags) + _post_train_seconds(native, flags)
                step_time = train_wait + train_block - carried_in + carried_out
        phases["weight_sync"] = weight_sync
        phases["other"] = residual_other(step_time, {p: v for p, v in phases.items() if p != "generate"}, flags)
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
                policy_lag={} if ctx.replay else _miles_policy_lag(metrics, rollout_id),
            )
        )
    return records


def _miles_policy_lag(metrics: dict[str, Any], rollout_id: int) -> dict[str, float | None]:
    """The lag of the samples' weight versions behind the policy that trains them. Miles's first weight sync makes
    the engines' version 1 and each step's update adds one before the next rollout is trained (the launches update
    every step), so rollout k trains policy version k + 1: lag mean = k + 1 - mean oldest version, max = k + 1 - min
    oldest version (VERL's worst-case definition, on the versions each side records)."""
    versions = policy_lag(metrics, *MILES_VERSION_KEYS)  # {"mean": mean oldest version, "max": min oldest version}
    trained = rollout_id + 1
    return {name: None if v is None else trained - v for name, v in versions.items()}
