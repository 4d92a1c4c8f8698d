"""The statistics options of one report, in one object: what `run.py report` takes and every analysis step reads.

Caveats:
- `reps` and `seed` only matter for cells with one repeat (the block bootstrap); with repeats the intervals are
  analytic (Welch t over the repeats) and need no resampling.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPARISON_REPEATS = 3
"""Interleaved repeats a Miles/VERL comparison runs by default: the smallest number whose between-repeat spread puts
run-to-run variation into the intervals (validated: docs, Statistics); it costs 3x the GPU time of one pass."""


@dataclass(frozen=True, kw_only=True)
class AnalysisSettings:
    confidence: float = 0.95
    """Confidence level of every interval (per metric, or of the whole step-time family with `family_wise`)."""
    reps: int = 4000
    """Bootstrap resamples per side of a comparison whose cells have one repeat."""
    seed: int = 0
    """Bootstrap seed, fixed so that the same folder gives the same report."""
    family_wise: bool = True
    """Adjust the step-time family (step time and the throughputs) to a joint confidence level."""

    def __post_init__(self) -> None:
        if not 0 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {self.confidence}")
        if self.reps < 100:
            raise ValueError(f"reps must be at least 100 for a percentile interval, got {self.reps}")
