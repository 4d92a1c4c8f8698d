"""A candidate side against a reference side (e.g. Miles vs VERL) for one backend and layout: ratios with
intervals, and the step-time gap by phase.

- Input per side: `SideSamples`, one matrix per repeat (steady-state steps x metrics, NaN where missing).
- `compare_sides` returns one `ComparisonModel` per metric (ratio candidate/reference of means, harmonic means for
  rates (the registry's `average`), as Hoefler & Belli's rule 3 asks, with its practical verdict) and one
  `AttributionModel` per phase (seconds of the step-time gap it explains); both are report.json's own rows.
- Uncertainty, by where the variance is:
  - both sides with 2+ repeats (the default, 3 interleaved repeats): each repeat's mean is one unit; Welch's t over
    the repeats (intervals.welch_ratio), so run-to-run variation is in the interval;
  - a side with one repeat: a circular block bootstrap of the steps (intervals.block_bootstrap_means), widened by
    `small_sample_factor`; it sees step-to-step noise only, never run-to-run variation, and the method says so.
- Family: the step-time family (step time, then the throughputs computed from the same steps, `STEP_TIME_FAMILY`)
  is tested in a fixed sequence with `family_wise`: a member is called significant only if its interval excludes 1
  and every member before it is significant too. That keeps the family's chance of any false claim at
  1 - confidence without widening an interval (a Bonferroni over 15 metrics made them 3x too wide to see a 5% gap).
  The other metrics (phases, per-token costs, wait ratio, response length) are per-metric diagnostics of where a
  gap goes, read once the step time says there is one. Significant = the interval excludes 1 (a gap: excludes 0).
- `refusal_reason(...)` says why two cells must not be compared (unexplained parity rows, different hardware).

Caveats:
- A metric with no finite value on either side gives a comparison of nulls with the reason in `method`.
- The attribution is additive in means, not in medians: phase gaps plus the unattributed rest equal the step gap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scripts.benchmark.analysis import intervals
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.analysis.verdict import practical_verdict
from scripts.benchmark.contracts.report import DEFAULT_PRACTICAL_THRESHOLD, AttributionModel, ComparisonModel
from scripts.benchmark.contracts.sides import Side

from miles.utils.bench_metrics import METRICS, STEP_TIME_FAMILY

RATE_METRICS = frozenset(name for name, m in METRICS.items() if m.average == "harmonic")
"""Rates are averaged harmonically (the rate of the total work over the total time), costs arithmetically."""


@dataclass(frozen=True, kw_only=True)
class SideSamples:
    metrics: tuple[str, ...]
    repeats: tuple[np.ndarray, ...]
    """One (steps x metrics) float matrix per repeat, steady-state steps only, NaN where a value is missing."""
    reference_metric: str = "step_time_s"
    """The series whose autocorrelation sets the block length."""


@dataclass(frozen=True, kw_only=True)
class PairKey:
    """The pair being compared: where (backend, layout), which cells, and the two sides (names and labels)."""

    backend: str
    layout: str
    candidate: Side
    reference: Side
    candidate_cell: str
    reference_cell: str

    def where(self) -> dict[str, str]:
        return {
            "backend": self.backend,
            "layout": self.layout,
            "candidate_cell": self.candidate_cell,
            "reference_cell": self.reference_cell,
        }

    def missing(self, candidate: float, reference: float) -> str:
        """The side names whose value is not finite, joined by "and"."""
        pairs = ((self.candidate.name, candidate), (self.reference.name, reference))
        return " and ".join(name for name, x in pairs if not math.isfinite(x))


@dataclass(frozen=True, kw_only=True)
class _Intervals:
    """Ratio intervals of every metric and a gap interval for any linear combination of the metrics."""

    low: np.ndarray
    high: np.ndarray
    p: np.ndarray
    gap: Callable[[np.ndarray, float], tuple[float | None, float | None]]
    method: str


def _repeat_units(side: SideSamples, harmonic: np.ndarray) -> np.ndarray:
    """(repeats x metrics): each repeat's (harmonic) mean over its steady steps; repeats without steps left out."""
    rows = [intervals.column_means(m, harmonic) for m in side.repeats if len(m)]
    return np.vstack(rows) if rows else np.full((0, len(harmonic)), np.nan)


def _side_statistic(units: np.ndarray) -> np.ndarray:
    """Statistic of a side = mean over its repeats of each repeat's (harmonic) mean; repeats weigh equally."""
    if not len(units):
        return np.full(units.shape[1], np.nan)
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(units)
        return np.where(finite.any(axis=0), np.nansum(units, axis=0) / np.maximum(finite.sum(axis=0), 1), np.nan)


def _welch_intervals(units_m: np.ndarray, units_v: np.ndarray, levels: np.ndarray, pair: PairKey) -> _Intervals:
    low, high, p = intervals.welch_ratio(units_m, units_v, levels)

    def gap(weights: np.ndarray, level: float) -> tuple[float | None, float | None]:
        a, b = np.nan_to_num(units_m) @ weights, np.nan_to_num(units_v) @ weights
        result = intervals.welch_difference(a, b, level)
        return (None, None) if not all(math.isfinite(x) for x in result) else result

    counts = f"{len(units_m)} {pair.candidate.label}, {len(units_v)} {pair.reference.label}"
    method = f"Welch t over the repeats ({counts}; run-to-run variation included)"
    return _Intervals(low=low, high=high, p=p, gap=gap, method=method)


def _bootstrap_side(side: SideSamples, harmonic: np.ndarray, settings: AnalysisSettings, rng) -> tuple:
    """(reps x metrics) bootstrap distribution of a side's statistic and its number of blocks."""
    ref = side.metrics.index(side.reference_metric) if side.reference_metric in side.metrics else 0
    draws, blocks = [], 0.0
    for matrix in (m for m in side.repeats if len(m)):
        length = intervals.block_length(matrix[:, ref])
        blocks += len(matrix) / length
        draws.append(intervals.block_bootstrap_means(matrix, harmonic, settings.reps, rng, length))
    if not draws:
        return np.full((settings.reps, len(harmonic)), np.nan), 1.0
    return np.nanmean(np.stack(draws), axis=0) if len(draws) > 1 else draws[0], blocks


def _bootstrap_intervals(
    candidate, reference, harmonic, point_m, point_v, levels, settings: AnalysisSettings
) -> _Intervals:
    rng = np.random.default_rng(settings.seed)
    boot_m, blocks_m = _bootstrap_side(candidate, harmonic, settings, rng)
    boot_v, blocks_v = _bootstrap_side(reference, harmonic, settings, rng)
    widen = intervals.small_sample_factor(min(blocks_m, blocks_v), 1, float(levels.max()))
    boot_m = point_m + widen * (boot_m - point_m)
    boot_v = point_v + widen * (boot_v - point_v)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = boot_m / boot_v
    bounds = [intervals.percentile_ci(ratio[:, i], float(levels[i])) for i in range(len(levels))]
    low = np.asarray([np.nan if b[0] is None else b[0] for b in bounds])
    high = np.asarray([np.nan if b[1] is None else b[1] for b in bounds])
    p = np.asarray([intervals.bootstrap_p_value(ratio[:, i], 1.0) or np.nan for i in range(len(levels))])

    def gap(weights: np.ndarray, level: float) -> tuple[float | None, float | None]:
        return intervals.percentile_ci(np.nan_to_num(boot_m) @ weights - np.nan_to_num(boot_v) @ weights, level)

    method = (
        f"circular block bootstrap within one run ({settings.reps} resamples, spread widened x{widen:.2f} for "
        f"{min(blocks_m, blocks_v):.0f} blocks); one repeat: run-to-run variation NOT included, run 3+ repeats"
    )
    return _Intervals(low=low, high=high, p=p, gap=gap, method=method)


def _fixed_sequence(rows: list[ComparisonModel]) -> list[ComparisonModel]:
    """Fixed-sequence test of the step-time family: each member is claimed only if every member before it in
    `STEP_TIME_FAMILY` order is (Maurer et al. 1995); the family's error rate stays at 1 - confidence and no
    interval is widened."""
    by_name = {r.metric: r for r in rows}
    open_gate = True
    for name in STEP_TIME_FAMILY:
        row = by_name.get(name)
        if row is None or row.ratio is None:
            continue
        if open_gate and row.significant:
            continue
        if row.significant:
            note = "; not claimed: an earlier member of the step-time family (tested in order) is not significant"
            by_name[name] = row.model_copy(update={"significant": False, "method": row.method + note})
        open_gate = False
    return [by_name[r.metric] for r in rows]


def compare_sides(
    candidate: SideSamples,
    reference: SideSamples,
    *,
    pair: PairKey,
    phases: Sequence[str],
    settings: AnalysisSettings | None = None,
    thresholds: dict[str, float] | None = None,
    incomparable: Mapping[str, str] | None = None,
) -> tuple[list[ComparisonModel], list[AttributionModel]]:
    """All metric ratios (candidate / reference, each with its practical verdict against `thresholds`) and the
    phase attribution of the step-time gap for one pair; `incomparable` phases (phase -> why) are shown, marked, and
    left out of the attribution."""
    settings = settings or AnalysisSettings()
    if candidate.metrics != reference.metrics:
        raise ValueError(f"metric columns differ: candidate {candidate.metrics} vs reference {reference.metrics}")
    metrics = candidate.metrics
    harmonic = np.asarray([m in RATE_METRICS for m in metrics])
    units_m, units_v = _repeat_units(candidate, harmonic), _repeat_units(reference, harmonic)
    point_m, point_v = _side_statistic(units_m), _side_statistic(units_v)
    levels = np.full(len(metrics), settings.confidence)
    if len(units_m) >= 2 and len(units_v) >= 2:
        found = _welch_intervals(units_m, units_v, levels, pair)
    else:
        found = _bootstrap_intervals(candidate, reference, harmonic, point_m, point_v, levels, settings)
    family = set(STEP_TIME_FAMILY) if settings.family_wise else set()
    comparisons = [
        _metric_comparison(
            pair,
            name,
            point_m[i],
            point_v[i],
            found,
            i,
            average="harmonic means" if harmonic[i] else "means",
            level_text=f"{settings.confidence:.0%} CI"
            + (" per metric (claims: step-time family, tested in order)" if name in family else ""),
        )
        for i, name in enumerate(metrics)
    ]
    if settings.family_wise:
        comparisons = _fixed_sequence(comparisons)
    comparisons = [
        _with_verdict(row, (thresholds or {}).get(row.metric, DEFAULT_PRACTICAL_THRESHOLD)) for row in comparisons
    ]
    phase_map = {phase: (incomparable or {}).get(phase) for phase in phases}
    return comparisons, _attribution(pair, metrics, phase_map, point_m, point_v, found.gap, settings.confidence)


def _with_verdict(row: ComparisonModel, threshold: float) -> ComparisonModel:
    """The ratio's interval read against the practical threshold (verdict.py), stored with the row."""
    low, high = (None, None) if row.ci_low is None else (row.ci_low - 1, row.ci_high - 1)
    verdict = practical_verdict(low, high, threshold=threshold, direction=row.direction)
    return row.model_copy(update={"threshold": threshold, "verdict": verdict})


def _row(pair: PairKey, name: str, **values) -> ComparisonModel:
    spec = METRICS[name]
    return ComparisonModel(**pair.where(), metric=name, unit=spec.unit, direction=spec.direction, **values)


def _not_compared(pair: PairKey, name: str, m: float, v: float) -> ComparisonModel | None:
    """The comparison of a metric that cannot be compared (missing on a side, or the reference at 0); None when it
    can."""
    reason = None
    if not math.isfinite(m) or not math.isfinite(v):
        # A derived metric (MFU, TFLOP/s, ...) is the harness's own number: missing means its inputs were missing.
        derived = METRICS[name].source != "record"
        reason = ("not computed for " if derived else "not reported by ") + pair.missing(m, v)
        reason += " (an input it is derived from is missing: see the step records' flags)" if derived else ""
    elif v == 0:
        reason = f"the {pair.reference.label} value is 0"
    if reason is None:
        return None
    return _row(
        pair,
        name,
        candidate=m if math.isfinite(m) else None,
        reference=v if math.isfinite(v) else None,
        ratio=None,
        ci_low=None,
        ci_high=None,
        p_value=None,
        significant=False,
        method=f"not compared: {reason}",
    )


def _metric_comparison(
    pair: PairKey, name: str, m: float, v: float, found: _Intervals, i: int, *, average: str, level_text: str
) -> ComparisonModel:
    refused = _not_compared(pair, name, m, v)
    if refused is not None:
        return refused
    low, high = float(found.low[i]), float(found.high[i])
    known = math.isfinite(low) and math.isfinite(high)
    p = float(found.p[i])
    return _row(
        pair,
        name,
        candidate=m,
        reference=v,
        ratio=m / v,
        ci_low=low if known else None,
        ci_high=high if known else None,
        p_value=p if math.isfinite(p) else None,
        significant=bool(known and (low > 1 or high < 1)),
        method=f"ratio of {average}; {level_text}; {found.method}",
    )


def _attribution(
    pair: PairKey,
    metrics: Sequence[str],
    phases: Mapping[str, str | None],
    point_m: np.ndarray,
    point_v: np.ndarray,
    gap_interval: Callable[[np.ndarray, float], tuple[float | None, float | None]],
    confidence: float,
) -> list[AttributionModel]:
    """Seconds of the mean step-time gap (candidate - reference) carried by each comparable phase, plus what no
    comparable phase explains; a phase mapped to a reason is shown with its own gap but stays in the rest."""
    step = metrics.index("step_time_s")
    step_gap = point_m[step] - point_v[step]

    def row(component: str, m: float, v: float, gap: float, weights: np.ndarray, note: str, comparable=True):
        known = math.isfinite(gap)
        low, high = gap_interval(weights, confidence) if known else (None, None)
        shared = known and comparable and math.isfinite(step_gap) and step_gap != 0
        share = gap / step_gap if shared else None
        return AttributionModel(
            **pair.where(),
            component=component,
            candidate_s=m if math.isfinite(m) else None,
            reference_s=v if math.isfinite(v) else None,
            gap_s=gap if known else None,
            ci_low=low,
            ci_high=high,
            share_of_gap=share,
            note=note,
            comparable=comparable,
        )

    def unit(i: int) -> np.ndarray:
        weights = np.zeros(len(metrics))
        weights[i] = 1.0
        return weights

    rows = [row("step_time_s", point_m[step], point_v[step], step_gap, unit(step), "the gap to explain")]
    rest = unit(step)
    explained_point = 0.0
    for phase, why in phases.items():
        i = metrics.index(f"phases_s.{phase}")
        m, v = point_m[i], point_v[i]
        if why is not None:
            note = f"not comparable: {why}; its time stays in 'unattributed'"
            rows.append(row(f"phases_s.{phase}", m, v, m - v, unit(i), note, comparable=False))
        elif math.isfinite(m) and math.isfinite(v):
            explained_point += m - v
            rest[i] = -1.0
            rows.append(row(f"phases_s.{phase}", m, v, m - v, unit(i), ""))
        else:
            note = f"not reported by {pair.missing(m, v)}; its time falls in 'unattributed'"
            rows.append(row(f"phases_s.{phase}", m, v, math.nan, unit(i), note))
    note = "step gap minus the phases reported by both frameworks (overlap, unreported phases, scheduling)"
    if any(why is not None for why in phases.values()):
        note = note.replace("the phases", "the comparable phases").replace("unreported", "unreported or incomparable")
    rows.append(row("unattributed", math.nan, math.nan, step_gap - explained_point, rest, note))
    return rows


def refusal_reason(
    *, unexplained_parity: Sequence[str], pair: PairKey, candidate_hardware: str | None, reference_hardware: str | None
) -> str | None:
    """Why a candidate/reference pair must not be compared, or None when it may be."""
    if unexplained_parity:
        absent = all(p.startswith(("no parity.json", "parity.json ")) for p in unexplained_parity)
        head = "no parity proof for this pair" if absent else "parity table has unexplained differences"
        return f"{head}: " + "; ".join(unexplained_parity)
    if candidate_hardware and reference_hardware and candidate_hardware != reference_hardware:
        return (
            f"cells ran on different hardware: {pair.candidate.name} {candidate_hardware}, "
            f"{pair.reference.name} {reference_hardware}"
        )
    return None
