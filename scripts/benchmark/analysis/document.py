"""A run folder in, the typed report document out (contracts/report.py): steady state, summaries, comparisons,
attribution, learning, calibration.

- `analyse_run_folder(run_dir, ...)` reads the folder (folder_reader.py, its sides from sides.py), detects each
  repeat's steady state on step time (steady_state.py), summarises every report metric per cell (stats.py),
  compares the candidate side's cell with the reference side's per backend and layout (compare.py) unless the
  parity proof (contracts/parity.py `unexplained`: rows neither matched nor a declared asymmetry with a note, a
  parity error, no table for the pair, no or an unreadable parity.json, a parity.json for another spec hash) or
  different GPU models forbid it, and returns a `ReportDocument`: everything the renderer shows, decided here.
- The calibration view (calibration_view.py) is added when the measured ceilings are given.

Caveats:
- A cell's steady state starts at the latest start among its repeats (every repeat is cut there); "reached" needs
  every repeat to reach it. Each cell states what its intervals cover (`interval_policy`: repeats or one run).
- Only repeats in state "complete" are analysed; the others are listed under "incomplete" with their reason.
"""

from __future__ import annotations

import datetime
import math
from pathlib import Path
from typing import Any

import numpy as np
from scripts.benchmark.analysis.calibration_view import (
    MeasuredPeak,
    Roofline,
    RooflineSpread,
    WeightSyncFloor,
    calibration_view,
)
from scripts.benchmark.analysis.compare import PairKey, SideSamples, compare_sides, refusal_reason
from scripts.benchmark.analysis.folder_reader import (
    RESPONSE_LENGTH_EXTREMES,
    Cell,
    Repeat,
    RunFolder,
    hardware_of,
    read_run_folder,
    stat_column,
)
from scripts.benchmark.analysis.learning import analyse_learning, learning_margins
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.analysis.staleness import bound_versions, lag_pairs, observed_lag
from scripts.benchmark.analysis.stats import summarise
from scripts.benchmark.analysis.steady_state import detect_steady_state
from scripts.benchmark.analysis.step_columns import StepColumns
from scripts.benchmark.analysis.step_flags import step_flag_summary
from scripts.benchmark.analysis.train_only import full_loop_comparisons, outside_the_training_step, train_only_view
from scripts.benchmark.analysis.verdict import practical_thresholds
from scripts.benchmark.calibration.results import grad_ckpt_by_backend, roofline_model_key
from scripts.benchmark.contracts.parity import ParityFile, unexplained
from scripts.benchmark.contracts.report import AttributionModel, ComparisonModel, ReportDocument
from scripts.benchmark.frameworks.registry import incomparable_phases

from miles.utils.bench_metrics import REPORT_METRICS, STEP_PHASES

REPORT_SCHEMA_VERSION = 2


def _steady_repeat(repeat_number: int, columns: StepColumns, skip_first: int = 0) -> dict[str, Any]:
    """One repeat's steady state; `skip_first` recorded steps are never in it (their work differs between sides)."""
    steady = detect_steady_state(columns.values["step_time_s"])
    index, n_steady, method = steady.start_index, steady.n_steady, steady.method
    if index is not None and index < skip_first < len(columns.steps):
        n_steady -= skip_first - index
        index = skip_first
        method += f"; first {skip_first} steps cut: their prompts differ between the sides (first_steps_composition)"
    return {
        "repeat": repeat_number,
        "start_step": None if index is None else int(columns.steps[index]),
        "start_index": index,
        "reached": steady.reached,
        "method": method,
        "more_steps": steady.more_steps,
        "noise": steady.noise,
        "steps": len(columns.steps),
        "steady_steps": n_steady,
    }


def first_steps_to_cut(parity: ParityFile | None, backend: str, layout: str) -> int:
    """Steps at the start of the pair's runs that train different prompts on the two sides: max_policy_lag + 1 when
    the parity table declares first_steps_composition an asymmetry (batches in flight reorder them), else 0."""
    pair = parity.pair(backend, layout) if parity is not None else None
    rows = {r.knob: r for r in pair.rows} if pair is not None else {}
    composition, lag = rows.get("first_steps_composition"), rows.get("max_policy_lag")
    if composition is None or composition.status != "asymmetry" or lag is None:
        return 0
    lags = [v for v in map(bound_versions, (lag.candidate, lag.reference)) if v is not None]
    return max(lags) + 1 if lags else 0


def _cell_steady_state(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell's steady state starts at the latest start among its repeats; reached only if every repeat is."""
    starts = [info["start_step"] for info in repeats if info["start_step"] is not None]
    reached = all(info["reached"] for info in repeats)
    more = [info["more_steps"] for info in repeats if not info["reached"] and info["more_steps"]]
    noisy = [info["noise"] for info in repeats if not info["reached"] and info.get("noise") is not None]
    method = ", ".join(sorted({info["method"].split(":")[0] for info in repeats}))
    if noisy:
        method += (
            f"; steady state not claimed: the step time of at least one repeat is too noisy (robust SD "
            f"{max(noisy):.1%} of its level) to place the end of the warm-up"
        )
    elif not reached:
        method += "; no steady state in at least one repeat" + (
            f": the spec needs at least {max(more)} more steps" if more else ""
        )
    return {
        "start_step": max(starts) if starts else None,
        "reached": reached,
        "more_steps": max(more) if more else None,
        "noise": max(noisy) if noisy else None,
        "method": method,
        "repeats": repeats,
    }


def _response_length(steady: list[StepColumns]) -> dict[str, float | None]:
    """Mean response length and its spread: across steady steps (std of step means) and within steps (min/max)."""

    def finite(name: str) -> np.ndarray:
        values = np.concatenate([c.values[name] for c in steady]) if steady else np.zeros(0)
        return values[np.isfinite(values)]

    means = finite("response_length_mean")
    out: dict[str, float | None] = {
        "mean": float(means.mean()) if len(means) else None,
        "std_of_step_means": float(means.std(ddof=1)) if len(means) > 1 else None,
    }
    for stat in RESPONSE_LENGTH_EXTREMES:
        values = finite(stat_column(stat))
        out[f"median_step_{stat}"] = float(np.median(values)) if len(values) else None
    return out


def interval_policy(repeats: int) -> str:
    """What a cell's intervals cover, by its number of complete repeats (the report states it per cell)."""
    if repeats >= 2:
        return f"{repeats} repeats: intervals over the repeats, run-to-run variation included"
    return (
        "1 repeat: intervals from this run's steps only, run-to-run variation NOT included (they cover this run, "
        "not the next one); run 3 or more repeats (--repeats 3, what a comparing plan carries) for intervals that do"
    )


def _metric_entries(
    steady: list[StepColumns], settings: AnalysisSettings
) -> tuple[dict[str, Any], dict[str, list[list[float]]]]:
    """Per report metric: the summary with its interval, and the steady-state samples of each repeat."""
    summaries, samples = {}, {}
    for name, spec in REPORT_METRICS.items():
        summary = summarise([c.values[name] for c in steady], settings.confidence)
        summaries[name] = {
            "median": summary.median,
            "ci_low": summary.ci_low,
            "ci_high": summary.ci_high,
            "n": summary.n,
            "method": summary.method,
            "unit": spec.unit,
            "direction": spec.direction,
        }
        # A step that recorded the metric as NaN/Inf stays in place as NaN ("NaN" in the JSON), so a consumer sees
        # it; a step the framework did not measure (null: the last Miles step's step time, see "The step shift") is
        # left out; a metric with no finite value in a repeat (not reported) has an empty list.
        samples[name] = [
            c.values[name][c.measured[name]].tolist() if np.isfinite(c.values[name]).any() else [] for c in steady
        ]
    return summaries, samples


def cut_to_steady_state(
    repeat_numbers: list[int], columns: list[StepColumns], skip_first: int = 0
) -> tuple[dict[str, Any], list[StepColumns], list[np.ndarray]]:
    """The cell's steady state, each repeat's columns cut at the cell's start, and the kept-step masks."""
    infos = [_steady_repeat(number, c, skip_first) for number, c in zip(repeat_numbers, columns, strict=True)]
    steady_state = _cell_steady_state(infos)
    start = steady_state["start_step"]
    keep = [c.steps >= start if start is not None else np.zeros(len(c.steps), bool) for c in columns]
    steady = [c.select(k) for c, k in zip(columns, keep, strict=True)]
    return steady_state, steady, keep


def side_samples(steady: list[StepColumns], metrics: tuple[str, ...]) -> SideSamples:
    return SideSamples(metrics=metrics, repeats=tuple(np.column_stack([c.values[n] for n in metrics]) for c in steady))


def _analyse_cell(cell: Cell, settings: AnalysisSettings, skip_first: int = 0) -> tuple[dict[str, Any], SideSamples]:
    columns = [r.columns for r in cell.repeats]
    steady_state, steady, _ = cut_to_steady_state([r.repeat for r in cell.repeats], columns, skip_first)
    summaries, samples = _metric_entries(steady, settings)
    environment = cell.repeats[0].environment
    entry = {
        "id": cell.id,
        "framework": cell.framework,
        "side": cell.side,
        "backend": cell.backend,
        "layout": cell.layout,
        "repeats": len(cell.repeats),
        "interval_policy": interval_policy(len(cell.repeats)),
        "hardware": hardware_of(environment),
        "environment": environment,
        "environments": [r.environment for r in cell.repeats],
        "steady_state": steady_state,
        "summaries": summaries,
        "samples": samples,
        "response_length": _response_length(steady),
        "tokens_per_step": tokens_per_step(steady),
        "policy_lag": observed_lag(columns),
        "launch": launch_timing(cell.repeats),
        "step_flags": step_flag_summary(columns),
        "step_time_series": [
            {"repeat": rep.repeat, "steps": c.steps.tolist(), "step_time_s": _nulls(c.values["step_time_s"])}
            for rep, c in zip(cell.repeats, columns, strict=True)
        ],
    }
    return entry, side_samples(steady, tuple(REPORT_METRICS))


def launch_timing(repeats: list[Repeat]) -> dict[str, Any]:
    """Each launch's wall time (the manifest's start to end: Ray, start-up, steps, stop) and its start-up (the wall
    time less the steps' own times), with their medians: what the cost model reads back (plan/cost.py)."""
    rows = []
    for rep in repeats:
        start, end = _instant(rep.started_at), _instant(rep.ended_at)
        if start is None or end is None or end < start:
            continue
        wall = (end - start).total_seconds()
        steps = rep.columns.values["step_time_s"]
        stepped = float(np.nansum(steps)) if np.isfinite(steps).any() else 0.0
        rows.append({"repeat": rep.repeat, "wall_s": wall, "startup_s": max(wall - stepped, 0.0)})

    def median(key: str) -> float | None:
        return float(np.median([r[key] for r in rows])) if rows else None

    return {"wall_s": median("wall_s"), "startup_s": median("startup_s"), "repeats": rows}


def _instant(text: str | None) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def _sink_formats(plan: dict[str, Any]) -> dict[str, str]:
    """Each planned cell's sink format: how its step times are taken, part of what its values mean (history key)."""
    formats = {}
    for cell in plan.get("cells") or []:
        sink = cell.get("sink") if isinstance(cell, dict) else None
        if isinstance(sink, dict) and isinstance(sink.get("format"), str):
            formats[str(cell.get("id"))] = sink["format"]
    return formats


def _nulls(values: np.ndarray) -> list[float | None]:
    """A float column as a JSON list, NaN (missing or non-finite) as null."""
    return [None if not math.isfinite(v) else v for v in values.tolist()]


def tokens_per_step(steady: list[StepColumns]) -> float | None:
    """Mean trained (prompt + response) tokens per steady step (the headline's seconds per 1k tokens)."""
    parts = []
    for c in steady:
        if "tokens.prompt" in c.values and "tokens.response" in c.values:
            total, cost = c.values["tokens.prompt"] + c.values["tokens.response"], c.values["train_s_per_1k_tokens"]
            parts.append(total[np.isfinite(total) & (total > 0) & np.isfinite(cost) & (cost > 0)])
    tokens = np.concatenate(parts) if parts else np.zeros(0)
    return float(tokens.mean()) if len(tokens) else None


def _pair_problems(folder: RunFolder, backend: str, layout: str, spec_hash: str | None) -> list[str]:
    """What keeps the parity proof from covering this pair (contracts/parity.py), the spec hash included."""
    if folder.parity_error is not None:
        return [f"parity.json could not be read: {folder.parity_error}"]
    names = (folder.sides.candidate.name, folder.sides.reference.name if folder.sides.reference else "reference")
    problems = unexplained(folder.parity, backend, layout, names=names)
    parity_hash = folder.parity.spec_hash if folder.parity is not None else None
    if parity_hash and spec_hash and parity_hash != spec_hash:
        problems.append(f"parity.json is for spec {parity_hash}, the plan for spec {spec_hash}")
    return problems


def _compare_pairs(
    cells: list[dict[str, Any]],
    samples: dict[str, SideSamples],
    folder: RunFolder,
    *,
    settings: AnalysisSettings,
    thresholds: dict[str, float],
) -> tuple[list[ComparisonModel], list[AttributionModel], list[dict[str, Any]]]:
    """Each backend x layout: the candidate side's cell against the reference side's, unless refused."""
    comparisons, attribution, refused = [], [], []
    sides = folder.sides
    if sides.reference is None:
        return comparisons, attribution, refused
    by_key = {(c["side"], c["backend"], c["layout"]): c for c in cells}
    for backend, layout in sorted({(c["backend"], c["layout"]) for c in cells}):
        candidate = by_key.get((sides.candidate.name, backend, layout))
        reference = by_key.get((sides.reference.name, backend, layout))
        if candidate is None or reference is None:
            continue
        pair = PairKey(
            backend=backend,
            layout=layout,
            candidate=sides.candidate,
            reference=sides.reference,
            candidate_cell=candidate["id"],
            reference_cell=reference["id"],
        )
        reason = refusal_reason(
            unexplained_parity=_pair_problems(folder, backend, layout, (folder.plan or {}).get("spec_hash")),
            pair=pair,
            candidate_hardware=candidate["hardware"],
            reference_hardware=reference["hardware"],
        )
        if reason is not None:
            refused.append({"backend": backend, "layout": layout, "reason": reason})
            continue
        metric_rows, phase_rows = compare_sides(
            samples[candidate["id"]],
            samples[reference["id"]],
            pair=pair,
            phases=STEP_PHASES,  # additive: generate may overlap the step, rollout_wait is its share
            settings=settings,
            thresholds=thresholds,
            incomparable=incomparable_phases(sides.candidate.framework, sides.reference.framework, layout),
        )
        comparisons.extend(metric_rows)
        attribution.extend(phase_rows)
    return comparisons, attribution, refused


def analyse_run_folder(
    run_dir: Path,
    settings: AnalysisSettings | None = None,
    *,
    measured_peak_tflops: MeasuredPeak | None = None,
    roofline_tflops: Roofline | None = None,
    weight_sync_floor_s: WeightSyncFloor | None = None,
    roofline_spread: RooflineSpread | None = None,
    calibration_note: str | None = None,
    full_loop: Path | None = None,
) -> ReportDocument:
    """The report document (contracts/report.py) for one run folder; `full_loop`: a full-loop run folder whose
    training-phase ratios a train-only report shows beside its own."""
    settings = settings or AnalysisSettings()
    folder = read_run_folder(run_dir)
    beside = full_loop_comparisons(full_loop, folder.plan)
    analysed = [
        _analyse_cell(cell, settings, first_steps_to_cut(folder.parity, cell.backend, cell.layout))
        for cell in folder.cells
    ]
    plan = folder.plan or {}
    sinks = _sink_formats(plan)
    cells = [{**entry, "sink": sinks.get(entry["id"])} for entry, _ in analysed]
    samples = {entry["id"]: side for entry, side in analysed}
    thresholds = practical_thresholds(plan, list(REPORT_METRICS))
    comparisons, attribution, refused = _compare_pairs(
        cells, samples, folder, settings=settings, thresholds=thresholds
    )
    if (folder.plan or {}).get("recording"):
        comparisons, attribution = outside_the_training_step(comparisons, attribution)
    calibration = None
    if measured_peak_tflops is not None and roofline_tflops is not None:
        calibration = calibration_view(
            cells,
            measured_peak_tflops=measured_peak_tflops,
            roofline_tflops=roofline_tflops,
            preset=roofline_model_key(plan),
            grad_ckpt_by_backend=grad_ckpt_by_backend(plan),
            weight_sync_floor_s=weight_sync_floor_s,
            roofline_spread=roofline_spread,
        )
    learning = analyse_learning(folder.cells, cells, folder.plan, folder.sides, seed=settings.seed)
    reference = folder.sides.reference
    train_only = train_only_view(folder, comparisons, beside)
    # a replay generates nothing: no policy lag to compare (its records carry none)
    lags = lag_pairs(cells, folder.parity, folder.sides.candidate.name, reference.name) if reference else []
    lags = [] if train_only is not None else lags
    return ReportDocument(
        schema_version=REPORT_SCHEMA_VERSION,
        run_dir=str(folder.run_dir),
        generated_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        spec_hash=plan.get("spec_hash"),
        preset=plan.get("preset"),
        confidence=settings.confidence,
        practical_thresholds=thresholds,
        family_wise=settings.family_wise,
        bootstrap_reps=settings.reps,
        sides=folder.sides.sides(),
        cells=cells,
        incomplete=[r.__dict__ for r in folder.incomplete],
        comparisons=comparisons,
        refused=refused,
        attribution=attribution,
        calibration=calibration,
        calibration_note=calibration_note,
        parity=folder.parity,
        parity_error=folder.parity_error,
        learning=learning,
        learning_margins=learning_margins(folder.plan),
        policy_lag=lags,
        train_only=train_only,
    )
