"""A second generator of benchmark runs, written apart from validation_generator.py and learning_validation.py: runs
that drift on their own, with heavy-tailed, slowly correlated noise.

Step times (`step_times`):
- AR(1) noise with coefficient 0.8 and Student t innovations (4 degrees of freedom: a slow step now and then),
  scaled to a marginal CV `cv`;
- each run its own offset (Student t, 3 degrees of freedom, scale 1.5%) and its own linear drift over the run
  (normal, sd 1% from first to last step);
- a warm-up of `warmup` steps (a length range, drawn per run) whose excess falls convexly, (1 - k / (L - 1))^p
  with p in 1.5-3, from 40-150% slower at its first step to 5-20% slower at its last (a warm-up step anyone could
  call one).

Learning signals (`learning_pair`), for `repeats` runs a side that see the same prompts:
- a level shared by every run that moves with training (a base model's first GRPO steps: solve rate 0.20 rising to
  0.23 by step 24 and 0.45 by step 200, responses 1200 -> 1680 tokens, entropy 0.6 -> 0.45, the others flat) and a
  per-step prompt difficulty shared by every run;
- per run: an offset (Student t, 3 degrees of freedom) and a random walk from step 0 (seeds drift apart from the
  same initial weights), both as a share of the level, plus AR(1) 0.8 noise with Student t innovations;
- math_dapo scores: reward_mean is 2 x solve rate - 1 (-1 or +1 a sample), as both frameworks log it;
- planted differences on the candidate's runs (the guard's sizes, written here from their description, not imported):
  solve rate -10% from a quarter of the run on; entropy falling linearly to -40%; KL 3x; clip fraction 2x; response
  length drifting linearly to +20%.

The rates this generator gives are in docs/benchmark/analysis.md; second_generator_validation.py runs it through
the report's own code.
"""

from __future__ import annotations

import numpy as np

LEVEL_S = 80.0
STEP_PHI = 0.8
SIGNAL_PHI = 0.8
TAIL_DF = 4
"""Student t degrees of freedom of the innovations: heavy tails, finite variance."""

PLANTS = ("reward -10%", "entropy -40% collapse", "KL 3x", "clip fraction 2x", "length +20% drift")
PLANTED_ON = {
    "reward -10%": "reward_mean",
    "entropy -40% collapse": "entropy",
    "KL 3x": "approx_kl",
    "clip fraction 2x": "clip_fraction",
    "length +20% drift": "response_length_mean",
}
SIGNALS = (
    "reward_mean",
    "response_length_mean",
    "truncation_fraction",
    "entropy",
    "clip_fraction",
    "approx_kl",
    "grad_norm",
    "policy_loss",
)
NOISE = {
    # signal: (step noise sd, run offset scale, random-walk sd at step 200), each a share of the level; policy_loss in
    # its own units (its level is near 0).
    "reward_mean": (0.04, 0.015, 0.03),
    "response_length_mean": (0.04, 0.02, 0.04),
    "truncation_fraction": (0.15, 0.05, 0.10),
    "entropy": (0.03, 0.015, 0.03),
    "clip_fraction": (0.10, 0.04, 0.06),
    "approx_kl": (0.15, 0.05, 0.08),
    "grad_norm": (0.10, 0.03, 0.05),
    "policy_loss": (0.015, 0.003, 0.005),
}


def heavy_ar1(rng: np.random.Generator, shape: tuple[int, ...], sd: float, phi: float) -> np.ndarray:
    """AR(1) along the last axis, Student t innovations, marginal sd `sd`."""
    scale = sd * np.sqrt(1 - phi**2) / np.sqrt(TAIL_DF / (TAIL_DF - 2))
    shocks = rng.standard_t(TAIL_DF, shape) * scale
    out = np.empty(shape)
    out[..., 0] = shocks[..., 0] / np.sqrt(1 - phi**2)
    for k in range(1, shape[-1]):
        out[..., k] = phi * out[..., k - 1] + shocks[..., k]
    return out


def step_times(
    rng: np.random.Generator, runs: int, steps: int, *, cv: float, warmup: tuple[int, int] = (3, 8)
) -> tuple[np.ndarray, np.ndarray]:
    """((runs, steps) step times in seconds, (runs,) true warm-up lengths)."""
    lengths = rng.integers(warmup[0], warmup[1] + 1, runs)
    first, last = rng.uniform(0.4, 1.5, runs), rng.uniform(0.05, 0.2, runs)
    power = rng.uniform(1.5, 3.0, runs)
    k = np.arange(steps)[None, :]
    share = np.clip((lengths[:, None] - 1 - k) / np.maximum(lengths[:, None] - 1, 1), 0.0, 1.0)
    excess = np.where(k < lengths[:, None], last[:, None] + (first - last)[:, None] * share ** power[:, None], 0.0)
    offset = 0.015 * rng.standard_t(3, runs)[:, None]
    drift = rng.normal(0.0, 0.01, runs)[:, None] * k / max(steps - 1, 1)
    noise = heavy_ar1(rng, (runs, steps), cv, STEP_PHI)
    return LEVEL_S * (1 + offset) * (1 + drift) * (1 + excess) * np.exp(noise), lengths


def shared_levels(rng: np.random.Generator, steps: int) -> dict[str, np.ndarray]:
    """Every signal's level, the same for all runs of both sides (training trend x prompt difficulty)."""
    progress = np.arange(steps) / 199.0
    difficulty = rng.normal(0.0, 0.04, steps)
    solve = np.clip(0.2 + 0.25 * np.minimum(progress, 1.0) * (1 + difficulty), 0.01, 0.99)
    return {
        "reward_mean": solve,
        "response_length_mean": 1200 * (1 + 0.4 * np.minimum(progress, 1.0)) * (1 + difficulty / 2),
        "truncation_fraction": 0.03 * (1 + progress) * (1 + difficulty),
        "entropy": 0.6 * (1 - 0.25 * np.minimum(progress, 1.0)),
        "clip_fraction": np.full(steps, 0.004),
        "approx_kl": np.full(steps, 6e-4),
        "grad_norm": np.full(steps, 0.2),
        "policy_loss": 0.04 + 0.02 * difficulty,
    }


def _plant(name: str, planted: str | None, steps: int) -> np.ndarray:
    """The candidate's factor on `name` per step (ones when the plant is elsewhere)."""
    k = np.arange(steps)
    progress = k / max(steps - 1, 1)
    if planted is None or PLANTED_ON[planted] != name:
        return np.ones(steps)
    return {
        "reward -10%": np.where(k >= steps // 4, 0.9, 1.0),
        "entropy -40% collapse": 1 - 0.4 * progress,
        "KL 3x": np.full(steps, 3.0),
        "clip fraction 2x": np.full(steps, 2.0),
        "length +20% drift": 1 + 0.2 * progress,
    }[planted]


def _runs(rng: np.random.Generator, name: str, level: np.ndarray, repeats: int, factor: np.ndarray) -> np.ndarray:
    """(repeats, steps) of one side: the level with each run's offset, walk and AR noise."""
    steps = len(level)
    step_sd, offset_scale, walk_sd = NOISE[name]
    offset = offset_scale * rng.standard_t(3, (repeats, 1))
    walk = np.cumsum(rng.normal(0.0, walk_sd / np.sqrt(200), (repeats, steps)), axis=1)
    noise = heavy_ar1(rng, (repeats, steps), step_sd, SIGNAL_PHI)
    if name == "policy_loss":
        return level * factor + offset + walk + noise
    value = level * factor * np.exp(offset + walk + noise)
    return 2 * np.clip(value, 0.0, 1.0) - 1 if name == "reward_mean" else value


def learning_pair(
    rng: np.random.Generator, steps: int, repeats: int, planted: str | None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Signal -> (candidate runs, reference runs), each (repeats, steps), steps numbered from 1."""
    levels = shared_levels(rng, steps)
    return {
        name: (
            _runs(rng, name, levels[name], repeats, _plant(name, planted, steps)),
            _runs(rng, name, levels[name], repeats, np.ones(steps)),
        )
        for name in SIGNALS
    }
