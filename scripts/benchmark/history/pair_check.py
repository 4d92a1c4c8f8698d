"""The paired PR check (`run.py ab`, and the runner's rounds of a `--sequential` run): a PR head (the candidate side)
against its merge base (the reference side), two builds of one framework on one node with the same spec, one launch
a side per round, the order balanced (AB, BA, ...).

No history is read: both builds ran on the same node in the same hour, so node, driver and day-to-day drift cancel.
Everything is step time, the metric a PR must not make worse; report.json's per-repeat steady steps are the input.

- Repeat unit: a repeat's steady steps averaged with its slow steps left out. A slow step is more than
  `SLOW_STEP_SHARE` (30%) and `SLOW_STEP_SDS` (6) robust SDs above the repeat's median: one 2x step among 40 moves a
  mean by 2.5%, half of the change the check must see. Slow steps are counted, not forgotten: a head with more of
  them than its base (one-sided Fisher exact test at `ALPHA_SLOW_STEPS`, at the one look where the run stops without
  a step-time regression; an interim look with even a hint of more slow steps does not stop to pass) is REGRESSED
  for that alone, so a change that makes every fifth step slow cannot hide behind the rule.
- Disturbed repeat: one whose unit is more than `OUTLIER_SHARE` (8%) and `OUTLIER_SDS` (4) standard errors away
  from the median of its side's other repeats (the error of a difference of two units from the repeats' own steps,
  AR(1), pooled over both sides: `repeat_spread`). It is left out, and a run that had one never passes: its verdict
  is REGRESSED (the other repeats show it) or "could not judge" (exit 2, rerun), so a node hiccup cannot make a
  slower head look equal. A sequential run goes on for its rounds, to see a regression past the disturbance.
- Looks: once each side has `MIN_REPEATS` usable repeats, every round is a look: a pooled t on the log units (the
  ratio of geometric means, head/base), one-sided for REGRESSED at the look's alpha, and the two-sided 95% interval
  for "no practical difference" (wholly inside +-`threshold`). The error is spent across looks by Bonferroni: each
  look the run goes on after spends `ALPHA_INTERIM`; the last look spends what is left of `ALPHA_STEP_TIME`. With
  `ALPHA_SLOW_STEPS` that bounds equal builds called slower by 2.5% over the whole run.
- Verdict: REGRESSED (exit 1), IMPROVED, UNCHANGED: "no practical difference" (decided) or "inconclusive" (the last
  look could not decide; the note says how many repeats a side would settle it); ERROR (exit 2): too few usable
  repeats, a disturbed run left inconclusive, or no data.
- `looks.json` (written by the runner) lists each look's alpha and whether the run stopped there, so `run.py ab`
  reproduces the runner's last decision; without it the folder is judged in one final look.

Caveats:
- The unit assumes steady steps (report.json cuts the warm-up); a drifting repeat widens the interval, it does not
  bias the ratio.
- Bonferroni over looks is conservative (the looks are correlated); it needs no schedule fixed in advance, which a
  budget that ends the run at an unknown round would break.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from scripts.benchmark.analysis.steady_state import corrected_lag1, trimmed_scale
from scripts.benchmark.contracts.report import CellModel, ReportDocument
from scripts.benchmark.contracts.settle import repeats_to_settle
from scripts.benchmark.history.check import DEFAULT_GATES, MetricCheck, Verdict

METRIC = "step_time_s"
THRESHOLD = DEFAULT_GATES[METRIC].threshold
"""The regression check's practical threshold for step time (3%): what a PR must not add."""
MIN_REPEATS = 3
ALPHA_STEP_TIME = 0.024
ALPHA_SLOW_STEPS = 0.001
ALPHA_INTERIM = 0.0025
PASS_SLOW_STEPS_P = 0.05
"""A head whose excess of slow steps has p below this does not pass on "no practical difference"."""
SLOW_STEP_SHARE = 0.30
SLOW_STEP_SDS = 6.0
OUTLIER_SHARE = 0.08
OUTLIER_SDS = 4.0
CONFIDENCE = 0.95
LOOKS_FILE = "looks.json"


@dataclass(frozen=True, kw_only=True)
class RepeatUnit:
    repeat: int
    mean_s: float
    """Mean of the steady steps without the slow ones."""
    rel_se: float
    """Standard error of that mean over the mean, from the repeat's own steps (AR(1))."""
    steps: int
    slow_steps: int


@dataclass(frozen=True, kw_only=True)
class Disturbed:
    side: str
    repeat: int
    change: float
    """The repeat's unit against the median of its side's other repeats."""


@dataclass(frozen=True, kw_only=True)
class Look:
    """One look at the pair: what was used, at which alpha, and the decision."""

    round: int
    repeats: dict[str, int]
    """Usable repeats per role (candidate, reference)."""
    alpha: float
    final: bool
    decision: str
    """REGRESSED, IMPROVED, NO_DIFFERENCE, CONTINUE, INCONCLUSIVE, COULD_NOT_JUDGE."""
    ratio: float | None = None
    """Head over base: the ratio of the geometric means of the usable units."""
    candidate_s: float | None = None
    reference_s: float | None = None
    """Geometric mean of each side's usable units (seconds per step, slow steps left out)."""
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    slow_steps: dict[str, list[int]] = field(default_factory=dict)
    """Per role: [slow steps, steps]."""
    disturbed: list[dict] = field(default_factory=list)
    note: str = ""

    @property
    def stops(self) -> bool:
        return self.decision != "CONTINUE"


def repeat_unit(repeat: int, steps: list[float]) -> RepeatUnit | None:
    """The unit of one repeat's steady steps (NaN steps dropped); None when fewer than 3 remain."""
    x = np.asarray([v for v in steps if v is not None and math.isfinite(v)], dtype=float)
    if len(x) < 3:
        return None
    median = float(np.median(x))
    slow = x > median + max(SLOW_STEP_SDS * trimmed_scale(x - median), SLOW_STEP_SHARE * median)
    kept = x[~slow]
    mean = float(kept.mean())
    return RepeatUnit(
        repeat=repeat, mean_s=mean, rel_se=_ar1_mean_error(kept) / mean, steps=len(x), slow_steps=int(slow.sum())
    )


def _ar1_mean_error(x: np.ndarray) -> float:
    """Standard error of the mean of an AR(1) series: the plain error inflated by its corrected lag-1 correlation."""
    r = x - x.mean()
    rho = corrected_lag1(r)
    return float(r.std(ddof=1)) / math.sqrt(len(x)) * math.sqrt((1 + rho) / (1 - rho))


def disturbed_repeats(side: str, units: list[RepeatUnit], spread: float) -> list[Disturbed]:
    """The repeats of one side far from the median of its others (module docstring); `spread` is the standard
    error of the difference of two repeat units, the same for every repeat of the pair. None below 3 repeats."""
    if len(units) < MIN_REPEATS:
        return []
    logs = np.log([u.mean_s for u in units])
    limit = max(math.log1p(OUTLIER_SHARE), OUTLIER_SDS * spread)
    out = []
    for i, unit in enumerate(units):
        change = float(logs[i] - np.median(np.delete(logs, i)))
        if abs(change) > limit:
            out.append(Disturbed(side=side, repeat=unit.repeat, change=math.expm1(change)))
    return out


def repeat_spread(units: list[RepeatUnit]) -> float:
    """The standard error of the difference of two repeat units from the steps alone: sqrt(2) x the median of every
    repeat's own error. Pooled over both sides, so one far repeat or one noisy estimate cannot widen it much."""
    return math.sqrt(2) * float(np.median([u.rel_se for u in units])) if units else 0.0


def look(
    candidate: list[RepeatUnit],
    reference: list[RepeatUnit],
    *,
    round_number: int,
    alpha: float,
    final: bool,
    threshold: float = THRESHOLD,
) -> Look:
    """The decision at one look (the module docstring's rules); `alpha` is the one-sided level of this look."""
    from scipy import stats

    spread = repeat_spread(candidate + reference)
    disturbed = disturbed_repeats("candidate", candidate, spread) + disturbed_repeats("reference", reference, spread)
    left_out = {(d.side, d.repeat) for d in disturbed}
    head = [u for u in candidate if ("candidate", u.repeat) not in left_out]
    base = [u for u in reference if ("reference", u.repeat) not in left_out]
    slow = {role: [sum(u.slow_steps for u in units), sum(u.steps for u in units)] for role, units in
            (("candidate", head), ("reference", base))}  # fmt: skip
    common = dict(
        round=round_number,
        repeats={"candidate": len(head), "reference": len(base)},
        slow_steps=slow,
        disturbed=[asdict(d) for d in disturbed],
    )
    if min(len(head), len(base)) < MIN_REPEATS:
        decision = "COULD_NOT_JUDGE" if final else "CONTINUE"
        note = f"{len(head)} usable head and {len(base)} base repeat(s); a verdict needs {MIN_REPEATS} a side"
        return Look(alpha=0.0, final=final, decision=decision, note=note, **common)
    log_head, log_base = np.log([u.mean_s for u in head]), np.log([u.mean_s for u in base])
    n_head, n_base = len(head), len(base)
    df = n_head + n_base - 2
    pooled = ((n_head - 1) * log_head.var(ddof=1) + (n_base - 1) * log_base.var(ddof=1)) / df
    se = math.sqrt(pooled * (1 / n_head + 1 / n_base))
    diff = float(log_head.mean() - log_base.mean())
    q = float(stats.t.ppf(1 - alpha, df))
    q95 = float(stats.t.ppf(0.5 + CONFIDENCE / 2, df))
    limit = math.log1p(threshold)
    p_slow = _more_slow_steps_p(slow["candidate"], slow["reference"])
    values = dict(
        ratio=math.exp(diff),
        candidate_s=math.exp(float(log_head.mean())),
        reference_s=math.exp(float(log_base.mean())),
        ci_low=math.exp(diff - q95 * se),
        ci_high=math.exp(diff + q95 * se),
        p_value=float(stats.t.sf(diff / se, df)) if se > 0 else (0.0 if diff > 0 else 1.0),
    )
    if diff - q * se > 0 and diff > limit:
        decision, note = "REGRESSED", ""
    elif not final and (disturbed or not _passes(diff, q * se, q95 * se, limit, p_slow)):
        decision, note = "CONTINUE", ""
    elif p_slow < ALPHA_SLOW_STEPS:  # the run stops here: the one look that tests slow steps at their level
        decision, note = "REGRESSED", _slow_steps_note(slow, p_slow)
    elif disturbed:
        decision = "COULD_NOT_JUDGE"
        note = "a run with a disturbed repeat never passes: rerun the check"
    elif diff + q * se < 0 and diff < -limit:
        decision, note = "IMPROVED", ""
    elif diff + q95 * se < limit and diff - q95 * se > -limit and p_slow >= PASS_SLOW_STEPS_P:
        decision, note = "NO_DIFFERENCE", ""
    else:
        decision, note = "INCONCLUSIVE", _settle_note(diff, q95 * se, threshold, n_head, n_base)
    return Look(alpha=alpha, final=final, decision=decision, note=note, **common, **values)


def _passes(diff: float, half: float, half95: float, limit: float, p_slow: float) -> bool:
    """An interim look may stop without a regression: the head is decidedly faster, or no practically different."""
    improved = diff + half < 0 and diff < -limit
    return improved or (diff + half95 < limit and diff - half95 > -limit and p_slow >= PASS_SLOW_STEPS_P)


def _more_slow_steps_p(head: list[int], base: list[int]) -> float:
    """One-sided Fisher exact p that the head's share of slow steps is no larger than the base's."""
    from scipy import stats

    (a, n_a), (b, n_b) = head, base
    if a == 0 or n_a == 0 or n_b == 0:
        return 1.0
    # P(X >= a) for X ~ hypergeometric: a + b slow steps among n_a + n_b, n_a drawn for the head.
    return float(stats.hypergeom.sf(a - 1, n_a + n_b, a + b, n_a))


def _slow_steps_note(slow: dict[str, list[int]], p: float) -> str:
    (a, n_a), (b, n_b) = slow["candidate"], slow["reference"]
    return f"slow steps (30% or more over the median): head {a} of {n_a}, base {b} of {n_b} (p={p:.2g})"


def _settle_note(diff: float, half: float, threshold: float, n_head: int, n_base: int) -> str:
    """How many repeats a side would settle an inconclusive interval, from a spread measured with enough repeats."""
    if n_head + n_base - 2 < 4:
        return f"inconclusive with {min(n_head, n_base)} repeats a side; too few to estimate how many would settle it"
    low, high = math.expm1(diff - half), math.expm1(diff + half)
    needed = repeats_to_settle(low, high, threshold=threshold, repeats=(n_head, n_base))
    now = min(n_head, n_base)
    if needed is None:
        return f"inconclusive with {now} repeats a side: the change sits on the {threshold:.0%} threshold"
    return f"inconclusive with {now} repeats a side: about {needed} a side would settle it (--repeats {needed})"


def pair_units(report: ReportDocument) -> dict[tuple[str, str], tuple[list[RepeatUnit], list[RepeatUnit]]]:
    """Per compared (backend, layout): the candidate's and the reference's repeat units."""
    sides = report.side_pair()
    if sides.reference is None:
        return {}
    cells = {(c.side, c.backend, c.layout): c for c in report.cells}
    out = {}
    for backend, layout in sorted({(c.backend, c.layout) for c in report.cells}):
        head = cells.get((sides.candidate.name, backend, layout))
        base = cells.get((sides.reference.name, backend, layout))
        if head is not None and base is not None:
            out[(backend, layout)] = (_units(head), _units(base))
    return out


def _units(cell: CellModel) -> list[RepeatUnit]:
    repeats = [r.repeat for r in cell.steady_state.repeats] or list(range(len(cell.samples.get(METRIC, []))))
    units = [repeat_unit(number, steps) for number, steps in zip(repeats, cell.samples.get(METRIC, []), strict=False)]
    return [u for u in units if u is not None]


def read_looks(run_dir: Path) -> list[Look]:
    """The looks a sequential run took (LOOKS_FILE); empty for a run judged once."""
    path = Path(run_dir) / LOOKS_FILE
    if not path.is_file():
        return []
    try:
        return [Look(**entry) for entry in json.loads(path.read_text(encoding="utf-8"))["looks"]]
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{path}: not a looks file written by the runner ({exc})") from None


def next_alpha(looks: list[Look], *, final: bool) -> float:
    """The one-sided alpha of the next look: ALPHA_INTERIM while the run can go on, the rest at the last look."""
    spent = sum(x.alpha for x in looks)
    return max(ALPHA_STEP_TIME - spent, 0.0) if final else min(ALPHA_INTERIM, max(ALPHA_STEP_TIME - spent, 0.0))


def next_look(
    head: list[RepeatUnit], base: list[RepeatUnit], looks: list[Look], *, round_number: int, last_round: bool
) -> Look:
    """The look after a round of a sequential run (the runner's and the validation's one rule): alpha from the looks
    before it, the rest of it when no round can follow."""
    return look(head, base, round_number=round_number, alpha=next_alpha(looks, final=last_round), final=last_round)


def final_look(head: list[RepeatUnit], base: list[RepeatUnit], looks: list[Look]) -> Look:
    """What `run.py ab` decides on a finished run: the runner's last look again when the run stopped there, else one
    final look at what is left of the error (an interrupted run, or one judged once)."""
    last = looks[-1] if looks and looks[-1].stops else None
    alpha = last.alpha if last and last.alpha > 0 else next_alpha(looks[:-1] if last else looks, final=True)
    rounds = min(len(head), len(base))
    return look(
        head, base, round_number=last.round if last else rounds, alpha=alpha, final=last.final if last else True
    )


class RunFolderLooks:
    """A sequential run's looks (runner/rounds.py `PairLooks`): after each round the folder is analysed as `run.py
    report` analyses it, the pair's units looked at (`next_look`), the look appended to LOOKS_FILE."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.looks = read_looks(self.run_dir)

    def decided_round(self) -> int | None:
        return next((x.round for x in self.looks if x.stops), None)

    def look(self, round_number: int, last_round: bool) -> tuple[bool, str]:
        from scripts.benchmark.analysis.document import analyse_run_folder
        from scripts.benchmark.analysis.settings import AnalysisSettings

        from miles.utils.bench_metrics import write_text_atomic

        pairs = pair_units(analyse_run_folder(self.run_dir, AnalysisSettings(reps=200)))
        head, base = next(iter(pairs.values())) if pairs else ([], [])
        decided = next_look(head, base, self.looks, round_number=round_number, last_round=last_round)
        self.looks.append(decided)
        document = json.dumps({"looks": [asdict(x) for x in self.looks]}, indent=1) + "\n"
        write_text_atomic(self.run_dir / LOOKS_FILE, document)
        return decided.stops, look_line(decided)


def look_line(decided: Look) -> str:
    """The runner's progress line for one look."""
    what = decided.decision.lower().replace("_", " ")
    if decided.ratio is None:
        return f"round {decided.round}: {what} ({decided.note})"
    interval = f"[{decided.ci_low:.3f}, {decided.ci_high:.3f}]"
    final = ", final look" if decided.final else ""
    return (
        f"round {decided.round}: head/base {decided.ratio:.3f} {interval}, {what} (alpha {decided.alpha:.2%}{final})"
    )


_VERDICTS = {
    "REGRESSED": Verdict.REGRESSED,
    "IMPROVED": Verdict.IMPROVED,
    "NO_DIFFERENCE": Verdict.UNCHANGED,
    "INCONCLUSIVE": Verdict.UNCHANGED,
    "COULD_NOT_JUDGE": Verdict.ERROR,
    "CONTINUE": Verdict.ERROR,
}


def look_check(pair: str, decided: Look) -> MetricCheck:
    """A look as the regression check's table row (history/check.py), so `ab` reads like `check`."""
    notes = {
        "NO_DIFFERENCE": f"no practical difference (95% interval inside +-{THRESHOLD:.0%})",
        "CONTINUE": "could not judge: the run stopped before its last look",
        "COULD_NOT_JUDGE": "could not judge",
    }
    note = "; ".join(x for x in (notes.get(decided.decision, ""), decided.note) if x)
    if decided.disturbed:
        shown = ", ".join(f"{d['side']} repeat {d['repeat']} {d['change']:+.0%}" for d in decided.disturbed)
        note = f"{note}; left out as disturbed: {shown}" if note else f"left out as disturbed: {shown}"
    known = decided.ratio is not None
    return MetricCheck(
        cell_id=pair,
        metric=METRIC,
        verdict=_VERDICTS[decided.decision],
        baseline=decided.reference_s,
        candidate=decided.candidate_s,
        change=decided.ratio - 1 if known else None,
        ci_low=decided.ci_low - 1 if known else None,
        ci_high=decided.ci_high - 1 if known else None,
        p_value=decided.p_value,
        n_baseline=decided.repeats.get("reference", 0),
        threshold=THRESHOLD,
        note=note,
    )


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
