"""Do the two sides (e.g. Miles and VERL) learn the same? Per pair and learning signal, an equivalence verdict over
the steady window.

- Paired by step: both sides see the same prompts in the same order, so d_s = candidate_s - reference_s (absolute
  margin) or log(candidate_s / reference_s) (relative margin) cancels prompt difficulty and the common learning
  trend.
  With repeats, each side's value of a step is the mean over its repeats first.
- The mean of d gets a circular block bootstrap interval (compare.py's block length and small-sample widening):
  d is autocorrelated, because two policies drift apart slowly.
- Three-way call (TOST): "equivalent" when the 1 - 2 alpha interval lies inside (-margin, +margin); "different"
  when the 1 - 2 alpha/k interval (k judged signals: Bonferroni, so ~k signals give ~alpha false calls in all) lies
  beyond one margin; "inconclusive" otherwise. "not judged" says why (no margin, not logged, not comparable).
- Window: from the later steady-state start of the two cells (the steps whose speed the report compares), or the
  spec's `learning.from_step`. A verdict on the window's last third is added when it differs (slow divergence).
- `length_explains`: how much of the generate-time gap longer responses explain (generate seconds per response
  token, candidate/reference, beside the response-length ratio).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scripts.benchmark.analysis.intervals import block_bootstrap_means, block_length, small_sample_factor
from scripts.benchmark.analysis.run_folder import Cell
from scripts.benchmark.contracts.sides import SidePair
from scripts.benchmark.spec.learning import LearningSpec

from miles.utils.bench_metrics import LEARNING_SIGNALS

MIN_PAIRED_STEPS = 6
DEFAULT_REPS = 2000
MIN_GENERATE_GAP = 0.02
"""Below this generate-time gap (2%) the share longer responses explain is noise over noise: not computed."""
EQUIVALENT, DIFFERENT, INCONCLUSIVE, NOT_JUDGED = "equivalent", "different", "inconclusive", "not judged"


def _spec_section(plan: dict[str, Any] | None, key: str) -> dict[str, Any]:
    section = ((plan or {}).get("spec") or {}).get(key)
    return section if isinstance(section, dict) else {}


def learning_settings(plan: dict[str, Any] | None) -> LearningSpec:
    return LearningSpec.model_validate(_spec_section(plan, "learning"))


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


def _column(repeat, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of one column of a repeat; NaN where the step has no finite value or the column is absent."""
    columns = repeat.columns
    values = columns.values.get(name)
    return columns.steps, (np.full(len(columns), np.nan) if values is None else values)


def paired_differences(
    candidate: dict[int, float], reference: dict[int, float], kind: str
) -> tuple[list[int], np.ndarray]:
    c, r = candidate, reference
    steps = [s for s in c if s in r and (kind == "absolute" or (c[s] > 0 and r[s] > 0))]
    if kind == "relative":
        return steps, np.asarray([math.log(c[s] / r[s]) for s in steps])
    return steps, np.asarray([c[s] - r[s] for s in steps])


def equivalence_test(
    d: np.ndarray, bound: float, *, alpha: float, family: int, reps: int, seed: int
) -> dict[str, Any]:
    """The three-way call on the mean of d against +-bound (module docstring), with its 1 - 2 alpha interval."""
    if len(d) < MIN_PAIRED_STEPS:
        return {"verdict": INCONCLUSIVE, "why": f"only {len(d)} paired steps", "difference": None}
    point = float(d.mean())
    length = block_length(d)
    rng = np.random.default_rng(seed)
    means = block_bootstrap_means(d.reshape(-1, 1), np.array([False]), reps, rng, length).ravel()

    def interval(level: float) -> tuple[float, float]:
        low, high = np.percentile(means, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
        widen = small_sample_factor(len(d) / length, 1, level)
        return point + widen * (float(low) - point), point + widen * (float(high) - point)

    low, high = interval(1 - 2 * alpha)
    wide_low, wide_high = interval(1 - 2 * alpha / max(1, family))
    if -bound < low and high < bound:
        verdict, why = EQUIVALENT, "interval inside the margin"
    elif wide_low > bound or wide_high < -bound:
        verdict, why = DIFFERENT, "interval beyond the margin"
    else:
        verdict, why = INCONCLUSIVE, "interval crosses the margin"
    return {"verdict": verdict, "why": why, "difference": point, "ci_low": low, "ci_high": high, "block": length}


def _shown(value: float | None, kind: str) -> float | None:
    """A log-ratio difference as the relative difference candidate/reference - 1; absolute ones as they are."""
    return None if value is None else (math.expm1(value) if kind == "relative" else value)


def _judge(d: np.ndarray, bound: float, kind: str, settings: LearningSpec, family: int, seed: int) -> dict:
    result = equivalence_test(d, bound, alpha=settings.alpha, family=family, reps=DEFAULT_REPS, seed=seed)
    for key in ("difference", "ci_low", "ci_high"):
        if key in result:
            result[key] = _shown(result[key], kind)
    return result


def signal_row(
    name: str,
    candidate: dict[int, float],
    reference: dict[int, float],
    plan: dict[str, Any] | None,
    *,
    family: int,
    seed: int,
    labels: tuple[str, str] = ("candidate", "reference"),
    same_framework: bool = False,
) -> dict[str, Any]:
    """One signal of one pair: both sides' window means, the paired difference with its interval, the verdict;
    `labels` name the two sides in the verdict's reason."""
    spec, settings = LEARNING_SIGNALS[name], learning_settings(plan)
    margin = settings.margin(name)
    steps, d = paired_differences(candidate, reference, spec.margin_kind)
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
    }
    missing = [label for label, series in zip(labels, (candidate, reference), strict=True) if not series]
    reason = not_comparable_reason(name, plan, same_framework=same_framework)
    if missing:
        return {**row, "verdict": NOT_JUDGED, "why": f"not logged by {' and '.join(missing)}"}
    if margin is None:
        return {**row, "verdict": NOT_JUDGED, "why": "plotted only: no margin"}
    if reason is not None:
        return {**row, "verdict": NOT_JUDGED, "why": reason}
    bound = math.log1p(margin) if spec.margin_kind == "relative" else margin
    row.update(_judge(d, bound, spec.margin_kind, settings, family, seed))
    tail = d[len(d) - len(d) // 3 :]
    if len(tail) >= MIN_PAIRED_STEPS:
        last = _judge(tail, bound, spec.margin_kind, settings, family, seed)
        if last["verdict"] != row["verdict"]:
            row["last_third"] = {k: last.get(k) for k in ("verdict", "difference", "ci_low", "ci_high")}
    return row


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
                seed=seed,
                labels=labels,
                same_framework=same,
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
