"""The `learning` block of each step record, from the native metrics the readers keep in `StepRecord.raw`.

Both frameworks log what their policy learns; this maps their keys onto `LEARNING_SIGNALS` (bench_metrics.py) in
one unit per signal (docs/benchmark/metrics.md, "Learning signals", has the table and the reasons):
- VERL: the FileLogger `data` dict of the step (`critic/score/mean`, `response_length/*`, `actor/*`).
- Miles: the merged rollout metrics of the step (`rollout/raw_reward`, `rollout/response_lengths`,
  `rollout/truncated`, `rollout/entropy`) plus the mean over the step's optimizer steps of the train rank's
  `train/*` metrics (miles/train_steps.py), which the rollout readers do not keep.

A signal a framework did not log is None with the flag `learning_missing:<signal>`; a value that cannot be turned
into the signal's unit is None with `learning_unknown:<signal>:<why>`.

Caveats:
- VERL 0.9.1's `response_length/clip_ratio` counts samples at the longest response of the batch, not at the cap:
  it is the truncation fraction only when `response_length/max` reached the cap (RunContext.max_response_tokens),
  and 0 otherwise.
- Miles's `rollout/rewards` is the group-normalised reward (mean ~0); the raw score is `rollout/raw_reward`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from miles.utils.bench_metrics import LEARNING_SIGNALS, Framework, RunContext, StepRecord, finite_or_none
from scripts.benchmark.frameworks.miles import train_steps as miles_train

VERL_LEARNING_KEYS: dict[str, str] = {
    "reward_mean": "critic/score/mean",
    "response_length_mean": "response_length/mean",
    "entropy": "actor/entropy",
    "clip_fraction": "actor/pg_clipfrac",
    "approx_kl": "actor/ppo_kl",
    "grad_norm": "actor/grad_norm",
    "policy_loss": "actor/pg_loss",
}
VERL_CLIP_RATIO_KEY, VERL_LENGTH_MAX_KEY = "response_length/clip_ratio", "response_length/max"

MILES_LEARNING_KEYS: dict[str, tuple[str, ...]] = {
    "reward_mean": ("rollout/raw_reward",),
    "response_length_mean": ("rollout/response_lengths", "rollout/response_len/mean"),
    "truncation_fraction": ("rollout/truncated", "rollout/truncated_ratio"),
    "entropy": ("rollout/entropy",),
    "clip_fraction": ("train/pg_clipfrac",),
    "approx_kl": ("train/ppo_kl",),
    "grad_norm": ("train/grad_norm",),
    "policy_loss": ("train/pg_loss",),
}


def _first(metrics: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        if key in metrics:
            return finite_or_none(metrics[key])
    return None


def verl_truncation(raw: dict[str, Any], ctx: RunContext, flags: list[str]) -> float | None:
    """The share of samples at the cap, from VERL's batch-max clip ratio and the longest response of the step."""
    clip_ratio, longest = finite_or_none(raw.get(VERL_CLIP_RATIO_KEY)), finite_or_none(raw.get(VERL_LENGTH_MAX_KEY))
    if clip_ratio is None:
        return None
    if ctx.max_response_tokens is None:
        flags.append("learning_unknown:truncation_fraction:no max_response_tokens to read the clip ratio against")
        return None
    if longest is None:
        flags.append(f"learning_unknown:truncation_fraction:no {VERL_LENGTH_MAX_KEY}")
        return None
    return clip_ratio if longest >= ctx.max_response_tokens else 0.0


def verl_learning(raw: dict[str, Any], ctx: RunContext, flags: list[str]) -> dict[str, float | None]:
    values = {name: finite_or_none(raw.get(key)) for name, key in VERL_LEARNING_KEYS.items()}
    values["truncation_fraction"] = verl_truncation(raw, ctx, flags)
    return {name: values.get(name) for name in LEARNING_SIGNALS}


def miles_learning(metrics: dict[str, Any]) -> dict[str, float | None]:
    """`metrics`: the step's rollout metrics merged with its `train/*` means."""
    return {name: _first(metrics, MILES_LEARNING_KEYS.get(name, ())) for name in LEARNING_SIGNALS}


def _miles_train_means(
    records: list[StepRecord], paths: list[Path], ctx: RunContext
) -> Callable[[int], tuple[dict[str, float], list[str]]]:
    """Per schema step: the `train/*` means and the flags about how they were grouped."""
    train_steps = miles_train.read_train_steps(paths)
    per_step = ctx.optimizer_steps_per_step
    if per_step is None:
        per_step = miles_train.infer_optimizer_steps(train_steps, len(records))
    if not train_steps or per_step is None or per_step <= 0:
        why = "no train/step metrics" if not train_steps else "optimizer steps per step unknown"
        return lambda step: ({}, [f"learning_unknown:train_signals:{why}"])
    means = miles_train.train_means_by_step(train_steps, per_step)

    def lookup(step: int) -> tuple[dict[str, float], list[str]]:
        values, seen = means.get(step, ({}, 0))
        return values, ([] if seen >= per_step else [f"learning:partial_train_steps:{seen}/{per_step}"])

    return lookup


def fill_learning(
    framework: Framework, records: list[StepRecord], paths: list[Path], ctx: RunContext
) -> list[StepRecord]:
    """Set `learning` (and its flags) on each record; returns the same records."""
    train_lookup = _miles_train_means(records, paths, ctx) if framework == "miles" and records else None
    for record in records:
        flags: list[str] = []
        if train_lookup is None:
            learning = verl_learning(record.raw, ctx, flags)
        else:
            train_means, train_flags = train_lookup(record.step)
            learning = miles_learning({**record.raw, **train_means})
            flags += train_flags
        flags += [f"learning_missing:{name}" for name, value in learning.items() if value is None]
        record.learning = learning
        record.flags = list(dict.fromkeys([*record.flags, *flags]))
    return records
