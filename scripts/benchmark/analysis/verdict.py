"""Practical significance: does a measured change matter, not only is it detectable?

With thousands of steps any difference is statistically significant; a maintainer needs to know whether it is
larger than what anyone would act on. Each metric has a practical threshold (a relative change, default 2%, declared
in the spec's `report` section). A confidence interval of the relative change is read against it with two tests:

- entirely beyond +threshold or below -threshold: a real, relevant change ("slower"/"faster" for times and costs,
  "better"/"worse" for the rest, by the metric's declared direction);
- entirely inside [-threshold, +threshold]: "no practical difference" (an equivalence test: two one-sided tests at
  the interval's level);
- anything else: "inconclusive" (the data cannot tell a relevant change from none).

The report's headline (Miles/VERL ratios) and the regression check (candidate vs history) both read their intervals
through `practical_verdict` and print them with `verdict_words`, so the two speak the same language.
"""

from __future__ import annotations

import enum
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from miles.utils.bench_metrics import REPORT_METRICS

DEFAULT_PRACTICAL_THRESHOLD = 0.02
"""2%: about the run-to-run spread of a steady step time on one node; smaller changes are not worth acting on."""


class ReportSpec(BaseModel):
    """The spec's `report` section: how results are read, never how they are measured (not in the spec hash)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    practical_threshold: float = Field(DEFAULT_PRACTICAL_THRESHOLD, gt=0, lt=1)
    """Relative change below which a difference is "no practical difference", for every metric."""
    metric_thresholds: dict[str, float] = Field(default_factory=dict)
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


class Practical(str, enum.Enum):
    BETTER = "better"
    WORSE = "worse"
    NO_PRACTICAL_DIFFERENCE = "no practical difference"
    INCONCLUSIVE = "inconclusive"
    NOT_COMPARED = "n/a"


def practical_verdict(low: float | None, high: float | None, *, threshold: float, direction: str) -> Practical:
    """Read the interval [low, high] of a relative change (0 = no change; +0.05 = 5% larger) against +-threshold."""
    if low is None or high is None or not (math.isfinite(low) and math.isfinite(high)):
        return Practical.NOT_COMPARED
    larger_is_better = direction == "higher"
    if low > threshold:
        return Practical.BETTER if larger_is_better else Practical.WORSE
    if high < -threshold:
        return Practical.WORSE if larger_is_better else Practical.BETTER
    if -threshold <= low and high <= threshold:
        return Practical.NO_PRACTICAL_DIFFERENCE
    return Practical.INCONCLUSIVE


def is_time(unit: str) -> bool:
    """Seconds and seconds per tokens: a larger value is "slower"."""
    return unit == "s" or unit.startswith("s/")


def verdict_words(verdict: Practical, unit: str) -> str:
    """ "slower"/"faster" for times, "worse"/"better" otherwise; the equivalence and inconclusive words as they are."""
    if verdict is Practical.WORSE:
        return "slower" if is_time(unit) else "worse"
    if verdict is Practical.BETTER:
        return "faster" if is_time(unit) else "better"
    return verdict.value


def percent(change: float) -> str:
    """A relative change as a short percentage: 10%, 2.4%, 0.51% (whole percents from 5% up: a headline number)."""
    magnitude = abs(change) * 100
    if magnitude >= 4.95:
        return f"{magnitude:.0f}%"
    return f"{magnitude:.1f}%" if magnitude >= 0.995 else f"{magnitude:.2f}%"


def signed_percent(change: float) -> str:
    """An interval end: always with a decimal (+9.6%, +10.4%, -0.18%), so bounds never look rounder than they are."""
    magnitude = abs(change) * 100
    return ("+" if change >= 0 else "-") + (f"{magnitude:.1f}%" if magnitude >= 0.995 else f"{magnitude:.2f}%")


def practical_thresholds(plan: dict[str, Any] | None, metrics: list[str]) -> dict[str, float]:
    """Threshold per metric from plan.json's resolved spec (`spec.report`); the defaults when it has none."""
    section = ((plan or {}).get("spec") or {}).get("report")
    try:
        report = ReportSpec.model_validate(section or {})
    except ValueError:  # an older or hand-made plan.json: read it with the defaults rather than fail the report
        report = ReportSpec()
    return {name: report.threshold(name) for name in metrics}
