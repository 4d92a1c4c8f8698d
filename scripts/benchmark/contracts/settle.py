"""How many repeats a side would settle an inconclusive interval of a relative change (the report's headline and
the paired PR check print it), if the change and the run-to-run spread stay as measured."""

from __future__ import annotations

import math
from collections.abc import Mapping

from scripts.benchmark.contracts.report import ComparisonModel

MAX_REPEATS_TO_SETTLE = 50
"""Beyond this many repeats a side no estimate is given: the change sits near the threshold, or the spread the
repeats show is too wide (one of them far from the others) for an estimate to mean anything."""


def repeats_to_settle(low: float, high: float, *, threshold: float, repeats: tuple[int, int]) -> int | None:
    """Repeats a side that would make an inconclusive interval of a relative change decisive (inside +-threshold,
    or wholly beyond it), if the change and the run-to-run spread stay as measured: the interval over repeats is a
    pooled t, so its half-width goes as t(n_c + n_r - 2) x sqrt(1/n_c + 1/n_r). None when a side has one repeat
    (its interval comes from the steps), when the change sits on the threshold, or beyond `MAX_REPEATS_TO_SETTLE`.
    """
    from scipy import special  # scipy.stats costs a second of import

    if min(repeats) < 2 or not high > low:
        return None
    centre, half = (low + high) / 2, (high - low) / 2
    allowed = abs(threshold - abs(centre))
    if allowed <= 0:
        return None

    def width(n_c: int, n_r: int) -> float:
        return float(special.stdtrit(n_c + n_r - 2, 0.975)) * math.sqrt(1 / n_c + 1 / n_r)

    now = width(*repeats)
    for n in range(max(repeats) + 1, MAX_REPEATS_TO_SETTLE + 1):
        if half * width(n, n) / now < allowed:
            return n
    return None


def settle_estimate(row: ComparisonModel, repeats_by_cell: Mapping[str, int]) -> tuple[int, int | None] | None:
    """For an inconclusive comparison row: (repeats a side now, `repeats_to_settle` of its interval); None when a
    side has fewer than 2 repeats (its interval comes from the steps, no estimate can be given)."""
    sides = (repeats_by_cell.get(row.candidate_cell, 0), repeats_by_cell.get(row.reference_cell, 0))
    if min(sides) < 2:
        return None
    return min(sides), repeats_to_settle(row.ci_low - 1, row.ci_high - 1, threshold=row.threshold, repeats=sides)
