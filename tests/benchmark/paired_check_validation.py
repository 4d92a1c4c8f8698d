"""Validation of the paired PR check (history/pair_check.py) on generated launches: the error rates the docs quote.

- `paired_check_rates(...)`: equal builds and a 5% slower head, run as the runner runs a `--sequential` pair (one
  launch a side per round, AB then BA, at most `max_rounds` rounds), each round cut to its steady state by the
  report's own code (`cut_to_steady_state`) and judged by the runner's own rule (`pair_check.next_look`). Rates:
  REGRESSED (false "slower" on equal builds, detection on the slower head), exit 0 on the slower head (a regression
  passed), exit 2 (could not judge) and the mean number of rounds (the cost).
- Generators:
  - `project`: this project's run generator (validation_generator.py: AR(1) 0.5 steps, a 1% offset per launch,
    warm-ups of 3-8 steps);
  - `simulator`: the regression check's simulator (history/simulation.py: AR(1) 0.6 steps, no warm-up, the node's
    offset common to both builds) with its outliers: a repeat 10-40% slower with probability 3%, a step 1.5-3x slower
    with probability 1%;
  - `disturbed`: the project's generator with one of the first six launches 25% slower (a node hiccup).
- Run `python -m tests.benchmark.paired_check_validation` for the docs' table (docs/benchmark/history.md); the tests
  in test_paired_check.py run seeded, smaller versions and assert the bounds.

Caveats:
- The generators are models, not measurements: real launches can be noisier; the rates hold on these.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scripts.benchmark.analysis.document import cut_to_steady_state
from scripts.benchmark.analysis.step_columns import StepColumns
from scripts.benchmark.history.pair_check import Look, next_look, repeat_unit
from scripts.benchmark.history.simulation import SimulationSettings, simulate_steps
from tests.benchmark.validation_generator import generate_runs

GENERATORS = ("project", "simulator", "disturbed")
STEPS = 40
"""Steps per launch: the PR workload's (spec/pr_workload.py)."""
MAX_ROUNDS = 4
"""Rounds (launches a side) the PR workflow's budget holds at the cost model's typical estimate."""
DISTURBANCE = 1.25


def step_columns(step_time: np.ndarray) -> StepColumns:
    """One launch's step times as the report's columns (only step time: all the check reads)."""
    values = {"step_time_s": np.asarray(step_time, dtype=float)}
    return StepColumns(
        steps=np.arange(len(step_time)), values=values, measured={"step_time_s": np.isfinite(values["step_time_s"])}
    )


def side_units(launches: list[np.ndarray]):
    """The repeat units of one side, its launches cut at the cell's steady state as report.json's samples are."""
    columns = [step_columns(x) for x in launches]
    _, steady, _ = cut_to_steady_state(list(range(len(columns))), columns)
    units = [repeat_unit(i, list(c.values["step_time_s"])) for i, c in enumerate(steady)]
    return [u for u in units if u is not None]


def sequential_check(launch: Callable[[str, int], np.ndarray], max_rounds: int) -> tuple[Look, int]:
    """The runner's rounds: AB, BA, ...; after each round a look (pair_check.next_look); stop at the first look that
    decides or at the last round. Returns the deciding look and the rounds run."""
    head: list[np.ndarray] = []
    base: list[np.ndarray] = []
    looks: list[Look] = []
    for number in range(1, max_rounds + 1):
        head.append(launch("head", number - 1))
        base.append(launch("base", number - 1))
        decided = next_look(
            side_units(head), side_units(base), looks, round_number=number, last_round=number == max_rounds
        )
        looks.append(decided)
        if decided.stops:
            return decided, number
    return looks[-1], max_rounds


@dataclass(frozen=True, kw_only=True)
class PairedCheckRates:
    generator: str
    cv: float
    pairs: int
    max_rounds: int
    false_slower: float
    """Equal builds called REGRESSED."""
    equal_could_not: float
    """Equal builds judged "could not judge" (exit 2)."""
    equal_rounds: float
    detection_5pct: float
    """A 5% slower head called REGRESSED."""
    slower_passed: float
    """A 5% slower head given exit 0 (no practical difference, improved or inconclusive)."""
    slower_rounds: float


def pair_launches(generator: str, rng: np.random.Generator, cv: float, gap: float, max_rounds: int):
    """Every launch of one pair up front (head and base, AB order), so that both gaps see comparable draws."""
    if generator == "simulator":
        s = SimulationSettings(trials=1, history=0, repeats=2 * max_rounds, steps=STEPS)
        steps = 100.0 * simulate_steps(rng, s, cv)[0, 0]
        head, base = steps[0::2] * gap, steps[1::2]
    else:
        runs = lambda g: generate_runs(rng, max_rounds, steps=STEPS, cv=cv, gap=g).step_time  # noqa: E731
        head, base = runs(gap), runs(1.0)
        if generator == "disturbed":
            which = int(rng.integers(0, 6))  # one of the first six launches, in running order
            (head if which % 2 == 0 else base)[which // 2] *= DISTURBANCE
    return {"head": head, "base": base}


def paired_check_rates(
    seed: int, pairs: int, *, cv: float, generator: str = "project", max_rounds: int = MAX_ROUNDS
) -> PairedCheckRates:
    """`pairs` equal pairs and `pairs` pairs with a 5% slower head through the runner's sequential rule."""
    if generator not in GENERATORS:
        raise ValueError(f"generator must be one of {GENERATORS}, got {generator!r}")
    rng = np.random.default_rng(seed)

    def run(gap: float) -> list[tuple[Look, int]]:
        out = []
        for _ in range(pairs):
            drawn = pair_launches(generator, rng, cv, gap, max_rounds)
            out.append(sequential_check(lambda side, i, d=drawn: d[side][i], max_rounds))
        return out

    equal, slower = run(1.0), run(1.05)

    def share(results, decisions) -> float:
        return float(np.mean([look.decision in decisions for look, _ in results]))

    return PairedCheckRates(
        generator=generator,
        cv=cv,
        pairs=pairs,
        max_rounds=max_rounds,
        false_slower=share(equal, {"REGRESSED"}),
        equal_could_not=share(equal, {"COULD_NOT_JUDGE"}),
        equal_rounds=float(np.mean([n for _, n in equal])),
        detection_5pct=share(slower, {"REGRESSED"}),
        slower_passed=share(slower, {"NO_DIFFERENCE", "IMPROVED", "INCONCLUSIVE"}),
        slower_rounds=float(np.mean([n for _, n in slower])),
    )


def wilson(rate: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a rate measured on n trials."""
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _cell(rate: float, n: int) -> str:
    low, high = wilson(rate, n)
    return f"{rate:.1%} [{low:.1%}, {high:.1%}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        '| generator | step CV | rounds at most | pairs | false "slower" | 5% slower head caught | 5% slower head '
        "passed (exit 0) | could not judge (equal) | rounds run (equal / slower) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for generator in GENERATORS:
        for max_rounds in (3, 4, 5):
            for cv in (0.02, 0.05):
                r = paired_check_rates(args.seed, args.pairs, cv=cv, generator=generator, max_rounds=max_rounds)
                print(
                    f"| {generator} | {cv:.0%} | {max_rounds} | {r.pairs} | {_cell(r.false_slower, r.pairs)} | "
                    f"{_cell(r.detection_5pct, r.pairs)} | {_cell(r.slower_passed, r.pairs)} | "
                    f"{_cell(r.equal_could_not, r.pairs)} | {r.equal_rounds:.1f} / {r.slower_rounds:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
