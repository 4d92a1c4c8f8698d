"""Warm-up detection for one step series: where the steady state starts, or "not reached" with the steps missing.

- `detect_steady_state(values)` finds the warm-up as the leading block of steps far above the steady level:
  1. the reference is the last half of the finite steps: level m = their median, scale s = the smaller of two SD
     estimates, 1.2533 x their mean absolute deviation from m (steadier than the MAD on 12 autocorrelated steps)
     and the same mean over all but the largest fifth of the deviations, made consistent for a normal sample: one
     periodic slow step (a checkpoint every 10 steps) inflated the first about 3.5x and let a warm-up step through
     in about 60% of such runs; the smaller of the two also keeps the clean runs' kept warm-up steps under 1%;
  2. the warm-up block is the run of steps from the start that are more than `WARMUP_SDS` (3) s above m, a gap of one
     step allowed (a decaying warm-up dips under the line by chance) unless the step after the gap is a lone spike,
     more than `WARMUP_SDS` s above the block's last step with the step after it below the line (a periodic
     checkpoint save, not a warm-up climbing back), searched while `MIN_STEADY_STEPS` remain;
  3. the cut is one safety step past the block (its last step's successor is still slower than the steady level
     more often than not), except after a sharp end: a last block step more than `SHARP_END_SDS` (4) s above m
     followed by a step below m.
  Validated on generated runs (tests/benchmark/validation_generator.py: AR(1) 0.5, CV 2%, warm-ups of 3-8 steps
  decaying to 5-15%; docs/benchmark.md, Statistics): within one step of the true warm-up in about 96% of 24-step
  runs and 99% of 200-step runs, a warm-up step kept in under 1%; with a checkpoint step 50% slower every 10 steps,
  within one step in about 97%.
- Not reached (`reached=False`, with `more_steps` = how many more steps the spec needs where that can be said):
  fewer than 2 x `MIN_STEADY_STEPS` finite steps; a warm-up block that runs into the last `MIN_STEADY_STEPS` steps;
  a steady window that still drifts: its least-squares trend over the window is more than `DRIFT_SES` (4)
  autocorrelation-corrected standard errors and more than `DRIFT_MIN_CHANGE` (8%) of the level, or more than 2.5
  SEs and 15% of the level; or a window too noisy for the claim: its robust scale (`window_noise`) above
  `MAX_NOISE` of its level, where a warm-up step `MIN_SEEN_WARMUP` (9%) slower sits under the rule's line and can
  be kept unseen (at step CV 10% the cut was within one step in about 64% of runs and kept a warm-up step in 60%;
  more steps do not help, so none are asked for). The numbers then describe the last half (or the window found),
  flagged.
- Indices are positions in the series given; the caller maps them to step numbers.

Caveats:
- Non-finite values (NaN steps) are dropped before the search; their positions are kept for the mapping back.
- A warm-up step less than about 2 step SDs slower than the steady level cannot be told from noise; the safety step
  covers most of them. A drift smaller than the noise of the window (about 10% over 15 steps at CV 2%) is not seen.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

MIN_STEADY_STEPS = 10
MIN_TAIL_STEPS = MIN_STEADY_STEPS
"""The spec's too-short warning (spec.steady_state_warnings) reads this name."""
WARMUP_SDS = 3.0
SHARP_END_SDS = 4.0
DRIFT_SES = 4.0
DRIFT_MIN_CHANGE = 0.08
DRIFT_LARGE_CHANGE = 0.15
DRIFT_LARGE_SES = 2.5
"""A trend of 15% of the level over the window needs only 2.5 SEs: a curved decay (a long warm-up) leaves
autocorrelated residuals that inflate the SE of a trend nobody would call steady."""
_MEAN_ABS_TO_SD = 1.2533
"""The mean absolute deviation of a normal sample times this is its standard deviation."""
TRIM_SHARE = 0.2
"""The share of the largest absolute deviations of the reference left out of the scale."""
MIN_SEEN_WARMUP = 0.09
"""The smallest warm-up excess (a step this much slower than the level) a claimed steady state promises to have cut."""
MAX_NOISE = MIN_SEEN_WARMUP / WARMUP_SDS
"""The largest robust scale of the steady window, as a share of its level, at which a steady state is claimed: the
rule sees a warm-up step only when it is more than WARMUP_SDS scales slow."""


def _trimmed_abs_to_sd(kept_share: float) -> float:
    """The mean of the smallest `kept_share` of a normal sample's absolute deviations times this is its SD."""
    normal = NormalDist()
    quantile = normal.inv_cdf(0.5 + kept_share / 2)
    return kept_share / (2 * (normal.pdf(0.0) - normal.pdf(quantile)))


def trimmed_scale(deviations: np.ndarray) -> float:
    """A standard deviation from the absolute deviations, the largest `TRIM_SHARE` of them left out (rounded down:
    2 of the 12 steps of a 24-step run's reference), made consistent for the share actually kept."""
    ordered = np.sort(np.abs(deviations))
    kept = len(ordered) - int(TRIM_SHARE * len(ordered))
    return _trimmed_abs_to_sd(kept / len(ordered)) * float(np.mean(ordered[:kept]))


def robust_scale(deviations: np.ndarray) -> float:
    """The smaller of the trimmed scale and 1.2533 x the mean absolute deviation (module docstring, step 1)."""
    return min(trimmed_scale(deviations), _MEAN_ABS_TO_SD * float(np.mean(np.abs(deviations))))


def window_noise(window: np.ndarray) -> float:
    """The robust scale of the steady window around its median, as a share of that median: the noise a warm-up step
    must stand out of. Over the whole window, not the last half: 12 slowly correlated steps hide part of it."""
    level = float(np.median(window))
    return robust_scale(window - level) / abs(level) if level else math.inf


@dataclass(frozen=True, kw_only=True)
class SteadyState:
    start_index: int | None
    """First position (0-based, in the series given) of the steady state; None when the series is empty."""
    reached: bool
    method: str
    n_total: int
    n_steady: int
    more_steps: int | None = None
    """When not reached: how many more steps a run needs for the rule to find a steady state (None: unknown)."""
    noise: float | None = None
    """The steady window's robust scale as a share of its level (`window_noise`); None before a window is found."""


def _warmup_cut(finite: np.ndarray) -> tuple[int, float, float]:
    """(cut, level, scale): the first steady position by the threshold rule, and the reference level and scale."""
    n = len(finite)
    reference = finite[n // 2 :]
    level = float(np.median(reference))
    scale = max(robust_scale(reference - level), 1e-3 * abs(level), 1e-12)
    z = (finite - level) / scale
    last = -1
    for i in range(n - MIN_STEADY_STEPS):
        # Past a gap a decaying warm-up does not climb back far above its last step for one step alone: such a
        # step is a periodic spike (a checkpoint save), not more warm-up.
        spike = z[i] > z[last] + WARMUP_SDS and z[i + 1] <= WARMUP_SDS
        resumes = last < 0 or i == last + 1 or not spike
        if z[i] > WARMUP_SDS and resumes:
            last = i
        elif i > last + 1:
            break
    if last < 0:
        return 0, level, scale
    sharp_end = z[last] > SHARP_END_SDS and z[last + 1] < 0
    return last + (1 if sharp_end else 2), level, scale


def corrected_lag1(residuals: np.ndarray) -> float:
    """The lag-1 autocorrelation of residuals, in [0, 0.9]: a short series' is biased low, so it is corrected
    (Marriott & Pope) before it inflates a standard error by sqrt((1 + rho) / (1 - rho))."""
    n = len(residuals)
    r1 = float(np.dot(residuals[:-1], residuals[1:]) / max(float(np.dot(residuals, residuals)), 1e-300))
    return min(max(r1 + (1 + 3 * r1) / n, 0.0), 0.9)


def drift_in_window(window: np.ndarray) -> tuple[float, float]:
    """(relative change over the window by its least-squares line, that change in corrected standard errors)."""
    n = len(window)
    t = np.arange(n) - (n - 1) / 2
    slope = float(np.dot(t, window - window.mean()) / np.dot(t, t))
    residuals = window - window.mean() - slope * t
    sd = float(residuals.std(ddof=2)) if n > 2 else 0.0
    rho = corrected_lag1(residuals)
    se_slope = sd / math.sqrt(float(np.dot(t, t))) * math.sqrt((1 + rho) / (1 - rho))
    level = abs(float(np.median(window))) or 1.0
    change = slope * (n - 1) / level
    return change, (abs(slope) / se_slope if se_slope > 0 else (math.inf if slope else 0.0))


def detect_steady_state(values: Sequence[float | None] | np.ndarray) -> SteadyState:
    """The threshold rule on one run's series (e.g. step_time_s in step order)."""
    array = np.asarray([math.nan if v is None else v for v in values], dtype=float)
    positions = np.flatnonzero(np.isfinite(array))
    finite = array[positions]
    n = len(finite)
    if n == 0:
        return SteadyState(start_index=None, reached=False, method="no finite values", n_total=0, n_steady=0)
    if n < 2 * MIN_STEADY_STEPS:
        return _not_reached(
            positions,
            n,
            n // 2,
            2 * MIN_STEADY_STEPS - n,
            f"too few steps: only {n} finite (< {2 * MIN_STEADY_STEPS})",
        )
    cut, _, _ = _warmup_cut(finite)
    if cut > n - MIN_STEADY_STEPS:
        reason = f"the warm-up runs past step {int(positions[n - MIN_STEADY_STEPS])}"
        return _not_reached(positions, n, n // 2, cut - (n - MIN_STEADY_STEPS), reason)
    change, ses = drift_in_window(finite[cut:])
    large = abs(change) > DRIFT_LARGE_CHANGE and ses > DRIFT_LARGE_SES
    if large or (ses > DRIFT_SES and abs(change) > DRIFT_MIN_CHANGE):
        # A window that drifts may be a long warm-up: the rule needs as many steps again to see the end of it.
        reason = f"the step time still moves {change:+.1%} over the last {n - cut} steps"
        return _not_reached(positions, n, cut, n, reason)
    noise = window_noise(finite[cut:])
    if noise > MAX_NOISE:
        reason = (
            f"too noisy to place the end of the warm-up: the steady steps vary by {noise:.1%} (robust SD), so a "
            f"warm-up step up to {WARMUP_SDS * noise:.0%} slower cannot be told from noise (a claim needs under "
            f"{MIN_SEEN_WARMUP:.0%})"
        )
        return _not_reached(positions, n, cut, None, reason, noise=noise)
    return SteadyState(
        start_index=int(positions[cut]),
        reached=True,
        method=f"threshold rule: {cut} warm-up steps dropped",
        n_total=n,
        n_steady=n - cut,
        noise=noise,
    )


def _not_reached(
    positions: np.ndarray, n: int, start: int, more: int | None, reason: str, noise: float | None = None
) -> SteadyState:
    """`noise` set: refused for noise, where more steps do not help; otherwise the steps the spec needs."""
    needs = "" if noise is not None else f"; run at least {more} more steps" if more else "; run more steps"
    claim = "; steady state not claimed" if noise is not None else "; no steady state"
    return SteadyState(
        start_index=int(positions[start]),
        reached=False,
        method=f"threshold rule: {reason}{claim}{needs}, steps from {int(positions[start])} kept",
        n_total=n,
        n_steady=n - start,
        more_steps=more,
        noise=noise,
    )
