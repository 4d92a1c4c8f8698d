"""Miles's learning signals: the merged rollout metrics of the step (`rollout/raw_reward`,
`rollout/response_lengths`, `rollout/truncated`, `rollout/entropy`) plus the mean over the step's optimizer steps of
the train rank's `train/*` metrics (train_steps.py), which the rollout readers do not keep.

Caveats:
- Miles's `rollout/rewards` is the group-normalised reward (mean ~0); the raw score is `rollout/raw_reward`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scripts.benchmark.frameworks.learning_signals import learning_from_keys, set_learning
from scripts.benchmark.frameworks.miles.train_steps import infer_optimizer_steps, read_train_steps, train_means_by_step

from miles.utils.bench_metrics import RunContext, StepRecord

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


def _train_means(
    records: list[StepRecord], paths: list[Path], ctx: RunContext
) -> Callable[[int], tuple[dict[str, float], list[str]]]:
    """Per schema step: the `train/*` means and the flags about how they were grouped."""
    train_steps = read_train_steps(paths)
    per_step = ctx.optimizer_steps_per_step
    if per_step is None:
        per_step = infer_optimizer_steps(train_steps, len(records))
    if not train_steps or per_step is None or per_step <= 0:
        why = "no train/step metrics" if not train_steps else "optimizer steps per step unknown"
        return lambda step: ({}, [f"learning_unknown:train_signals:{why}"])
    means = train_means_by_step(train_steps, per_step)

    def lookup(step: int) -> tuple[dict[str, float], list[str]]:
        values, seen = means.get(step, ({}, 0))
        return values, ([] if seen >= per_step else [f"learning:partial_train_steps:{seen}/{per_step}"])

    return lookup


def fill_miles_learning(records: list[StepRecord], paths: list[Path], ctx: RunContext) -> list[StepRecord]:
    """Set `learning` (and its flags) on each record; returns the same records."""
    if not records:
        return records
    lookup = _train_means(records, paths, ctx)
    for record in records:
        train_means, flags = lookup(record.step)
        set_learning(record, learning_from_keys({**record.raw, **train_means}, MILES_LEARNING_KEYS), list(flags))
    return records
