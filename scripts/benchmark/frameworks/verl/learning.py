"""VERL's learning signals: the FileLogger `data` dict of the step (`critic/score/mean`, `response_length/*`,
`actor/*`) mapped onto LEARNING_SIGNALS (frameworks/learning_signals.py).

Caveats:
- VERL 0.9.1's `response_length/clip_ratio` counts samples at the longest response of the batch, not at the cap:
  it is the truncation fraction only when `response_length/max` reached the cap (RunContext.max_response_tokens),
  and 0 otherwise.
"""

from __future__ import annotations

from typing import Any

from scripts.benchmark.frameworks.learning_signals import learning_from_keys, set_learning

from miles.utils.bench_metrics import RunContext, StepRecord, finite_or_none

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
LEARNING_KEYS: dict[str, tuple[str, ...]] = {
    **{name: (key,) for name, key in VERL_LEARNING_KEYS.items()},
    "truncation_fraction": (VERL_CLIP_RATIO_KEY, VERL_LENGTH_MAX_KEY),
}
"""Signal -> the native keys it is read from (truncation: the clip ratio read against the longest response)."""


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


def fill_verl_learning(records: list[StepRecord], ctx: RunContext) -> list[StepRecord]:
    """Set `learning` (and its flags) on each record; returns the same records."""
    keys = {name: (key,) for name, key in VERL_LEARNING_KEYS.items()}
    for record in records:
        flags: list[str] = []
        learning = learning_from_keys(record.raw, keys)
        learning["truncation_fraction"] = verl_truncation(record.raw, ctx, flags)
        set_learning(record, learning, flags)
    return records
