# doc-dev: docs/benchmark.md
"""Miles vs VERL for one backend and layout: ratios with block-bootstrap CIs, and the step-time gap by phase.

- Input per framework: `SideSamples`, one matrix per repeat (steady-state steps x metrics, NaN where missing).
- `compare_sides` returns one `MetricComparison` per metric (ratio Miles/VERL of means, harmonic means for rates,
  as Hoefler & Belli's rule 3 asks) and one `PhaseAttribution` per phase (seconds of the step-time gap it explains).
- Uncertainty: a bootstrap that keeps the autocorrelation of steps. Within a run, arch's CircularBlockBootstrap
  resamples blocks of steps (block length: arch's `optimal_block_length`, Politis & White 2004, at least sqrt(n))
  and every metric of a step moves together. With several repeats the repeats are resampled too (two-level
  bootstrap), so run-to-run variance enters the interval. The spread is widened by `small_sample_factor` (few
  blocks behave like a small sample). Percentile CI; two-sided bootstrap p-value.
- Family-wise: by default the intervals of one pair are Bonferroni-adjusted over the metrics compared (each at
  1 - 0.05/k), so that the whole table has a 5% chance of one false "significant"; significant = CI excludes 1
  (for a gap: excludes 0).
- `refusal_reason(...)` says why two cells must not be compared (unexplained parity rows, different hardware).

Caveats:
- A metric with no finite value on either side gives a comparison of nulls with the reason in `method`.
- The attribution is additive in means, not in medians: phase gaps plus the unattributed rest equal the step gap.
- Bonferroni is conservative for metrics as correlated as step time, tokens/s and MFU; a change just past the
  unadjusted 95% level can show as not significant. The p-value column is unadjusted.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RATE_METRICS = frozenset({"train_tflops_per_gpu", "train_mfu", "train_tokens_per_s", "rollout_tokens_per_gpu_s"})
"""Rates are averaged harmonically (the rate of the total work over the total time), costs arithmetically."""

DEFAULT_REPS = 4000
"""Enough for the tails of a Bonferroni-adjusted 95% interval over ~15 metrics (0.17% each side: ~7 resamples)."""
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True, kw_only=True)
class SideSamples:
    metrics: tuple[str, ...]
    repeats: tuple[np.ndarray, ...]
    """One (steps x metrics) float matrix per repeat, steady-state steps only, NaN where a value is missing."""
    reference_metric: str = "step_time_s"
    """The series whose autocorrelation sets the block length."""


@dataclass(frozen=True, kw_only=True)
class MetricComparison:
    metric: str
    miles: float | None
    verl: float | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    significant: bool
    method: str


@dataclass(frozen=True, kw_only=True)
class PhaseAttribution:
    component: str
    """A phase metric (phases_s.<name>), "unattributed" (step gap minus the phases) or "step_time_s" (the gap)."""
    miles_s: float | None
    verl_s: float | None
    gap_s: float | None
    ci_low: float | None
    ci_high: float | None
    share_of_gap: float | None
    note: str


def block_length(series: np.ndarray) -> int:
    """Circular-bootstrap block length: arch's optimal_block_length, at least sqrt(n), at most n/3.

    The sqrt(n) floor keeps short autocorrelated series from being cut into blocks shorter than their memory (the
    plug-in estimate is noisy below ~100 steps and errs short)."""
    from arch.bootstrap import optimal_block_length

    finite = series[np.isfinite(series)]
    n = len(finite)
    if n < 4:
        return 1
    length = math.sqrt(n)
    if n >= 8 and np.ptp(finite) > 0:
        optimal = float(optimal_block_length(finite)["circular"].iloc[0])
        length = max(length, optimal) if math.isfinite(optimal) else length
    return int(min(max(1, math.ceil(length)), max(1, n // 3)))


def small_sample_factor(num_blocks: float, num_repeats: int, confidence: float) -> float:
    """Widening of the bootstrap spread for few independent units (t quantile over normal, and R/(R-1) for repeats).

    A block bootstrap over k blocks behaves like a sample of k; its percentile interval uses normal quantiles and is
    too narrow for small k (measured on simulated AR(1) runs of 40 steps: 78% coverage at 95%, 93% with this)."""
    from scipy import stats as scipy_stats

    q = 0.5 + confidence / 2
    factor = float(scipy_stats.t.ppf(q, max(1.0, num_blocks - 1)) / scipy_stats.norm.ppf(q))
    # The resampling variance of a mean over k blocks divides by k, the unbiased estimate by k - 1.
    factor *= math.sqrt(num_blocks / max(1.0, num_blocks - 1))
    if num_repeats > 1:
        factor *= math.sqrt(num_repeats / (num_repeats - 1))
    return factor


def _column_stats(matrix: np.ndarray, harmonic: np.ndarray) -> np.ndarray:
    """Per-column mean of a (steps x metrics) matrix, harmonic for the `harmonic` columns; NaN when empty."""
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        arithmetic = np.nanmean(matrix, axis=0)
        harmonic_means = 1.0 / np.nanmean(1.0 / matrix, axis=0)
    return np.where(harmonic, harmonic_means, arithmetic)


def _side_statistic(matrices: Sequence[np.ndarray], harmonic: np.ndarray) -> np.ndarray:
    """Statistic of a side = mean over its repeats of each repeat's (harmonic) mean; repeats weigh equally."""
    if not any(len(m) for m in matrices):
        return np.full(len(harmonic), np.nan)
    per_repeat = np.vstack([_column_stats(m, harmonic) for m in matrices if len(m)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(per_repeat, axis=0)


def _bootstrap_side(
    side: SideSamples, harmonic: np.ndarray, reps: int, rng: np.random.Generator
) -> tuple[np.ndarray, float, int]:
    """(reps x metrics) bootstrap distribution of one side's statistic, its number of blocks and of repeats."""
    from arch.bootstrap import CircularBlockBootstrap

    ref = side.metrics.index(side.reference_metric) if side.reference_metric in side.metrics else 0
    matrices = [m for m in side.repeats if len(m)]
    if not matrices:
        return np.full((reps, len(side.metrics)), np.nan), 1.0, 0
    num_repeats = len(matrices)
    draws = reps * num_repeats if num_repeats > 1 else reps
    generators, num_blocks = [], 0.0
    for matrix in matrices:
        length = block_length(matrix[:, ref])
        num_blocks += len(matrix) / length
        generators.append(CircularBlockBootstrap(length, np.arange(len(matrix)), seed=rng).bootstrap(draws))
    out = np.empty((reps, len(side.metrics)))
    for b in range(reps):
        chosen = rng.integers(0, num_repeats, size=num_repeats) if num_repeats > 1 else [0]
        resampled = [matrices[r][next(generators[r])[0][0]] for r in chosen]
        out[b] = _side_statistic(resampled, harmonic)
    return out, num_blocks, num_repeats


def _percentile_ci(values: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    finite = values[np.isfinite(values)]
    if len(finite) < 2 / (1 - confidence):  # fewer resamples than it takes to put one in each tail
        return None, None
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


def _p_value(values: np.ndarray, null: float) -> float | None:
    finite = values[np.isfinite(values)]
    if len(finite) < 10:
        return None
    return float(min(1.0, 2 * min(np.mean(finite <= null), np.mean(finite >= null))))


def _metric_comparison(
    name: str,
    m: float,
    v: float,
    boot: np.ndarray,
    *,
    harmonic: bool,
    confidence: float,
    level: float,
    num_compared: int,
    reps: int,
    widen: float,
    num_blocks: float,
) -> MetricComparison:
    average = "harmonic means" if harmonic else "means"
    if not math.isfinite(m) or not math.isfinite(v):
        missing = " and ".join(s for s, x in (("miles", m), ("verl", v)) if not math.isfinite(x))
        return MetricComparison(
            metric=name,
            miles=m if math.isfinite(m) else None,
            verl=v if math.isfinite(v) else None,
            ratio=None,
            ci_low=None,
            ci_high=None,
            p_value=None,
            significant=False,
            method=f"not compared: not reported by {missing}",
        )
    if v == 0:
        return MetricComparison(
            metric=name,
            miles=m,
            verl=v,
            ratio=None,
            ci_low=None,
            ci_high=None,
            p_value=None,
            significant=False,
            method="not compared: the VERL value is 0",
        )
    low, high = _percentile_ci(boot, level)
    significant = low is not None and (low > 1 or high < 1)
    interval = f"{confidence:.0%} percentile CI"
    if level != confidence:
        interval = (
            f"{confidence:.0%} family-wise percentile CI (Bonferroni over {num_compared} metrics: {level:.2%} each)"
        )
    return MetricComparison(
        metric=name,
        miles=m,
        verl=v,
        ratio=m / v,
        ci_low=low,
        ci_high=high,
        p_value=_p_value(boot, 1.0),
        significant=bool(significant),
        method=(
            f"ratio of {average}; {interval}, circular block bootstrap ({reps} resamples), "
            f"spread widened x{widen:.2f} for {num_blocks:.0f} blocks"
        ),
    )


def compare_sides(
    miles: SideSamples,
    verl: SideSamples,
    *,
    phases: Sequence[str],
    reps: int = DEFAULT_REPS,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    family_wise: bool = True,
) -> tuple[list[MetricComparison], list[PhaseAttribution]]:
    """All metric ratios and the phase attribution of the step-time gap for one Miles/VERL pair."""
    if miles.metrics != verl.metrics:
        raise ValueError(f"metric columns differ: miles {miles.metrics} vs verl {verl.metrics}")
    metrics = miles.metrics
    harmonic = np.asarray([m in RATE_METRICS for m in metrics])
    rng = np.random.default_rng(seed)
    point_m = _side_statistic(miles.repeats, harmonic)
    point_v = _side_statistic(verl.repeats, harmonic)
    boot_m, blocks_m, repeats_m = _bootstrap_side(miles, harmonic, reps, rng)
    boot_v, blocks_v, repeats_v = _bootstrap_side(verl, harmonic, reps, rng)
    num_compared = int(np.sum(np.isfinite(point_m) & np.isfinite(point_v) & (point_v != 0)))
    # Bonferroni over the metrics of this pair: a table of ~15 ratios at 95% each would flag one by chance.
    level = 1 - (1 - confidence) / max(1, num_compared) if family_wise else confidence
    widen = small_sample_factor(min(blocks_m, blocks_v), min(repeats_m, repeats_v), level)
    boot_m = point_m + widen * (boot_m - point_m)
    boot_v = point_v + widen * (boot_v - point_v)
    with np.errstate(divide="ignore", invalid="ignore"):
        boot_ratio = boot_m / boot_v
    comparisons = [
        _metric_comparison(
            name,
            point_m[i],
            point_v[i],
            boot_ratio[:, i],
            harmonic=bool(harmonic[i]),
            confidence=confidence,
            level=level,
            num_compared=num_compared,
            reps=reps,
            widen=widen,
            num_blocks=min(blocks_m, blocks_v),
        )
        for i, name in enumerate(metrics)
    ]
    attribution = _attribution(metrics, phases, point_m, point_v, boot_m - boot_v, level)
    return comparisons, attribution


def _attribution(
    metrics: Sequence[str],
    phases: Sequence[str],
    point_m: np.ndarray,
    point_v: np.ndarray,
    boot_gap: np.ndarray,
    confidence: float,
) -> list[PhaseAttribution]:
    """Seconds of the mean step-time gap (Miles - VERL) carried by each phase, plus what no phase explains."""
    step = metrics.index("step_time_s")
    step_gap = point_m[step] - point_v[step]

    def row(component: str, m: float, v: float, gap: float, boot: np.ndarray, note: str) -> PhaseAttribution:
        known = math.isfinite(gap)
        low, high = _percentile_ci(boot, confidence) if known else (None, None)
        share = gap / step_gap if known and math.isfinite(step_gap) and step_gap != 0 else None
        return PhaseAttribution(
            component=component,
            miles_s=m if math.isfinite(m) else None,
            verl_s=v if math.isfinite(v) else None,
            gap_s=gap if known else None,
            ci_low=low,
            ci_high=high,
            share_of_gap=share,
            note=note,
        )

    rows = [row("step_time_s", point_m[step], point_v[step], step_gap, boot_gap[:, step], "the gap to explain")]
    explained = np.zeros(len(boot_gap))
    explained_point = 0.0
    for phase in phases:
        i = metrics.index(f"phases_s.{phase}")
        m, v = point_m[i], point_v[i]
        if math.isfinite(m) and math.isfinite(v):
            explained_point += m - v
            explained = explained + np.nan_to_num(boot_gap[:, i])
            rows.append(row(f"phases_s.{phase}", m, v, m - v, boot_gap[:, i], ""))
        else:
            missing = " and ".join(s for s, x in (("miles", m), ("verl", v)) if not math.isfinite(x))
            note = f"not reported by {missing}; its time falls in 'unattributed'"
            rows.append(row(f"phases_s.{phase}", m, v, math.nan, boot_gap[:, i], note))
    rows.append(
        row(
            "unattributed",
            math.nan,
            math.nan,
            step_gap - explained_point,
            boot_gap[:, step] - explained,
            "step gap minus the phases reported by both frameworks (overlap, unreported phases, scheduling)",
        )
    )
    return rows


def refusal_reason(
    *, unexplained_parity: Sequence[str], miles_hardware: str | None, verl_hardware: str | None
) -> str | None:
    """Why a Miles/VERL pair must not be compared, or None when it may be."""
    if unexplained_parity:
        return "parity table has unexplained differences: " + "; ".join(unexplained_parity)
    if miles_hardware and verl_hardware and miles_hardware != verl_hardware:
        return f"cells ran on different hardware: miles {miles_hardware}, verl {verl_hardware}"
    return None
