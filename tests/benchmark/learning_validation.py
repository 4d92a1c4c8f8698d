"""Validation of the learning guard on generated pairs: the figures docs/benchmark/analysis.md quotes.

Noise model (one pair = two runs of `steps` steps, both seeing the same prompts):
- Each signal has a level shared by both sides that moves with training (reward rises 0.35 -> 0.55, entropy falls
  by a third, length grows 15%, the others flat) and a per-step prompt difficulty shared by both sides.
- Each side adds its own AR(1) noise (coefficient `PHI`, a policy drifts slowly): absolute for reward (sd 0.02) and
  truncation (sd 0.005) and the policy loss (sd 0.01); multiplicative for the others (sd `RELATIVE_SD`, per signal).
- Planted differences on the candidate only: reward -10% from a quarter of the window on; entropy collapsing
  linearly to -40%; KL 3x; clip fraction 2x; length drifting linearly to +20%; and a constant gap equal to each
  signal's margin.
Rates (through analysis/learning.py's own test, at the default margins and alpha, entropy judged on its drift as
under the default token-mean spec):
- A/A: the share of pairs with any signal called "different" (target <= 5%).
- Detection: per planted difference, the share of pairs whose signal is called "different" (target >= 90% at 200).
- At a gap equal to the margin: the share called "same" (target <= 5%).
Run `python -m tests.benchmark.learning_validation --pairs 1000` for the docs' table; test_learning_validation.py
runs a smaller, seeded version and asserts the targets.

framework_writers_validation.py runs the same pairs through Miles's and VERL's own loggers and the readers.

Caveats: this is the project's own noise model; real runs can drift more slowly (longer autocorrelation), which
the fitted AR(1) coefficient widens the intervals for; at 24 steps the coefficient is poorly estimated and slower
drift than this model's makes the intervals too narrow (analysis.md gives the figures).
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scripts.benchmark.analysis.learning import LEVEL_NOT_COMPARABLE, equivalence_test
from scripts.benchmark.contracts.report import DIFFERENT, SAME

from miles.utils.bench_metrics import LEARNING_SIGNALS

PHI = 0.5
ABSOLUTE_SD = {"reward_mean": 0.02, "truncation_fraction": 0.005, "policy_loss": 0.01}
RELATIVE_SD = {
    "response_length_mean": 0.03,
    "entropy": 0.03,
    "clip_fraction": 0.08,
    "approx_kl": 0.10,
    "grad_norm": 0.08,
}
LEVELS = {
    "reward_mean": 0.35,
    "response_length_mean": 1500.0,
    "truncation_fraction": 0.03,
    "entropy": 0.5,
    "clip_fraction": 0.002,
    "approx_kl": 0.0005,
    "grad_norm": 0.3,
    "policy_loss": 0.0,
}
PLANTED = ("reward -10%", "entropy -40% collapse", "KL 3x", "clip fraction 2x", "length +20% drift")
PLANTED_SIGNAL = {
    "reward -10%": "reward_mean",
    "entropy -40% collapse": "entropy",
    "KL 3x": "approx_kl",
    "clip fraction 2x": "clip_fraction",
    "length +20% drift": "response_length_mean",
}


def _ar1(rng: np.random.Generator, steps: int, sd: float) -> np.ndarray:
    """AR(1) noise of stationary sd `sd`."""
    shocks = rng.normal(0.0, sd * math.sqrt(1 - PHI**2), steps)
    out = np.empty(steps)
    out[0] = rng.normal(0.0, sd)
    for i in range(1, steps):
        out[i] = PHI * out[i - 1] + shocks[i]
    return out


def shared_level(name: str, steps: int, rng: np.random.Generator) -> np.ndarray:
    """Both sides' level: the training trend times (or plus) the prompts' difficulty."""
    progress = np.arange(steps) / max(1, steps - 1)
    base = LEVELS[name]
    if name == "reward_mean":
        return base + 0.2 * progress + rng.normal(0, 0.03, steps)
    trend = {"entropy": 1 - progress / 3, "response_length_mean": 1 + 0.15 * progress}.get(name, np.ones(steps))
    if name in ABSOLUTE_SD:
        return base * trend + rng.normal(0, ABSOLUTE_SD[name] / 2, steps)
    return base * trend * np.exp(rng.normal(0, RELATIVE_SD[name] / 2, steps))


def side(name: str, level: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    if name in ABSOLUTE_SD:
        return level + _ar1(rng, len(level), ABSOLUTE_SD[name])
    return level * np.exp(_ar1(rng, len(level), RELATIVE_SD[name]))


def plant(name: str, candidate: np.ndarray, planted: str | None) -> np.ndarray:
    """The candidate with a planted difference on `name` (none when the plant is on another signal)."""
    steps = len(candidate)
    progress = np.arange(steps) / max(1, steps - 1)
    spec = LEARNING_SIGNALS[name]
    if planted == "at margin":
        margin = spec.margin
        return candidate + margin if spec.margin_kind == "absolute" else candidate * (1 + margin)
    if planted is None or PLANTED_SIGNAL.get(planted) != name:
        return candidate
    factor = {
        "reward -10%": np.where(np.arange(steps) >= steps // 4, 0.9, 1.0),
        "entropy -40% collapse": 1 - 0.4 * progress,
        "KL 3x": np.full(steps, 3.0),
        "clip fraction 2x": np.full(steps, 2.0),
        "length +20% drift": 1 + 0.2 * progress,
    }[planted]
    return candidate * factor


def judge_pair(rng: np.random.Generator, steps: int, planted: str | None) -> dict[str, str]:
    """Per signal, the guard's verdict on one generated pair."""
    family = len(LEARNING_SIGNALS)
    verdicts = {}
    for name, spec in LEARNING_SIGNALS.items():
        level = shared_level(name, steps, rng)
        reference, candidate = side(name, level, rng), plant(name, side(name, level, rng), planted)
        if spec.margin_kind == "relative":
            d, bound = np.log(candidate / reference), math.log1p(spec.margin)
        else:
            d, bound = candidate - reference, spec.margin
        result = equivalence_test(
            d, bound, alpha=0.05, family=family, steps=np.arange(steps), drift_only=name in LEVEL_NOT_COMPARABLE
        )
        verdicts[name] = result["verdict"]
    return verdicts


def rates(pairs: int, steps: int, seed: int) -> dict[str, float]:
    """The validation's rates (module docstring) over `pairs` generated pairs of `steps` steps each."""
    rng = np.random.default_rng(seed)
    aa = [judge_pair(rng, steps, None) for _ in range(pairs)]
    out = {"A/A any different": float(np.mean([DIFFERENT in v.values() for v in aa]))}
    for planted in PLANTED:
        calls = [judge_pair(rng, steps, planted)[PLANTED_SIGNAL[planted]] for _ in range(pairs)]
        out[f"{planted}: different"] = float(np.mean([c == DIFFERENT for c in calls]))
    at_margin = [judge_pair(rng, steps, "at margin") for _ in range(pairs)]
    for name in LEARNING_SIGNALS:
        if name not in LEVEL_NOT_COMPARABLE:
            out[f"{name} gap = margin: same"] = float(np.mean([v[name] == SAME for v in at_margin]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--steps", type=int, nargs="+", default=[24, 200])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for steps in args.steps:
        print(f"\n{steps} steps, {args.pairs} pairs")
        for name, rate in rates(args.pairs, steps, args.seed).items():
            print(f"| {name} | {rate:.1%} |")


if __name__ == "__main__":
    main()
