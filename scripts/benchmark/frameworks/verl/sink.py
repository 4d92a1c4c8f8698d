"""VERL 0.9.1's FileLogger sink (`trainer.logger=[file]`) -> schema records: one `{"step", "data"}` line per step.

`timing_s/gen` wraps the trainer's `replay_buffer.sample()` (v1 trainer_base `_step_once`): the trainer's wait for
the step's batch. In the colocated sync trainer generation runs inside that wait, so it is also the generation wall
time (plus <= one 2 s poll and the replica sleep); in separate_async (disaggregated) generation runs on the rollout
pool meanwhile and VERL 0.9.1 logs no rollout-side time at all: phases_s.generate is then None, flagged.

The step-0 validation line (only `val-*` keys) is skipped. All files are one driver process: FileLogger truncates
on start, so a restart gives a new file. Token counts come from per-step means and totals (`_verl_tokens`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

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

VERL_STEP_TIME_KEY = "timing_s/step"
VERL_WAIT_KEY = "timing_s/gen"
VERL_PHASE_KEYS: dict[str, str] = {
    "rollout_wait": VERL_WAIT_KEY,
    "old_logprob": "timing_s/old_log_prob",
    "ref_logprob": "timing_s/ref",
    "train": "timing_s/update_actor",
    "weight_sync": "timing_s/update_weights",
}
VERL_REQUIRED_KEYS: tuple[str, ...] = (
    VERL_STEP_TIME_KEY,
    *(VERL_PHASE_KEYS[p] for p in ("rollout_wait", "old_logprob", "train", "weight_sync")),
    "perf/total_num_tokens",
    "prompt_length/mean",
    "response_length/mean",
)

COMPLETE_ANCHORS: tuple[str, ...] = (VERL_STEP_TIME_KEY,)
"""A step's record is complete once VERL's step timer is there."""


def verl_events(paths: Iterable[Path], issues: list[SinkIssue]) -> list[NativeEvent]:
    """All files are one driver process (FileLogger truncates on start, so a restart gives a new file). Lines carry
    no time: the files are taken oldest first by modification time. A JSON line that is not a FileLogger line
    (something else writing into the file) is skipped and flagged; a file with no FileLogger line at all is refused."""
    events: list[NativeEvent] = []
    for file_index, path in enumerate(files_in_time_order(list(paths))):
        offset = file_index * FILE_ORDER_STRIDE
        foreign: list[int] = []
        lines = read_json_lines(path, "verl-driver", issues, offset=offset)
        for line, obj in lines:
            if not (isinstance(obj, dict) and isinstance(obj.get("data"), dict) and isinstance(obj.get("step"), int)):
                foreign.append(line)
                continue
            data = obj["data"]
            if all(k.startswith("val-") or k == "timing_s/testing" for k in data):
                continue  # validation-only line (step 0 before training, or a final validation)
            events.append(NativeEvent(source="verl-driver", order=offset + line, step=obj["step"], metrics=data))
        if foreign and len(foreign) == len(lines):
            raise ValueError(
                f"{path}:{foreign[0]}: not a VERL FileLogger line (expected {{'step': int, 'data': {{}}}})"
            )
        issues.extend(
            SinkIssue(source="verl-driver", order=offset + line, flag=f"foreign_line:{path.name}:{line}")
            for line in foreign
        )
    return events


def _verl_tokens(metrics: dict[str, Any], flags: list[str], ctx: RunContext) -> tuple[int | None, dict]:
    """Samples from perf/total_num_tokens / (prompt_length/mean + response_length/mean); totals from the means."""
    total = metric_value(metrics, "perf/total_num_tokens", flags, required=True)
    prompt_mean = metric_value(metrics, "prompt_length/mean", flags, required=True)
    response_mean = metric_value(metrics, "response_length/mean", flags, required=True)
    if not all(v is not None and math.isfinite(v) for v in (prompt_mean, response_mean)):
        return None, {"prompt": None, "response": None}
    samples = None
    if total is not None and math.isfinite(total) and prompt_mean + response_mean > 0:
        samples = round(total / (prompt_mean + response_mean))
    samples = reconcile_samples(samples, ctx, flags)
    if not samples:
        return samples, {"prompt": None, "response": None}
    prompt = round(prompt_mean * samples)
    response = round(total) - prompt if total is not None and math.isfinite(total) else round(response_mean * samples)
    flags.append("tokens:from_means")
    return samples, {"prompt": prompt, "response": response}


def _rollout_side_generate(wait: float | None, ctx: RunContext, flags: list[str]) -> float | None:
    """Generation wall time: the trainer's wait when the trainer is the one generating (colocated sync), else
    nothing VERL logs; in a replay nothing is generated (the wait is the recorded batch's load)."""
    if ctx.replay:
        flags.append("generate:not_recorded:replay")
        return None
    if ctx.layout == "colocate":
        return wait
    why = "verl_separate_async_logs_no_rollout_time" if ctx.layout == "disaggregated" else "verl_layout_unknown"
    flags.append(f"generate:not_recorded:{why}")
    return None


# In a replay (skip.rollout_tq) VERL's loader stamps every trajectory with the current step as both its oldest and
# newest version (utils/skip/rollout_skip.py), so VERL logs a staleness of -1 there: no lag is read from a replay.
VERL_LAG_KEYS = (
    "training/off_policy/trajectory_staleness_worst/mean",
    "training/off_policy/trajectory_staleness_worst/max",
)
"""V1 trainer_base.py: (global_steps - 1) - the oldest version a trajectory was generated with, every step; the
`_worst` variant because the replay buffer's threshold bounds the oldest version (the plain one uses the newest)."""


def verl_record(native: NativeStep, ctx: RunContext) -> StepRecord:
    metrics, flags = native.metrics, [*native.flags, *scan_values(native.metrics)]
    step_time = duration_value(metrics, VERL_STEP_TIME_KEY, flags, required=True)
    phases = {
        phase: duration_value(metrics, key, flags, required=key in VERL_REQUIRED_KEYS)
        for phase, key in VERL_PHASE_KEYS.items()
    }
    phases["generate"] = _rollout_side_generate(phases["rollout_wait"], ctx, flags)
    phases["other"] = residual_other(step_time, {p: v for p, v in phases.items() if p != "generate"}, flags)
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
        policy_lag={} if ctx.replay else policy_lag(metrics, *VERL_LAG_KEYS),
    )
