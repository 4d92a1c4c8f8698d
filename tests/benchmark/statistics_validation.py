"""Validation of the report's statistics on generated runs (validation_generator.py): the figures the docs quote.

- `steady_state_rates` - share of runs whose detected warm-up is within one step of the truth, that keep a warm-up
  step, and that are called "no steady state"; on clean runs and on drifting ones.
- `interval_rates` - per-cell median coverage, Miles/VERL step-time ratio coverage (per metric and family-wise),
  the width of the family-wise interval over the per-metric one, false "significant" claims on no-difference pairs
  and detection of a real 5% gap, through the report's own code (cut_to_steady_state, summarise, compare_sides).
- The paired PR check (`run.py ab`) has its own validation: paired_check_validation.py.
- Run `python -m tests.benchmark.statistics_validation` for the full table (a few minutes on 2 cores); the tests in
  test_statistics_validation.py run smaller, seeded versions and assert the bounds.

Caveats:
- The generator is this project's own model of a benchmark run (AR(1) steps, a per-run offset, a decaying warm-up);
  the figures hold on it, and real runs can be noisier. Rerun with other settings of `generate_runs` to stress them.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, replace

import numpy as np
from scripts.benchmark.analysis.compare import compare_sides
from scripts.benchmark.analysis.document import cut_to_steady_state, side_samples
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.analysis.stats import summarise
from scripts.benchmark.analysis.steady_state import detect_steady_state
from scripts.benchmark.analysis.step_columns import StepColumns
from tests.benchmark.synthetic_runs import pair_key
from tests.benchmark.validation_generator import PROMPT_TOKENS, GeneratedRuns, generate_runs

from miles.utils.bench_metrics import PHASES, STEP_TIME_FAMILY

METRICS = (
    "step_time_s",
    *(f"phases_s.{p}" for p in PHASES),
    "train_tokens_per_s",
    "rollout_tokens_per_gpu_s",
    "train_tflops_per_gpu",
    "train_mfu",
)


@dataclass(frozen=True, kw_only=True)
class SteadyStateRates:
    runs: int
    steps: int
    drift: float
    within_one: float
    keeps_warmup: float
    not_reached: float
    """Runs whose steady state is not claimed (no steady state, or too noisy to place the warm-up's end)."""
    placed_or_refused: float
    """Runs cut within one step of the truth, or whose claim is refused: what a reader is never misled by."""
    kept_silently: float
    """Runs whose claimed steady state keeps a warm-up step."""


def rates_of(found: list, warmup: np.ndarray, *, steps: int, drift: float = 0.0) -> SteadyStateRates:
    """The rates of `detect_steady_state` results against the true warm-up lengths (any generator)."""
    offset = np.asarray([f.start_index for f in found]) - warmup
    claimed = np.asarray([f.reached for f in found])
    within = np.abs(offset) <= 1
    return SteadyStateRates(
        runs=len(found),
        steps=steps,
        drift=drift,
        within_one=float(np.mean(within)),
        keeps_warmup=float(np.mean(offset < 0)),
        not_reached=float(np.mean(~claimed)),
        placed_or_refused=float(np.mean(within | ~claimed)),
        kept_silently=float(np.mean((offset < 0) & claimed)),
    )


@dataclass(frozen=True, kw_only=True)
class IntervalRates:
    pairs: int
    repeats: int
    steps: int
    median_coverage: float
    """Share of cells whose step-time median interval holds the true level."""
    ratio_coverage: float
    """Share of no-difference pairs whose step-time ratio interval holds 1."""
    family_coverage: float
    """Lowest coverage of 1 among the step-time family's ratios (step time and the four throughputs)."""
    width_family_over_per_metric: float
    """Median width of the default (family-wise) step-time interval over the --per-metric one."""
    false_claims: float
    """Step-time ratio called significant on no-difference pairs (default settings)."""
    family_false_claims: float
    """Any member of the step-time family called significant on no-difference pairs (default settings)."""
    detection_5pct: float
    """A real 5% step-time gap called significant at the default settings."""


def steady_state_rates(
    seed: int,
    runs: int,
    steps: int,
    drift: float = 0.0,
    *,
    checkpoint_every: int | None = None,
    cv: float = 0.02,
    warmup_lengths: tuple[int, int] = (3, 8),
) -> SteadyStateRates:
    """`checkpoint_every`: every that many steps one step is 50% slower (a periodic checkpoint save)."""
    generated = generate_runs(
        np.random.default_rng(seed), runs, steps=steps, drift=drift, cv=cv, warmup_lengths=warmup_lengths
    )
    step_time = generated.step_time.copy()
    if checkpoint_every:
        step_time[:, (np.arange(steps) + 1) % checkpoint_every == 0] *= 1.5
    found = [detect_steady_state(step_time[i]) for i in range(runs)]
    return rates_of(found, generated.warmup, steps=steps, drift=drift)


def repeat_columns(runs: GeneratedRuns, index: int) -> StepColumns:
    """One generated run as the report's columns (the metrics the comparison reads)."""
    phases = {p: runs.phases.get(p, np.full(runs.step_time.shape, np.nan))[index] for p in PHASES}
    response = runs.response_tokens[index]
    tflops = 6 * 1.7e9 * (response + PROMPT_TOKENS) / phases["train"] / 8 / 1e12
    values = {
        "step_time_s": runs.step_time[index],
        **{f"phases_s.{p}": v for p, v in phases.items()},
        "train_tokens_per_s": (response + PROMPT_TOKENS) / phases["train"],
        "rollout_tokens_per_gpu_s": response / phases["generate"] / 8,
        "train_tflops_per_gpu": tflops,
        "train_mfu": tflops / 989.0,
    }
    steps = np.arange(runs.step_time.shape[1])
    return StepColumns(steps=steps, values=values, measured={n: np.isfinite(v) for n, v in values.items()})


def _cell(runs: GeneratedRuns, repeats: int, first: int):
    columns = [repeat_columns(runs, first + r) for r in range(repeats)]
    _, steady, _ = cut_to_steady_state(list(range(repeats)), columns)
    return steady


def _pair(rng, repeats: int, steps: int, gap: float, settings: AnalysisSettings):
    miles = generate_runs(rng, repeats, steps=steps, gap=gap)
    verl = generate_runs(rng, repeats, steps=steps)
    steady_m, steady_v = _cell(miles, repeats, 0), _cell(verl, repeats, 0)
    sides = side_samples(steady_m, METRICS), side_samples(steady_v, METRICS)
    rows, _ = compare_sides(*sides, pair=pair_key(), phases=PHASES, settings=settings)
    per_metric, _ = compare_sides(
        *sides, pair=pair_key(), phases=PHASES, settings=replace(settings, family_wise=False)
    )
    median = summarise([c.values["step_time_s"] for c in steady_v], settings.confidence)
    return {r.metric: r for r in rows}, {r.metric: r for r in per_metric}, median, verl.level


def interval_rates(seed: int, pairs: int, *, repeats: int = 3, steps: int = 24, reps: int = 1000) -> IntervalRates:
    """No-difference pairs (coverage, false claims, widths) and 5%-gap pairs (detection), same seed stream."""
    rng = np.random.default_rng(seed)
    settings = AnalysisSettings(reps=reps)
    medians, covered, claims, family_claims, widths = [], {m: [] for m in STEP_TIME_FAMILY}, [], [], []
    for _ in range(pairs):
        rows, per_metric, median, level = _pair(rng, repeats, steps, 1.0, settings)
        medians.append(_holds(median.ci_low, median.ci_high, level))
        for name in STEP_TIME_FAMILY:
            covered[name].append(_holds(rows[name].ci_low, rows[name].ci_high, 1.0))
        claims.append(rows["step_time_s"].significant)
        family_claims.append(any(rows[m].significant for m in STEP_TIME_FAMILY))
        step, single = rows["step_time_s"], per_metric["step_time_s"]
        if step.ci_low is not None and single.ci_low is not None:
            widths.append((step.ci_high - step.ci_low) / (single.ci_high - single.ci_low))
    detected = [_pair(rng, repeats, steps, 1.05, settings)[0]["step_time_s"].significant for _ in range(pairs)]
    return IntervalRates(
        pairs=pairs,
        repeats=repeats,
        steps=steps,
        median_coverage=float(np.mean(medians)),
        ratio_coverage=float(np.mean(covered["step_time_s"])),
        family_coverage=float(min(np.mean(v) for v in covered.values())),
        width_family_over_per_metric=float(np.median(widths)) if widths else math.nan,
        false_claims=float(np.mean(claims)),
        family_false_claims=float(np.mean(family_claims)),
        detection_5pct=float(np.mean(detected)),
    )


def _holds(low: float | None, high: float | None, truth: float) -> bool:
    return low is not None and high is not None and low <= truth <= high


STEADY_ROWS = (
    # steps, drift, step CV, warm-up lengths, checkpoint every
    (24, 0.0, 0.02, (3, 8), None),
    (23, 0.0, 0.02, (3, 8), None),
    (200, 0.0, 0.02, (3, 8), None),
    (2400, 0.0, 0.02, (3, 8), None),
    (24, 0.2, 0.02, (3, 8), None),
    (48, 0.2, 0.02, (3, 8), None),
    (200, 0.1, 0.02, (3, 8), None),
    (24, 0.0, 0.02, (3, 8), 10),
    (24, 0.0, 0.10, (3, 8), None),
    (200, 0.0, 0.10, (3, 8), None),
    (24, 0.0, 0.05, (12, 12), None),
    (200, 0.0, 0.05, (12, 12), None),
)


def steady_state_table(seed: int, runs: int) -> list[str]:
    """The docs' steady-state table: one row per STEADY_ROWS case, runs // 10 of the 2400-step one."""
    lines = [
        "| steps | drift over the run | step CV | warm-up steps | runs | within 1 step | keeps a warm-up step | "
        "not claimed | within 1 step or not claimed | keeps a warm-up step, claimed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for steps, drift, cv, lengths, checkpoint in STEADY_ROWS:
        n = runs if steps < 1000 else runs // 10
        r = steady_state_rates(seed, n, steps, drift, checkpoint_every=checkpoint, cv=cv, warmup_lengths=lengths)
        label = f"{steps}, +50% every {checkpoint}th step" if checkpoint else str(steps)
        lines.append(
            f"| {label} | {drift:.0%} | {cv:.0%} | {lengths[0]}-{lengths[1]} | {n} | {r.within_one:.1%} | "
            f"{r.keeps_warmup:.2%} | {r.not_reached:.2%} | {r.placed_or_refused:.1%} | {r.kept_silently:.2%} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4000, help="generated runs per steady-state row")
    parser.add_argument("--pairs", type=int, default=1000, help="generated Miles/VERL pairs per interval row")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("\n".join(steady_state_table(args.seed, args.runs)))
    print()
    print(
        "| repeats | steps | pairs | per-cell median coverage | step-time ratio coverage | lowest family coverage | "
        "family / per-metric width | false claims: step time | false claims: family | 5% gap detected |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for repeats, steps in ((3, 24), (5, 24), (1, 24), (3, 100), (1, 100)):
        r = interval_rates(args.seed, args.pairs, repeats=repeats, steps=steps)
        print(
            f"| {repeats} | {steps} | {r.pairs} | {r.median_coverage:.1%} | {r.ratio_coverage:.1%} | "
            f"{r.family_coverage:.1%} | {r.width_family_over_per_metric:.2f} | {r.false_claims:.1%} | "
            f"{r.family_false_claims:.1%} | {r.detection_5pct:.1%} |"
        )


if __name__ == "__main__":
    main()
