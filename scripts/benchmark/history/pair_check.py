"""The paired PR check (`run.py ab`): a PR head (the candidate side) against its merge base (the reference side),
two builds of one framework run on one node with the same spec, repeats interleaved with the order balanced.

No history is read: both builds ran on the same node in the same hour, so node, driver and day-to-day drift cancel,
and the design of the two sides is the same by construction (the nightly history cannot promise that for a PR run).

- `judge_pairs(report)` reads report.json's step-time family comparisons (head/base ratios with their intervals,
  tested in order, at the report's confidence) and returns one `MetricCheck` per pair and metric, in the regression
  check's terms: REGRESSED when the interval excludes 1 on the worse side and the head is worse by more than the
  metric's practical threshold (the check's rule: significant and practically relevant); IMPROVED symmetrically;
  UNCHANGED otherwise; ERROR when the pair has no step-time ratio (refused, missing or non-finite).
- An UNCHANGED metric whose interval crosses the threshold (inconclusive, at high noise) says how many repeats a
  side would settle it, if the change and the run-to-run spread stay as measured (`repeats_to_settle`).
- A two-sided interval at 95% leaves at most 2.5% false "slower" on equal builds; the threshold lowers it further.
- `moved_phase_notes(report)`: per pair, the phase whose seconds moved most and its share of the step-time gap.
- Exit codes are the check's (history/check.py `exit_code`): 1 regression, 2 could not judge, 0 otherwise.
"""

from __future__ import annotations

import math

from scripts.benchmark.contracts.report import (
    MAX_REPEATS_TO_SETTLE,
    ComparisonModel,
    Practical,
    ReportDocument,
    settle_estimate,
)
from scripts.benchmark.history.check import MetricCheck, Verdict, step_time_family

from miles.utils.bench_metrics import STEP_TIME_FAMILY

REQUIRED = "step_time_s"


def judge_pairs(report: ReportDocument) -> list[MetricCheck]:
    """One check per compared pair and step-time family metric; refused pairs are ERROR with their reason."""
    checks = [
        MetricCheck(
            cell_id=f"{r.backend}/{r.layout}", metric=REQUIRED, verdict=Verdict.ERROR, note=f"not compared: {r.reason}"
        )
        for r in report.refused
    ]
    repeats = {c.id: c.repeats for c in report.cells}
    for backend, layout in report.pairs():
        rows = {c.metric: c for c in report.comparisons if (c.backend, c.layout) == (backend, layout)}
        for metric in STEP_TIME_FAMILY:
            row = rows.get(metric)
            if row is None and metric != REQUIRED:
                continue
            checks.append(judge_comparison(f"{backend}/{layout}", metric, row, repeats))
    return step_time_family(checks)


def judge_comparison(pair: str, metric: str, row: ComparisonModel | None, repeats: dict[str, int]) -> MetricCheck:
    """One report.json comparison row read by the check's rule (the statistics validation measures this very code)."""
    finite = row is not None and all(
        v is not None and math.isfinite(v) for v in (row.ratio, row.ci_low, row.ci_high, row.candidate, row.reference)
    )
    if not finite:
        note = "no head/base ratio in report.json" if row is None else f"no finite head/base ratio ({row.method})"
        verdict = Verdict.ERROR if metric == REQUIRED else Verdict.UNCHANGED
        return MetricCheck(cell_id=pair, metric=metric, verdict=verdict, note=note)
    sign = 1.0 if row.direction == "lower" else -1.0
    worse = sign * (row.ratio - 1.0)
    worse_side_excluded = row.ci_low > 1.0 if sign > 0 else row.ci_high < 1.0
    better_side_excluded = row.ci_high < 1.0 if sign > 0 else row.ci_low > 1.0
    if row.significant and worse_side_excluded and worse > row.threshold:
        verdict = Verdict.REGRESSED
    elif row.significant and better_side_excluded and -worse > row.threshold:
        verdict = Verdict.IMPROVED
    else:
        verdict = Verdict.UNCHANGED
    note = ""
    if verdict is Verdict.UNCHANGED and row.verdict is Practical.INCONCLUSIVE:
        note = _settle_note(row, repeats)
    return MetricCheck(
        cell_id=pair,
        metric=metric,
        verdict=verdict,
        baseline=row.reference,
        candidate=row.candidate,
        change=row.ratio - 1.0,
        ci_low=row.ci_low - 1.0,
        ci_high=row.ci_high - 1.0,
        p_value=row.p_value,
        n_baseline=repeats.get(row.reference_cell, 0),
        threshold=row.threshold,
        note=note,
    )


def _settle_note(row: ComparisonModel, repeats: dict[str, int]) -> str:
    """An inconclusive interval (at high noise) says how many repeats a side would make it decisive."""
    estimate = settle_estimate(row, repeats)
    if estimate is None:
        return "inconclusive: intervals over repeats need 2 or more a side (--repeats 3)"
    now, needed = estimate
    if needed is None:
        return f"inconclusive: not even {MAX_REPEATS_TO_SETTLE} repeats a side would settle it (on the threshold)"
    return f"inconclusive with {now} repeats a side: about {needed} a side would settle it (--repeats {needed})"


def moved_phase_notes(report: ReportDocument) -> list[str]:
    """Per pair, the phase that moved most (seconds per step, head minus base) and its share of the step gap."""
    notes = []
    for backend, layout in report.pairs():
        rows = [
            a
            for a in report.attribution
            if (a.backend, a.layout) == (backend, layout)
            and a.component.startswith("phases_s.")
            and a.gap_s is not None
            and math.isfinite(a.gap_s)
        ]
        if not rows:
            continue
        top = max(rows, key=lambda a: abs(a.gap_s))
        share = "" if top.share_of_gap is None else f", {top.share_of_gap:.0%} of the step-time gap"
        interval = ""
        if top.ci_low is not None and top.ci_high is not None:
            interval = f" [{top.ci_low:+.3g}, {top.ci_high:+.3g}]"
        phase = top.component.removeprefix("phases_s.")
        notes.append(f"{backend}/{layout}: the phase that moved most is {phase}, {top.gap_s:+.3g} s{interval}{share}")
    return notes
