"""Practical significance: does a measured change matter, not only is it detectable?

With thousands of steps any difference is statistically significant; a maintainer needs to know whether it is
larger than what anyone would act on. Each metric has a practical threshold (a relative change, default 2%, declared
in the spec's `report` section). A confidence interval of the relative change is read against it with two tests:

- entirely beyond +threshold or below -threshold: a real, relevant change ("slower"/"faster" for times and costs,
  "better"/"worse" for the rest, by the metric's declared direction);
- entirely inside [-threshold, +threshold]: "no practical difference" (an equivalence test: two one-sided tests at
  the interval's level);
- anything else: "inconclusive" (the data cannot tell a relevant change from none).

The report's verdicts (candidate/reference ratios, decided here and stored in the document) and the regression
check (candidate vs history) both read their intervals through `practical_verdict` and print them with
`verdict_words` (contracts/report.py), so the two speak the same language.
"""

from __future__ import annotations

import math
from typing import Any

from scripts.benchmark.contracts.report import (  # noqa: F401 (the verdict words, re-exported for the check)
    DEFAULT_PRACTICAL_THRESHOLD,
    Practical,
    is_time,
    percent,
    signed_percent,
    verdict_words,
)
from scripts.benchmark.spec.report import ReportSpec  # noqa: F401 (re-exported)


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


def practical_thresholds(plan: dict[str, Any] | None, metrics: list[str]) -> dict[str, float]:
    """Threshold per metric from plan.json's resolved spec (`spec.report`); the defaults when it has none."""
    section = ((plan or {}).get("spec") or {}).get("report")
    try:
        report = ReportSpec.model_validate(section or {})
    except ValueError:  # an older or hand-made plan.json: read it with the defaults rather than fail the report
        report = ReportSpec()
    return {name: report.threshold(name) for name in metrics}
