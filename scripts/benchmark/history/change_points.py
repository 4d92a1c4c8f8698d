"""Change points in a nightly series: Apache Otava's E-divisive means with a Student t-test, plus a minimum segment.

- `find_change_points(values, ...)` calls `otava.analysis.compute_change_points` (split on sliding windows with the
  first-pass p-value at 10x, then merge at `max_pvalue`), then enforces `min_segment`: while a segment is shorter,
  the weaker of its bounding change points is dropped and Otava's merge step re-tests what remains.
- Each `ChangePoint` gives the index of the first run of the new level, the means on both sides, the relative change
  and the p-value; the caller maps indices to runs and commits.

Caveats:
- Otava has no minimum segment length (apache/otava#150: "single spikes cause changepoints"); the original R
  e-divisive and MongoDB's implementation used >= 5 points, which is the default here.
- Series shorter than 2 * min_segment have no change point by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ChangePoint:
    index: int
    """Index of the first value of the new level."""
    mean_before: float
    mean_after: float
    change: float
    """mean_after / mean_before - 1."""
    p_value: float


def find_change_points(
    values: Sequence[float],
    *,
    max_pvalue: float = 0.001,
    min_magnitude: float = 0.0,
    window: int = 50,
    min_segment: int = 5,
) -> list[ChangePoint]:
    """Change points of `values` (oldest first, finite), each splitting segments of at least `min_segment` values."""
    from otava.analysis import TTestSignificanceTester, compute_change_points, merge

    if min_segment < 1:
        raise ValueError(f"min_segment must be >= 1, got {min_segment}")
    series = [float(v) for v in values]
    if len(series) < 2 * min_segment:
        return []
    points, _weak = compute_change_points(
        series, window_len=window, max_pvalue=max_pvalue, min_magnitude=min_magnitude
    )
    tester = TTestSignificanceTester(max_pvalue)
    points = sorted(points, key=lambda cp: cp.index)
    while True:
        short = _weakest_bounding_short_segment(points, len(series), min_segment)
        if short is None:
            break
        del points[short]
        intervals = tester.get_intervals(points)
        points = [tester.change_point(cp.to_candidate(), series, intervals) for cp in points]
        points = merge(points, series, max_pvalue, min_magnitude)
    return [
        ChangePoint(
            index=int(cp.index),
            mean_before=float(cp.stats.mean_before()),
            mean_after=float(cp.stats.mean_after()),
            change=float(cp.stats.forward_rel_change()),
            p_value=float(cp.stats.pvalue),
        )
        for cp in points
    ]


def _weakest_bounding_short_segment(points: list, length: int, min_segment: int) -> int | None:
    """Position in `points` of the weakest change point that bounds a segment shorter than min_segment, or None."""
    bounds = [0] + [cp.index for cp in points] + [length]
    candidates: set[int] = set()
    for k in range(len(bounds) - 1):
        if bounds[k + 1] - bounds[k] < min_segment:
            # Segment k lies between change points k-1 and k (positions in `points`); the series ends are not points.
            candidates.update(i for i in (k - 1, k) if 0 <= i < len(points))
    if not candidates:
        return None
    return max(candidates, key=lambda i: points[i].stats.pvalue)
