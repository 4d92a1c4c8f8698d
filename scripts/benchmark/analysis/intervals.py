"""The interval arithmetic behind the comparisons: t intervals over repeats and a vectorised circular block
bootstrap within one run.

- `welch_ratio(units_m, units_v, level)`: ratio of the means of per-repeat statistics (repeats x metrics), interval
  on the log scale, standard error from the spread between repeats: by default one relative spread pooled over both
  sides (Student t, n_m + n_v - 2 degrees of freedom; with 3 repeats a side Welch's degrees of freedom fall to 2-4
  and cost a tenth of the power), or each side its own (Welch-Satterthwaite). The repeat is the unit, so run-to-run
  variation is in the interval. `welch_difference` does a difference (seconds of a gap) by Welch.
- `block_bootstrap_means(matrix, harmonic, reps, rng)`: (reps x metrics) resampled (harmonic) means of one run's
  steps by the circular block bootstrap (Politis & Romano), vectorised: the sums of every circular block are
  computed once from cumulative sums and only block starts are drawn, so 10,000 steps cost milliseconds and no
  per-step object exists. Block length: `block_length` (at least sqrt(n) and twice the integrated autocorrelation
  time of the series).

Caveats:
- arch is not imported on this path: importing it takes seconds, longer than the whole analysis of a 24-step run.
- Welch over 2-3 repeats has few degrees of freedom: its intervals are honest but wide; the t quantile carries that.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import special


def _t_ppf(q: float | np.ndarray, df: float | np.ndarray) -> np.ndarray:
    """Student t quantile (scipy.special: scipy.stats costs a second of import for three functions)."""
    return special.stdtrit(df, q)


def _t_sf(x: np.ndarray, df: np.ndarray) -> np.ndarray:
    return special.stdtr(df, -x)


def block_length(series: np.ndarray) -> int:
    """Circular-bootstrap block length: at least sqrt(n) and twice the integrated autocorrelation time, at most n/3."""
    finite = series[np.isfinite(series)]
    n = len(finite)
    if n < 4:
        return 1
    centred = finite - finite.mean()
    denominator = float(np.dot(centred, centred))
    tau = 1.0
    if denominator > 0:
        for lag in range(1, n // 4 + 1):
            r = float(np.dot(centred[:-lag], centred[lag:])) / denominator
            if r < 0.05:
                break
            tau += 2 * r
    length = max(math.sqrt(n), 2 * tau)
    return int(min(max(1, math.ceil(length)), max(1, n // 3)))


def small_sample_factor(num_blocks: float, num_repeats: int, confidence: float) -> float:
    """Widening of the bootstrap spread for few independent units (t quantile over normal, and R/(R-1) for repeats).

    A block bootstrap over k blocks behaves like a sample of k; its percentile interval uses normal quantiles and is
    too narrow for small k."""
    q = 0.5 + confidence / 2
    factor = float(_t_ppf(q, max(1.0, num_blocks - 1)) / special.ndtri(q))
    factor *= math.sqrt(num_blocks / max(1.0, num_blocks - 1))
    if num_repeats > 1:
        factor *= math.sqrt(num_repeats / (num_repeats - 1))
    return factor


def column_means(matrix: np.ndarray, harmonic: np.ndarray) -> np.ndarray:
    """Per-column mean of a (steps x metrics) matrix, harmonic for the `harmonic` columns; NaN when empty."""
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        arithmetic = np.nanmean(matrix, axis=0)
        harmonic_means = 1.0 / np.nanmean(1.0 / matrix, axis=0)
    return np.where(harmonic, harmonic_means, arithmetic)


def block_bootstrap_means(
    matrix: np.ndarray, harmonic: np.ndarray, reps: int, rng: np.random.Generator, length: int
) -> np.ndarray:
    """(reps x metrics) circular-block-bootstrap (harmonic) means of one run's steps; NaN steps are left out."""
    n, k = matrix.shape
    with np.errstate(divide="ignore"):
        values = np.where(harmonic, 1.0 / matrix, matrix)
    finite = np.isfinite(values)
    values = np.where(finite, values, 0.0)
    padded = np.concatenate([values, values[: length - 1]])
    counts = np.concatenate([finite, finite[: length - 1]]).astype(float)
    zeros = np.zeros((1, k))
    cumulative = np.cumsum(np.concatenate([zeros, padded]), axis=0)
    cumulative_counts = np.cumsum(np.concatenate([zeros, counts]), axis=0)
    # Sum and count of the circular block starting at every step, once; a resample only draws block starts.
    block_sums = cumulative[length : length + n] - cumulative[:n]
    block_counts = cumulative_counts[length : length + n] - cumulative_counts[:n]
    num_blocks = math.ceil(n / length)
    starts = rng.integers(0, n, size=(reps, num_blocks))
    total = np.zeros((reps, k))
    count = np.zeros((reps, k))
    for column in range(num_blocks):
        total += block_sums[starts[:, column]]
        count += block_counts[starts[:, column]]
    with np.errstate(divide="ignore", invalid="ignore"):
        means = total / count
        return np.where(harmonic, 1.0 / means, means)


def welch(units_m: np.ndarray, units_v: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per column: side means, their squared standard errors and the Welch-Satterthwaite degrees of freedom."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        n_m = np.sum(np.isfinite(units_m), axis=0)
        n_v = np.sum(np.isfinite(units_v), axis=0)
        mean_m, mean_v = np.nanmean(units_m, axis=0), np.nanmean(units_v, axis=0)
        var_m = np.nanvar(units_m, axis=0, ddof=1) / n_m
        var_v = np.nanvar(units_v, axis=0, ddof=1) / n_v
        df = (var_m + var_v) ** 2 / (var_m**2 / (n_m - 1) + var_v**2 / (n_v - 1))
    return mean_m, mean_v, var_m, var_v, np.where(np.isfinite(df), df, np.minimum(n_m, n_v) - 1.0)


def welch_ratio(
    units_m: np.ndarray, units_v: np.ndarray, levels: np.ndarray, *, pooled: bool = True
) -> tuple[np.ndarray, ...]:
    """(low, high, p) per column for the ratio of side means; log scale where both sides are positive.

    `pooled`: one relative (CV) run-to-run spread for both sides, n_m + n_v - 2 degrees of freedom (Student); else
    each side its own, Welch-Satterthwaite degrees of freedom."""
    mean_m, mean_v, var_m, var_v, df = welch(units_m, units_v)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = mean_m / mean_v
        rel_m, rel_v = var_m / mean_m**2, var_v / mean_v**2
        if pooled:
            n_m, n_v = np.sum(np.isfinite(units_m), axis=0), np.sum(np.isfinite(units_v), axis=0)
            df = (n_m + n_v - 2).astype(float)
            pooled_cv2 = (n_m * (n_m - 1) * rel_m + n_v * (n_v - 1) * rel_v) / df
            rel_m, rel_v = pooled_cv2 / n_m, pooled_cv2 / n_v
        se_log = np.sqrt(rel_m + rel_v)
        q = _t_ppf(0.5 + levels / 2, np.maximum(df, 1.0))
        positive = (mean_m > 0) & (mean_v > 0)
        low = np.where(positive, ratio * np.exp(-q * se_log), ratio * (1 - q * se_log))
        high = np.where(positive, ratio * np.exp(q * se_log), ratio * (1 + q * se_log))
        t_stat = np.where(positive, np.log(np.abs(ratio)), ratio - 1) / se_log
    p = 2 * _t_sf(np.abs(t_stat), np.maximum(df, 1.0))
    return low, high, np.where(np.isfinite(p), p, np.nan)


def welch_difference(units_m: np.ndarray, units_v: np.ndarray, level: float) -> tuple[float, float]:
    """Interval of mean(units_m) - mean(units_v) (one column each) by Welch's t."""
    mean_m, mean_v, var_m, var_v, df = welch(units_m[:, None], units_v[:, None])
    half = _t_ppf(0.5 + level / 2, max(float(df[0]), 1.0)) * math.sqrt(float(var_m[0] + var_v[0]))
    gap = float(mean_m[0] - mean_v[0])
    return gap - half, gap + half


def percentile_ci(values: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    finite = values[np.isfinite(values)]
    if len(finite) < 2 / (1 - confidence):  # fewer resamples than it takes to put one in each tail
        return None, None
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_p_value(values: np.ndarray, null: float) -> float | None:
    finite = values[np.isfinite(values)]
    if len(finite) < 10:
        return None
    return float(min(1.0, 2 * min(np.mean(finite <= null), np.mean(finite >= null))))
