"""The spec's `report` section: how results are read, never how they are measured (not in the spec hash).

- `ReportSpec`: the practical threshold (a relative change, default 2%) below which a difference is "no practical
  difference", and per-metric overrides by report metric name.
- `MIN_STEADY_STEPS`: the steady steps the steady-state detector keeps at the least; the spec warns when a run is
  too short to leave them after its warm-up.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator
from scripts.benchmark.spec.pins import Number

from miles.utils.bench_metrics import REPORT_METRICS

DEFAULT_PRACTICAL_THRESHOLD = 0.02
"""2%: about the run-to-run spread of a steady step time on one node; smaller changes are not worth acting on."""
MIN_STEADY_STEPS = 10
"""Steady steps the detector needs after a warm-up (MSER searches while this many remain)."""


class ReportSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    practical_threshold: Number = Field(DEFAULT_PRACTICAL_THRESHOLD, gt=0, lt=1)
    """Relative change below which a difference is "no practical difference", for every metric."""
    metric_thresholds: dict[str, Number] = Field(default_factory=dict)
    """Per-metric overrides, by report metric name (`step_time_s`, `phases_s.train`, ...)."""

    @field_validator("metric_thresholds")
    @classmethod
    def _known_metrics(cls, value: dict[str, float]) -> dict[str, float]:
        for name, threshold in value.items():
            if name not in REPORT_METRICS:
                raise ValueError(
                    f"report.metric_thresholds: unknown metric {name!r} (known: {', '.join(REPORT_METRICS)})"
                )
            if not 0 < threshold < 1:
                raise ValueError(f"report.metric_thresholds.{name}: {threshold} is not a fraction in (0, 1)")
        return value

    def threshold(self, metric: str) -> float:
        return self.metric_thresholds.get(metric, self.practical_threshold)
