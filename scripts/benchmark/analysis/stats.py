"""Per-cell summaries: the median of a metric's steady-state steps with a 95% confidence interval.

- `summarise(runs, confidence)` takes one list of steady-state values per repeat and returns a `Summary`
  (median, ci_low, ci_high, n, method). The unit of the interval is chosen where the variance is (Kalibera & Jones):
  - several repeats: each repeat's median is one observation; the point is the median of those, the interval a
    Student-t interval over them (n = repeats);
  - one repeat: the batch-means method; the steady-state steps are cut into `num_batches` consecutive batches of at
    least `MIN_BATCH_STEPS` steps, each batch's median is one observation, and the t-interval is taken over those.
    Consecutive steps are autocorrelated, so a t-interval over single steps would be too narrow. It cannot see
    run-to-run variation (one run has one offset), so its method says so: it covers that run's own median, not the
    cell's.
- The method string of every summary says which of the two was used, with the counts.
- Non-finite values are dropped; a metric with no finite value gives a summary of nulls (n = 0), never zeros.

Caveats:
- The t-interval assumes the repeat (or batch) medians are roughly normal; with 2 repeats it is wide by design.
- Fewer than 2 units (a single run shorter than 2 * MIN_BATCH_STEPS) give a median without an interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from scripts.benchmark.analysis.intervals import block_length

MIN_BATCH_STEPS = 5
MAX_BATCHES = 10


@dataclass(frozen=True, kw_only=True)
class Summary:
    median: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    """Number of finite steady-state steps summarised (all repeats together)."""
    method: str


def finite_values(values: Sequence[float | None] | np.ndarray) -> np.ndarray:
    if isinstance(values, np.ndarray):
        array = values.astype(float, copy=False)
    else:
        array = np.asarray([math.nan if v is None else v for v in values], dtype=float)
    return array[np.isfinite(array)]


def t_quantile(q: float, df: float) -> float:
    """Student t quantile (scipy.special; scipy.stats costs a second of import)."""
    return float(special.stdtrit(df, q))


def t_interval(units: np.ndarray, confidence: float) -> tuple[float, float]:
    """Student-t interval of the mean of `units` (at least 2 values)."""
    half = t_quantile(0.5 + confidence / 2, len(units) - 1) * units.std(ddof=1) / math.sqrt(len(units))
    centre = float(units.mean())
    return centre - float(half), centre + float(half)


def batch_medians(values: np.ndarray) -> np.ndarray:
    """Medians of consecutive, non-overlapping batches, each at least as long as the series' block length.

    The batch size is the circular-bootstrap block length of intervals.py (at least sqrt(n) and twice the
    integrated autocorrelation time), at least MIN_BATCH_STEPS, so that neighbouring batches are close to
    independent; at most MAX_BATCHES."""
    size = max(MIN_BATCH_STEPS, block_length(values))
    num_batches = min(MAX_BATCHES, len(values) // size)
    if num_batches < 2:
        return np.asarray([], dtype=float)
    size = len(values) // num_batches
    # Batches end at the last step; the leftover (len % size) steps at the start are the oldest and are left out.
    tail = values[len(values) - num_batches * size :]
    return np.median(tail.reshape(num_batches, size), axis=1)


def summarise(runs: Sequence[Sequence[float | None]], confidence: float = 0.95) -> Summary:
    """Median and CI of one metric over the steady-state steps of each repeat (one inner list per repeat)."""
    per_run = [finite_values(r) for r in runs]
    per_run = [r for r in per_run if len(r)]
    n = int(sum(len(r) for r in per_run))
    pct = f"{confidence:.0%}"
    if n == 0:
        return Summary(median=None, ci_low=None, ci_high=None, n=0, method="no finite values")
    if len(per_run) >= 2:
        units = np.asarray([np.median(r) for r in per_run])
        low, high = t_interval(units, confidence)
        return Summary(
            median=float(np.median(units)),
            ci_low=low,
            ci_high=high,
            n=n,
            method=f"median of {len(units)} repeat medians; {pct} CI: t-interval over the repeats (repeat = unit)",
        )
    values = per_run[0]
    units = batch_medians(values)
    if len(units) < 2:
        return Summary(
            median=float(np.median(values)),
            ci_low=None,
            ci_high=None,
            n=n,
            method=f"median of {n} steps of one run; no CI (fewer than {2 * MIN_BATCH_STEPS} steady-state steps)",
        )
    low, high = t_interval(units, confidence)
    size = len(values) // len(units)
    return Summary(
        median=float(np.median(values)),
        ci_low=low,
        ci_high=high,
        n=n,
        method=(
            f"median of {n} steps of one run; {pct} CI: batch means, t-interval over {len(units)} batch medians "
            f"of {size} steps; one repeat: run-to-run variation NOT included"
        ),
    )
