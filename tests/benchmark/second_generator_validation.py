"""The report's steady state and learning guard on a second generator (drift_generator.py: runs that drift on their
own, heavy-tailed AR(1) 0.8 noise), through the report's own code: the figures docs/benchmark/analysis.md quotes.

- `steady_state_rows`: per case, the share of series cut within one step of the true warm-up, not claimed, either
  of the two, and claimed while keeping a warm-up step, each with its 95% interval (Wilson).
- `learning_rates`: per planted difference, the share of pairs `signal_row` calls "different" (with repeats a side,
  as `run.py report` judges them) and the repeats a side the guard names for it; A/A: any signal "different".

    python -m tests.benchmark.second_generator_validation --runs 1000 --pairs 100 --seed 0

test_second_generator_validation.py runs seeded, smaller versions and asserts the targets.
"""

from __future__ import annotations

import argparse

import numpy as np
from scripts.benchmark.analysis.steady_state import detect_steady_state
from tests.benchmark import drift_generator
from tests.benchmark.learning_validation import rates, shown, wilson
from tests.benchmark.statistics_validation import SteadyStateRates, rates_of

STEADY_CASES = (
    # steps, step CV, warm-up lengths
    (24, 0.02, (3, 8)),
    (24, 0.10, (3, 8)),
    (200, 0.10, (3, 8)),
    (24, 0.05, (12, 12)),
    (200, 0.05, (12, 12)),
)


def interval(rate: float, n: int) -> str:
    low, high = wilson(rate, n)
    return f"{rate:.1%} ({low:.1%}-{high:.1%})"


def steady_state_rates(seed: int, runs: int, steps: int, cv: float, lengths: tuple[int, int]) -> SteadyStateRates:
    step_time, warmup = drift_generator.step_times(np.random.default_rng(seed), runs, steps, cv=cv, warmup=lengths)
    return rates_of([detect_steady_state(x) for x in step_time], warmup, steps=steps)


def steady_state_rows(seed: int, runs: int) -> list[str]:
    lines = [
        "| steps | step CV | warm-up steps | runs | within 1 step | not claimed | within 1 step or not claimed | "
        "keeps a warm-up step, claimed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for steps, cv, lengths in STEADY_CASES:
        n = runs if steps < 100 else max(60, runs // 4)
        r = steady_state_rates(seed, n, steps, cv, lengths)
        lines.append(
            f"| {steps} | {cv:.0%} | {lengths[0]}-{lengths[1]} | {n} | {interval(r.within_one, n)} | "
            f"{interval(r.not_reached, n)} | {interval(r.placed_or_refused, n)} | {interval(r.kept_silently, n)} |"
        )
    return lines


def drifting_pair(rng: np.random.Generator, steps: int, planted: str | None, repeats: int):
    """learning_validation.rates' generator interface over drift_generator.learning_pair."""
    return drift_generator.learning_pair(rng, steps, repeats, planted)


def learning_rates(seed: int, pairs: int, steps: int) -> dict[str, float]:
    """The guard's rates on drifting pairs (learning_validation.rates: A/A, each plant at 3 repeats a side, the
    repeats a side the guard names from the pooled A/A spread, and the plant at that number)."""
    return rates(pairs, steps, seed, generate=drifting_pair, at_margin=False)


def learning_rows(seed: int, pairs: int, steps: int) -> list[str]:
    """The docs' table rows: each rate with its 95% interval over `pairs` pairs."""
    return [
        f"| {steps} | {name} | {shown(name, rate, pairs)} |"
        for name, rate in learning_rates(seed, pairs, steps).items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="generated series per steady-state case")
    parser.add_argument("--pairs", type=int, default=100, help="generated pairs per learning case")
    parser.add_argument("--steps", type=int, nargs="+", default=[24, 200], help="paired steps of the learning cases")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("\n".join(steady_state_rows(args.seed, args.runs)))
    print(f"\n| steps | rate (3 repeats a side unless named; {args.pairs} pairs a row) | value |\n|---|---|---|")
    for steps in args.steps:
        print("\n".join(learning_rows(args.seed, args.pairs, steps)), flush=True)


if __name__ == "__main__":
    main()
