"""Do the two sides (e.g. Miles and VERL) learn the same? Per pair and learning signal: same, different, or not
enough steps to tell, over the steady window.

- Paired by step: both sides see the same prompts in the same order, so d_s = candidate_s - reference_s (absolute
  margin) or log(candidate_s / reference_s) (relative margin) cancels prompt difficulty and the common learning
  trend.
  With repeats, each side's value of a step is the mean over its repeats first.
- A trend (a line, bent at the thirds from 60 steps on) is fitted to d; the noise around it is modelled as AR(1)
  (two policies drift apart slowly) with what the fit absorbed put back (`serial_noise`), and a t quantile on
  what the steps are worth for a variance. Two quantities are tested: the window mean of d and its mean over the
  last third, so a divergence that grows is called at its size at the end, not averaged away. A signal whose two
  levels are not comparable (entropy under different aggregations) is judged on its drift alone: last third minus
  first third.
- Three words (TOST): "same" when every 1 - 2 alpha interval lies inside (-margin, +margin); "different" when one
  1 - 2 alpha/k interval (k: judged signals x quantities, Bonferroni) lies beyond one margin; "not enough steps to
  tell" otherwise, with the paired steps that would tell at the observed noise. "not judged" says why.
- With repeats, each side's value of a step is the mean over its repeats first; where both sides have two or more,
  each quantity's error is the spread of the per-repeat quantities (pooled t, each repeat one unit): run-to-run
  variation is in the interval, and "not enough" names the repeats that would tell. With one repeat a side there
  is no verdict (`MIN_REPEATS`): the step noise model cannot see a run's own drift; the row keeps its interval.
- Window: from the later steady-state start of the two cells (the steps whose speed the report compares), or the
  spec's `learning.from_step`.
- `length_explains`: how much of the generate-time gap longer responses explain (generate seconds per response
  token, candidate/reference, beside the response-length ratio).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import special
from scripts.benchmark.analysis import learning_power, serial_noise
from scripts.benchmark.analysis.folder_reader import Cell
from scripts.benchmark.contracts.report import DIFFERENT, NOT_JUDGED, SAME, UNSETTLED
from scripts.benchmark.contracts.sides import SidePair
from scripts.benchmark.spec.learning import LearningSpec

from miles.utils.bench_metrics import LEARNING_SIGNALS

MIN_PAIRED_STEPS = 6
MIN_REPEATS = 2
"""Repeats a side a verdict needs: with one, a run's own drift (seeds drift apart) cannot be told from a difference
(one-repeat 90% intervals covered 64% of A/A pairs at 21 steps under slow drift)."""
LEVEL_NOT_COMPARABLE = ("entropy",)
"""Signals whose two levels may measure different things (not_comparable_reason): then only their drift is judged."""
MIN_GENERATE_GAP = 0.02
"""Below this generate-time gap (2%) the share longer responses explain is noise over noise: not computed."""
MIN_BENT_STEPS = 60
"""Below this the trend is a straight line: bends at the thirds of a shorter window absorb slowly drifting noise
until its drift can no longer be estimated (24 steps: the AR(1) coefficient came out at its cap in 15% of windows)."""
QUANTITY_WORDS = {"level": "window mean", "late": "last third", "drift": "change from first to last third"}


def _spec_section(plan: dict[str, Any] | None, key: str) -> dict[str, Any]:
    section = ((plan or {}).get("spec") or {}).get(key)
    return section if isinstance(section, dict) else {}


def learning_settings(plan: dict[str, Any] | None) -> LearningSpec:
    return LearningSpec.model_validate(_spec_section(plan, "learning"))


def learning_margins(plan: dict[str, Any] | None) -> dict[str, float | None]:
    """Per signal, the margin this plan's spec judges with (its `learning.margins`, else the default)."""
    settings = learning_settings(plan)
    return {name: settings.margin(name) for name in LEARNING_SIGNALS}


def optimizer_steps_per_step(plan: dict[str, Any] | None) -> int | None:
    batch = _spec_section(plan, "batch")
    try:
        return batch["prompts_per_step"] * batch["samples_per_prompt"] // batch["samples_per_optimizer_step"]
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def not_comparable_reason(name: str, plan: dict[str, Any] | None, *, same_framework: bool = False) -> str | None:
    """Why a signal's two series measure different things under this spec (docs/benchmark/metrics.md); two sides of
    one framework aggregate every signal the same way."""
    if name == "entropy" and not same_framework:
        aggregation = _spec_section(plan, "grpo").get("loss_aggregation", "token-mean")
        if aggregation != "seq-mean-token-mean":
            return f"aggregations differ under {aggregation}: VERL token mean, Miles mean of per-sample means"
    if name in ("clip_fraction", "approx_kl") and optimizer_steps_per_step(plan) == 1:
        return "one optimizer step per step: ~0 on both sides by construction"
    return None


def step_means(cell: Cell, name: str, from_step: int) -> dict[int, float]:
    """Step -> mean over the cell's repeats of the signal's finite values, from `from_step` on (vectorised: a
    10,000-step run has 10,000 steps per signal)."""
    pairs = [_column(repeat, f"learning.{name}") for repeat in cell.repeats]
    if not pairs:
        return {}
    steps = np.concatenate([s for s, _ in pairs]).astype(np.int64)
    values = np.concatenate([v for _, v in pairs]).astype(float)
    keep = (steps >= from_step) & np.isfinite(values)
    unique, index = np.unique(steps[keep], return_inverse=True)
    means = np.bincount(index, weights=values[keep], minlength=len(unique)) / np.bincount(index, minlength=len(unique))
    return dict(zip(unique.tolist(), means.tolist(), strict=True))


def repeat_series(cell: Cell, name: str, from_step: int) -> list[dict[int, float]]:
    """Per repeat, step -> the signal's finite value from `from_step` on."""
    out = []
    for repeat in cell.repeats:
        steps, values = _column(repeat, f"learning.{name}")
        keep = (steps >= from_step) & np.isfinite(values)
        out.append(dict(zip(steps[keep].astype(int).tolist(), values[keep].astype(float).tolist(), strict=True)))
    return out


def _column(repeat, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one column of a repeat; NaN where the step has no finite value or the column is absent."""
    columns = repeat.columns
    values = columns.values.get(name)
    return columns.steps, (np.full(len(columns), np.nan) if values is None else values)


def paired_differences(
    candidate: dict[int, float], reference: dict[int, float], kind: str, level_from: float = 0.0
) -> tuple[list[int], np.ndarray]:
    """Steps both sides logged and d per step; relative: the log ratio of the levels measured from `level_from`."""
    c, r = candidate, reference
    if kind == "relative":
        steps = [s for s in c if s in r and c[s] > level_from and r[s] > level_from]
        return steps, np.asarray([math.log((c[s] - level_from) / (r[s] - level_from)) for s in steps])
    steps = [s for s in c if s in r]
    return steps, np.asarray([c[s] - r[s] for s in steps])


def quantities(d: np.ndarray, steps: np.ndarray, *, drift_only: bool = False) -> dict[str, tuple[float, float, float]]:
    """Name -> (estimate, standard error, degrees of freedom) of what the verdict tests.

    The noise is the residual around a trend fitted to d (`_trend_design`), modelled as AR(1) with the fit's
    absorption undone (`serial_noise`): a divergence that grows, taken as noise, would leave a wide interval, and
    a fit that absorbs slow noise would leave a narrow one. `level`: the window mean of d; `late`: the mean over the
    last third (where a growing divergence is largest); `drift` (last minus first third): the change of d alone,
    for signals whose levels are not comparable. Degrees of freedom: what the steps are worth for a variance, less
    the fitted parameters."""
    design = _trend_design(steps.astype(float))
    coefficients, *_ = np.linalg.lstsq(design, d, rcond=None)
    phi, variance = serial_noise.fit_ar1(d - design @ coefficients, design)
    n = len(d)
    df = max(1.0, serial_noise.variance_degrees(phi, design))
    third = max(1, n // 3)
    early, late = np.zeros(n), np.zeros(n)
    early[:third], late[-third:] = 1 / third, 1 / third
    if drift_only:
        error = serial_noise.mean_errors(phi, variance, (late - early)[:, None])[0]
        return {"drift": (float(d[-third:].mean() - d[:third].mean()), float(error), df)}
    errors = serial_noise.mean_errors(phi, variance, np.column_stack([np.full(n, 1 / n), late]))
    return {"level": (float(d.mean()), float(errors[0]), df), "late": (float(d[-third:].mean()), float(errors[1]), df)}


def _trend_design(t: np.ndarray) -> np.ndarray:
    """A straight line; from MIN_BENT_STEPS on, a continuous line bent at the window's thirds (a trend that starts
    mid-window fits too)."""
    knots = np.quantile(t, [1 / 3, 2 / 3]) if len(t) >= MIN_BENT_STEPS else np.zeros(0)
    return np.column_stack([np.ones_like(t), t - t.mean(), *[np.maximum(0.0, t - k) for k in knots]])


def _interval(estimate: float, error: float, df: float, level: float) -> tuple[float, float]:
    half = float(special.stdtrit(df, 0.5 + level / 2)) * error
    return estimate - half, estimate + half


def steps_to_tell(n: int, error: float, df: float, estimate: float, bound: float, alpha: float) -> int | None:
    """Paired steps at which the observed noise would settle the call (the interval's half-width down to the
    estimate's distance from the margin, shrinking as 1/sqrt(steps)); None when the estimate sits on the margin."""
    distance = abs(abs(estimate) - bound)
    half = float(special.stdtrit(df, 1 - alpha)) * error
    if distance <= 1e-12 * max(1.0, bound):
        return None
    return max(n + 1, math.ceil(n * (half / distance) ** 2))


def equivalence_test(
    d: np.ndarray,
    bound: float,
    *,
    alpha: float,
    family: int,
    steps: np.ndarray | None = None,
    drift_only: bool = False,
    between: dict[str, tuple[float, float, int]] | None = None,
) -> dict[str, Any]:
    """The three-way call (module docstring) on every quantity of `quantities`: "same" when each 1 - 2 alpha
    interval lies inside (-bound, bound); "different" when one 1 - 2 alpha/k interval lies beyond it (k: the
    judged signals times the quantities, Bonferroni); otherwise not enough steps (or repeats), with how many would
    tell. `between` (`between_repeats`): a quantity's error from the spread between repeats, used in place of the
    step noise model's: model-free, run-to-run variation in it, and it shrinks with repeats where the model's does
    not (a plant the trend cannot fit reads as slow noise, and more repeats only make that misfit stand out)."""
    if len(d) < MIN_PAIRED_STEPS:
        why = f"only {len(d)} paired steps"
        return {"verdict": UNSETTLED, "why": why, "difference": None, "steps_needed": MIN_PAIRED_STEPS}
    steps = np.arange(len(d)) if steps is None else np.asarray(steps)
    tested = quantities(d, steps, drift_only=drift_only)
    k = max(1, family) * len(tested)
    calls, needed = {}, []
    for name, (estimate, error, df) in tested.items():
        count, unit, step_error = len(d), "paired steps", error
        if between and name in between:
            error, df, count = between[name]
            unit = "repeats a side"
        low, high = _interval(estimate, error, df, 1 - 2 * alpha)
        wide_low, wide_high = _interval(estimate, error, df, 1 - 2 * alpha / k)
        calls[name] = {"estimate": estimate, "ci_low": low, "ci_high": high, "step_error": step_error}
        calls[name]["call"] = (
            SAME
            if -bound < low and high < bound
            else DIFFERENT if wide_low > bound or wide_high < -bound else UNSETTLED
        )
        if calls[name]["call"] == UNSETTLED:
            needed.append((steps_to_tell(count, error, df, estimate, bound, alpha / k), unit))
    return _combine(calls, needed, len(d))


def _combine(calls: dict[str, dict], needed: list[tuple[int | None, str]], n: int) -> dict[str, Any]:
    """One verdict from the quantities' calls: any "different" wins, "same" needs every one."""
    verdicts = {c["call"] for c in calls.values()}
    shown = calls.get("level") or calls["drift"]
    result = {"difference": shown["estimate"], "ci_low": shown["ci_low"], "ci_high": shown["ci_high"]}
    result["tested"] = calls
    if DIFFERENT in verdicts:
        name = next(q for q, c in calls.items() if c["call"] == DIFFERENT)
        return {**result, "verdict": DIFFERENT, "why": f"{QUANTITY_WORDS[name]} beyond the margin"}
    if verdicts == {SAME}:
        return {**result, "verdict": SAME, "why": f"every interval inside the margin over {n} steps"}
    if any(count is None for count, _ in needed):
        return {**result, "verdict": UNSETTLED, "why": "the difference sits on the margin", "steps_needed": None}
    count, unit = max(needed)
    why = f"{n} steps; about {count} {unit} would tell"
    by_steps = unit == "paired steps"
    return {
        **result,
        "verdict": UNSETTLED,
        "why": why,
        "steps_needed": count if by_steps else None,
        "repeats_needed": None if by_steps else count,
    }


def _repeat_quantities(
    series: dict[int, float], steps: list[int], kind: str, drift_only: bool, level_from: float = 0.0
) -> dict[str, float]:
    """One repeat's own level, last third and drift over the paired steps (log scale for relative signals)."""
    x = np.asarray(
        [series[s] for s in steps if s in series and (kind == "absolute" or series[s] > level_from)], dtype=float
    )
    x = np.log(x - level_from) if kind == "relative" else x
    third = max(1, len(x) // 3)
    late, early = float(x[-third:].mean()), float(x[:third].mean())
    return {"drift": late - early} if drift_only else {"level": float(x.mean()), "late": late}


def between_repeats(
    candidate: list[dict[int, float]],
    reference: list[dict[int, float]],
    steps: list[int],
    kind: str,
    drift_only: bool,
    level_from: float = 0.0,
) -> dict[str, tuple[float, float, int]]:
    """Name -> (standard error, degrees of freedom, repeats a side) of each quantity from the spread between
    repeats (pooled over both sides, Student t): run-to-run variation, which the step-paired noise of the repeat
    means leaves out. Empty unless both sides have at least two repeats with steps."""
    sides = [[r for r in side if any(s in r for s in steps)] for side in (candidate, reference)]
    if min(len(side) for side in sides) < 2 or len(steps) < MIN_PAIRED_STEPS:
        return {}
    values = [[_repeat_quantities(r, steps, kind, drift_only, level_from) for r in side] for side in sides]
    out = {}
    for name in values[0][0]:
        c, r = (np.asarray([q[name] for q in side]) for side in values)
        df = len(c) + len(r) - 2
        pooled = (float(np.sum((c - c.mean()) ** 2)) + float(np.sum((r - r.mean()) ** 2))) / df
        out[name] = (math.sqrt(pooled * (1 / len(c) + 1 / len(r))), float(df), min(len(c), len(r)))
    return out


def _shown(value: float | None, kind: str) -> float | None:
    """A log-ratio difference as the relative difference candidate/reference - 1; absolute ones as they are."""
    return None if value is None else (math.expm1(value) if kind == "relative" else value)


def _judge(
    d: np.ndarray, steps: list[int], bound: float, kind: str, settings: LearningSpec, family: int, **kw
) -> dict:
    result = equivalence_test(d, bound, alpha=settings.alpha, family=family, steps=np.asarray(steps), **kw)
    for key in ("difference", "ci_low", "ci_high"):
        result[key] = _shown(result.get(key), kind)
    for call in result.get("tested", {}).values():
        for key in ("estimate", "ci_low", "ci_high"):
            call[key] = _shown(call[key], kind)
    return result


def signal_row(
    name: str,
    candidate: dict[int, float],
    reference: dict[int, float],
    plan: dict[str, Any] | None,
    *,
    family: int,
    labels: tuple[str, str] = ("candidate", "reference"),
    same_framework: bool = False,
    repeats: tuple[list[dict[int, float]], list[dict[int, float]]] = ([], []),
) -> dict[str, Any]:
    """One signal of one pair: both sides' window means, the paired difference with its interval, the verdict;
    `labels` name the two sides in the verdict's reason; `repeats` (each side's per-repeat series) put run-to-run
    variation in the intervals where both sides have several."""
    spec, settings = LEARNING_SIGNALS[name], learning_settings(plan)
    margin = settings.margin(name)
    steps, d = paired_differences(candidate, reference, spec.margin_kind, spec.level_from)
    counts = [max(1, sum(1 for r in side if r)) for side in repeats]
    row: dict[str, Any] = {
        "signal": name,
        "unit": spec.unit,
        "margin_kind": spec.margin_kind,
        "margin": margin,
        "candidate": float(np.mean([candidate[s] for s in steps])) if steps else None,
        "reference": float(np.mean([reference[s] for s in steps])) if steps else None,
        "paired_steps": len(steps),
        "difference": None,
        "ci_low": None,
        "ci_high": None,
        "repeats": counts,
    }
    missing = [label for label, series in zip(labels, (candidate, reference), strict=True) if not series]
    reason = not_comparable_reason(name, plan, same_framework=same_framework)
    if missing:
        return {**row, "verdict": NOT_JUDGED, "why": f"not logged by {' and '.join(missing)}"}
    if margin is None:
        return {**row, "verdict": NOT_JUDGED, "why": "plotted only: no margin"}
    drift_only = name in LEVEL_NOT_COMPARABLE and reason is not None
    if reason is not None and not drift_only:
        return {**row, "verdict": NOT_JUDGED, "why": reason}
    bound = math.log1p(margin) if spec.margin_kind == "relative" else margin
    between = between_repeats(*repeats, steps, spec.margin_kind, drift_only, spec.level_from)
    row.update(_judge(d, steps, bound, spec.margin_kind, settings, family, drift_only=drift_only, between=between))
    spreads = learning_power.run_spreads(name, between, row.get("tested", {}), counts)
    row["power"] = learning_power.power_statement(
        name,
        len(steps),
        margin,
        spreads,
        alpha=settings.alpha,
        family=family,
        repeats=min(counts),
        drift_only=drift_only,
    )
    if min(counts) < MIN_REPEATS and row["verdict"] in (SAME, DIFFERENT, UNSETTLED):
        row.update(verdict=UNSETTLED, why=one_repeat_reason(row["power"]), steps_needed=None)
    if drift_only:
        row["why"] += f" (levels not compared: {reason})"
    return row


def one_repeat_reason(power: dict[str, Any] | None) -> str:
    """Why a side with one repeat gets no verdict, and what would give one."""
    needs = "at least 2 repeats a side give a verdict"
    if power is not None:
        count = power["repeats_needed"]
        needs += f"; {f'about {count}' if count else f'more than {learning_power.MAX_REPEATS}'} see "
        needs += f"{power['planted']} 9 times in 10"
    return f"one repeat a side: a run's own drift is not in the interval, which covers these two runs only; {needs}"


def _window_mean(cell: Cell, from_step: int, value) -> float | None:
    """Mean over the window of `value(repeat)`, a column of each repeat (NaN where a step has no value)."""
    parts = [value(rep)[rep.columns.steps >= from_step] for rep in cell.repeats]
    finite = np.concatenate(parts)[np.isfinite(np.concatenate(parts))] if parts else np.zeros(0)
    return float(np.mean(finite)) if len(finite) else None


def length_explains(candidate: Cell, reference: Cell, from_step: int) -> dict[str, float | None]:
    """Generate-time ratio, response-length ratio and generate seconds per response token ratio
    (candidate/reference).

    generate ratio = per-token ratio x token ratio; the share of log(generate ratio) that log(length ratio) makes
    up is the part of the generate gap longer (or shorter) responses explain, the rest is per-token speed."""

    def per_token(rep) -> np.ndarray:
        generate, tokens = _column(rep, "phases_s.generate")[1], _column(rep, "tokens.response")[1]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(tokens > 0, generate / tokens, np.nan)

    def ratio(value) -> float | None:
        m, v = _window_mean(candidate, from_step, value), _window_mean(reference, from_step, value)
        return m / v if m is not None and v and m > 0 and v > 0 else None

    generate = ratio(lambda rep: _column(rep, "phases_s.generate")[1])
    length = ratio(lambda rep: _column(rep, "learning.response_length_mean")[1])
    share = None
    if generate is not None and length is not None and abs(math.log(generate)) >= math.log1p(MIN_GENERATE_GAP):
        share = math.log(length) / math.log(generate)
    return {"generate_ratio": generate, "length_ratio": length, "per_token_ratio": ratio(per_token), "share": share}


def _from_step(entries: list[dict[str, Any]], settings: LearningSpec, steps: list[int]) -> int:
    if settings.from_step is not None:
        return settings.from_step
    starts = [e["steady_state"]["start_step"] for e in entries if e["steady_state"]["start_step"] is not None]
    return max(starts) if starts else min(steps, default=0)


def cell_learning(cell: Cell, from_step: int) -> dict[str, dict[str, Any]]:
    """Per signal, the cell's steady-window value as the history stores it: the median over repeats of each
    repeat's mean (one odd repeat cannot move it), with the repeat means."""
    out = {}
    for name, spec in LEARNING_SIGNALS.items():
        repeat_means = []
        for repeat in cell.repeats:
            steps, column = _column(repeat, f"learning.{name}")
            finite = column[(steps >= from_step) & np.isfinite(column)]
            if len(finite):
                repeat_means.append(float(np.mean(finite)))
        value = float(np.median(repeat_means)) if repeat_means else None
        out[name] = {"value": value, "repeat_values": repeat_means, "unit": spec.unit}
    return out


def analyse_learning(
    cells: list[Cell], entries: list[dict[str, Any]], plan: dict[str, Any] | None, sides: SidePair, *, seed: int = 0
) -> list[dict[str, Any]]:
    """One entry per candidate/reference pair: window, per-signal rows, trajectories, and the length share of the
    gap.

    Also sets each cell entry's `learning`: its per-signal values over its own steady window (`cell_learning`)."""
    settings = learning_settings(plan)
    by_key = {(c.side, c.backend, c.layout): c for c in cells}
    entry_by_id = {e["id"]: e for e in entries}
    for cell in cells:
        entry = entry_by_id[cell.id]
        entry["learning"] = cell_learning(cell, settings.from_step or entry["steady_state"]["start_step"] or 0)
    if sides.reference is None:
        return []
    labels = (sides.candidate.label, sides.reference.label)
    same = sides.candidate.framework == sides.reference.framework
    out = []
    for backend, layout in sorted({(c.backend, c.layout) for c in cells}):
        candidate = by_key.get((sides.candidate.name, backend, layout))
        reference = by_key.get((sides.reference.name, backend, layout))
        if candidate is None or reference is None:
            continue
        all_steps = [int(s) for c in (candidate, reference) for rep in c.repeats for s in rep.columns.steps]
        from_step = _from_step([entry_by_id[c.id] for c in (candidate, reference)], settings, all_steps)
        series = {n: (step_means(candidate, n, 0), step_means(reference, n, 0)) for n in LEARNING_SIGNALS}
        family = sum(1 for n in LEARNING_SIGNALS if settings.margin(n) is not None)
        rows = [
            signal_row(
                n,
                _after(m, from_step),
                _after(v, from_step),
                plan,
                family=family,
                labels=labels,
                same_framework=same,
                repeats=(repeat_series(candidate, n, from_step), repeat_series(reference, n, from_step)),
            )
            for n, (m, v) in series.items()
        ]
        out.append(
            {
                "backend": backend,
                "layout": layout,
                "candidate_cell": candidate.id,
                "reference_cell": reference.id,
                "from_step": from_step,
                "alpha": settings.alpha,
                "available": any(m or v for m, v in series.values()),
                "signals": rows,
                "series": {n: {"candidate": _points(m), "reference": _points(v)} for n, (m, v) in series.items()},
                "length_explains": length_explains(candidate, reference, from_step),
            }
        )
    return out


def _after(series: dict[int, float], from_step: int) -> dict[int, float]:
    return {step: value for step, value in series.items() if step >= from_step}


def _points(series: dict[int, float]) -> dict[str, list]:
    return {"steps": list(series), "values": list(series.values())}
