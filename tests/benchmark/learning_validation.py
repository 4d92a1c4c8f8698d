"""Validation of the learning guard on generated pairs: the figures docs/benchmark/analysis.md quotes.

Noise model (one pair = `repeats` runs a side of `steps` steps, every run seeing the same prompts):
- Each signal has a level shared by every run that moves with training (solve rate 0.35 -> 0.55, scored as math_dapo
  does, -1 or +1 a sample, so reward_mean = 2 x solve rate - 1; entropy falls by a third; length grows 15%; the
  others flat) and a per-step prompt difficulty shared by every run.
- Each run adds its own AR(1) noise (coefficient `PHI`, a policy drifts slowly): absolute for the solve rate (sd 0.02),
  truncation (sd 0.005) and the policy loss (sd 0.01); multiplicative for the others (sd `RELATIVE_SD`). No run has
  an offset of its own: drift_generator.py is the generator whose runs drift apart.
- Planted differences on the candidate's runs: each signal's `planted` in bench_metrics.LEARNING_SIGNALS (a 10% lower
  solve rate from a quarter of the window on; entropy collapsing linearly to -40%; KL 3x; clip fraction 2x; length
  drifting linearly to +20%), and a constant gap equal to each signal's margin (on its level).
Rates (through analysis/learning.py's `signal_row` with each side's repeats, as `run.py report` judges a pair, at the
default margins and alpha, entropy judged on its drift as under the default token-mean spec):
- A/A: the share of pairs with any signal called "different" (target <= 5%).
- Detection: per planted difference, the share of pairs whose signal is called "different" at 3 repeats a side;
  the repeats a side the guard names for it (`guard_repeats`: from the spread between the repeats of every pair,
  as the history gives it); and the detection at that number of repeats when it is more than 3 (target: >= 90% at
  3, or at the number named).
- At a gap equal to the margin: the share called "same" (target <= 5%).
Run `python -m tests.benchmark.learning_validation --pairs 200` for the docs' table; test_learning_validation.py
runs a smaller, seeded version and asserts the targets.

framework_writers_validation.py runs the same pairs through Miles's and VERL's own loggers and the readers.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np
from scripts.benchmark.analysis.learning import LEVEL_NOT_COMPARABLE, signal_row
from scripts.benchmark.analysis.learning_power import history_spreads, power_statement
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
PLANTED_SIGNAL = {
    "reward -10%": "reward_mean",
    "entropy -40% collapse": "entropy",
    "KL 3x": "approx_kl",
    "clip fraction 2x": "clip_fraction",
    "length +20% drift": "response_length_mean",
}
PLANTED = tuple(PLANTED_SIGNAL)
REPEATS = 3
"""Repeats a side: what a comparing plan runs by default."""
Pair = dict[str, tuple[np.ndarray, np.ndarray]]


def _ar1(rng: np.random.Generator, shape: tuple[int, int], sd: float) -> np.ndarray:
    """AR(1) noise of stationary sd `sd` along the last axis."""
    out = np.empty(shape)
    out[:, 0] = rng.normal(0.0, sd, shape[0])
    shocks = rng.normal(0.0, sd * math.sqrt(1 - PHI**2), shape)
    for i in range(1, shape[1]):
        out[:, i] = PHI * out[:, i - 1] + shocks[:, i]
    return out


def shared_level(name: str, steps: int, rng: np.random.Generator) -> np.ndarray:
    """Every run's level (the solve rate for reward_mean): the training trend times (or plus) the prompts'
    difficulty."""
    progress = np.arange(steps) / max(1, steps - 1)
    base = LEVELS[name]
    if name == "reward_mean":
        return base + 0.2 * progress + rng.normal(0, 0.03, steps)
    trend = {"entropy": 1 - progress / 3, "response_length_mean": 1 + 0.15 * progress}.get(name, np.ones(steps))
    if name in ABSOLUTE_SD:
        return base * trend + rng.normal(0, ABSOLUTE_SD[name] / 2, steps)
    return base * trend * np.exp(rng.normal(0, RELATIVE_SD[name] / 2, steps))


def runs(name: str, level: np.ndarray, rng: np.random.Generator, count: int = 1) -> np.ndarray:
    """(count, steps) runs around the level, each with its own AR(1) noise (solve rates for reward_mean)."""
    if name in ABSOLUTE_SD:
        return level + _ar1(rng, (count, len(level)), ABSOLUTE_SD[name])
    return level * np.exp(_ar1(rng, (count, len(level)), RELATIVE_SD[name]))


def plant(name: str, candidate: np.ndarray, planted: str | None) -> np.ndarray:
    """The candidate's runs with a planted difference on `name` (none when the plant is on another signal), on the
    level the signal's margin is a share of (the solve rate for reward_mean)."""
    spec = LEARNING_SIGNALS[name]
    if planted == "at margin":
        if spec.margin_kind == "absolute":
            return candidate + spec.margin
        return (candidate - spec.level_from) * (1 + spec.margin) + spec.level_from
    if planted is None or PLANTED_SIGNAL.get(planted) != name:
        return candidate
    return candidate * np.asarray(spec.planted.factors(candidate.shape[-1]))


def as_logged(name: str, values: np.ndarray) -> np.ndarray:
    """What the frameworks log: math_dapo's mean score for a solve rate."""
    return 2 * values - 1 if name == "reward_mean" else values


def generate_pair(rng: np.random.Generator, steps: int, planted: str | None, repeats: int = REPEATS) -> Pair:
    """Signal -> (candidate runs, reference runs), each (repeats, steps), as the frameworks log them."""
    out = {}
    for name in LEARNING_SIGNALS:
        level = shared_level(name, steps, rng)
        reference = runs(name, level, rng, repeats)
        if name == "reward_mean":
            candidate = plant(name, runs(name, level, rng, repeats), planted if planted != "at margin" else None)
            candidate, reference = as_logged(name, candidate), as_logged(name, reference)
            candidate = plant(name, candidate, "at margin") if planted == "at margin" else candidate
        else:
            candidate = plant(name, runs(name, level, rng, repeats), planted)
        out[name] = (candidate, reference)
    return out


def judge(pair: Pair) -> dict[str, dict]:
    """Per signal, the report's row for the pair (`signal_row` with each side's repeats; steps numbered from 1)."""
    rows = {}
    for name, (candidate, reference) in pair.items():
        steps = range(1, candidate.shape[1] + 1)
        sides = [[dict(zip(steps, run.tolist(), strict=True)) for run in side] for side in (candidate, reference)]
        means = [dict(zip(steps, side.mean(axis=0).tolist(), strict=True)) for side in (candidate, reference)]
        rows[name] = signal_row(name, *means, None, family=len(LEARNING_SIGNALS), repeats=(sides[0], sides[1]))
    return rows


def guard_repeats(pairs: list[Pair], steps: int) -> dict[str, int | None]:
    """Per planted signal, the repeats a side the guard names from the spread between the pairs' repeats pooled
    (what `check` and a learning run's plan read from the history: each run's per-repeat window means)."""
    family = len(LEARNING_SIGNALS)
    out = {}
    for name in PLANTED_SIGNAL.values():
        window_means = [list(side.mean(axis=1)) for pair in pairs for side in pair[name]]
        spreads = history_spreads(name, window_means)
        statement = power_statement(
            name,
            steps,
            LEARNING_SIGNALS[name].margin,
            spreads,
            alpha=0.05,
            family=family,
            repeats=REPEATS,
            drift_only=name in LEVEL_NOT_COMPARABLE,
        )
        out[name] = statement["repeats_needed"]
    return out


def rates(
    pairs: int, steps: int, seed: int, generate: Callable = generate_pair, at_margin: bool = True
) -> dict[str, float]:
    """The validation's rates (module docstring) over `pairs` generated pairs of `steps` steps each; `generate`:
    (rng, steps, planted, repeats) -> Pair; `at_margin`: the generator plants a gap equal to each margin too. The
    repeats a side named come from the spread between the repeats of every pair generated at 3 (a history)."""
    rng = np.random.default_rng(seed)
    generated = {
        planted: [generate(rng, steps, planted, REPEATS) for _ in range(pairs)] for planted in (None, *PLANTED)
    }
    calls = {planted: [judge(pair) for pair in made] for planted, made in generated.items()}
    different = [any(r["verdict"] == DIFFERENT for r in v.values()) for v in calls[None]]
    out: dict[str, float] = {"A/A any different": float(np.mean(different))}
    needed = guard_repeats([pair for made in generated.values() for pair in made], steps)
    for planted, name in PLANTED_SIGNAL.items():
        out[f"{planted}: different"] = float(np.mean([v[name]["verdict"] == DIFFERENT for v in calls[planted]]))
        count = needed[name]
        out[f"{planted}: repeats a side named"] = float(count) if count else math.inf
        if count and count > REPEATS:
            at = [judge(generate(rng, steps, planted, count))[name]["verdict"] for _ in range(pairs)]
            out[f"{planted}: different at the repeats named"] = float(np.mean([c == DIFFERENT for c in at]))
    margin_pairs = [judge(generate(rng, steps, "at margin", REPEATS)) for _ in range(pairs if at_margin else 0)]
    for name in LEARNING_SIGNALS:
        if margin_pairs and name not in LEVEL_NOT_COMPARABLE:
            out[f"{name} gap = margin: same"] = float(np.mean([v[name]["verdict"] == SAME for v in margin_pairs]))
    return out


def wilson(rate: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a share `rate` of `n`."""
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def shown(name: str, rate: float, n: int) -> str:
    """A rate with its 95% interval; a number of repeats as it is ("> 64" past the largest)."""
    if name.endswith("repeats a side named"):
        return f"{rate:g}" if math.isfinite(rate) else "> 64"
    low, high = wilson(rate, n)
    return f"{rate:.1%} ({low:.1%}-{high:.1%})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--steps", type=int, nargs="+", default=[24, 200])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"| steps | rate ({REPEATS} repeats a side unless named; {args.pairs} pairs a row) | value |\n|---|---|---|")
    for steps in args.steps:
        for name, rate in rates(args.pairs, steps, args.seed).items():
            print(f"| {steps} | {name} | {shown(name, rate, args.pairs)} |", flush=True)


if __name__ == "__main__":
    main()
