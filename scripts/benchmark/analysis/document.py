"""A run folder in, the report.json document out: steady state, summaries, comparisons, attribution.

- `analyse_run_folder(run_dir, ...)` reads the folder (cells.py), detects each repeat's steady state on step time
  (steady_state.py), summarises every report metric per cell (stats.py), compares Miles with VERL per backend and
  layout (compare.py) unless the parity table or the hardware forbids it, and returns one JSON-ready dict.
- `parity_tables(parity)` reads the plan's parity.json (one table per backend/layout pair);
  `unexplained_parity(parity, backend, layout)` lists what keeps a pair from being proven matched: rows neither
  matched nor a declared asymmetry with a note, a recorded parity error, no table for the pair, no parity.json.
  Any of these (or a parity.json for another spec hash, or different GPU models) refuses that pair's comparison.
- `calibration_view(...)` is the hook for measured ceilings: given `measured_peak_tflops(device)` and
  `roofline_tflops(device, preset, grad_ckpt, *, backend)` it adds, per cell, MFU against the measured peak and
  training TFLOPs/GPU as a fraction of the roofline, next to the datasheet MFU of the records; given
  `weight_sync_floor_s(device, model, path)` also the weight-sync phase against its floor (colocated: one on-GPU
  copy of all weights; disaggregated: one NCCL broadcast of them).

Caveats:
- A cell's steady state starts at the latest start among its repeats (every repeat is cut there); "reached" needs
  every repeat to reach it. Each cell states what its intervals cover (`interval_policy`: repeats or one run).
- Only repeats in state "complete" are analysed; the others are listed under "incomplete" with their reason.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from miles.utils.bench_metrics import STEP_PHASES
from scripts.benchmark.analysis.compare import SideSamples, compare_sides, refusal_reason
from scripts.benchmark.analysis.learning import analyse_learning
from scripts.benchmark.analysis.run_folder import (
    REPORT_METRICS,
    RESPONSE_LENGTH_EXTREMES,
    Cell,
    gpu_of,
    hardware_of,
    read_run_folder,
    stat_column,
)
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.analysis.stats import summarise
from scripts.benchmark.analysis.steady_state import detect_steady_state
from scripts.benchmark.analysis.step_columns import StepColumns
from scripts.benchmark.analysis.verdict import practical_thresholds

REPORT_SCHEMA_VERSION = 1
PARITY_OK_STATUSES = frozenset({"matched", "match", "equal", "ok"})
PARITY_ASYMMETRY_STATUSES = frozenset({"asymmetry", "declared_asymmetry", "declared asymmetry"})

MeasuredPeak = Callable[[str], "float | None"]
Roofline = Callable[..., "float | None"]  # (device, model key, grad_ckpt, *, backend) -> TFLOP/s or None
WeightSyncFloor = Callable[[str, str, str], "float | None"]  # (device, model key, path) -> seconds or None
RooflineSpread = Callable[..., "dict | None"]  # as Roofline -> {"p10", "p90", "run_to_run_pct"} or None
WEIGHT_SYNC_FLOOR_PATH = {"colocate": "d2d_copy", "disaggregated": "broadcast"}


def parity_tables(parity: Any) -> list[dict[str, Any]]:
    """parity.json as tables: [{"backend", "layout", "title", "rows", "error"}], rows as {knob, status, values, note}.

    The plan writes {"pairs": [{"backend", "layout", "miles_cell", "verl_cell", "error", "rows": [{knob, group, miles,
    verl, status, note}]}]}; a flat {"rows": [...]} or a bare list (backend/layout per row, or none) is read too."""
    if isinstance(parity, dict) and isinstance(parity.get("pairs"), list):
        tables = []
        for pair in parity["pairs"]:
            rows = [
                {
                    "knob": r.get("knob", "?"),
                    "status": str(r.get("status", "")),
                    "values": {"miles": r.get("miles"), "verl": r.get("verl")},
                    "note": r.get("note") or "",
                }
                for r in pair.get("rows", [])
            ]
            title = f"{pair.get('miles_cell', 'miles')} vs {pair.get('verl_cell', 'verl')}"
            tables.append(
                {"backend": pair.get("backend"), "layout": pair.get("layout"), "title": title, "rows": rows}
                | {"error": pair.get("error")}
            )
        return tables
    flat = parity if isinstance(parity, list) else (parity or {}).get("rows") if isinstance(parity, dict) else None
    if not isinstance(flat, list):
        return []
    rows = [
        {
            "knob": r.get("knob") or r.get("name") or "?",
            "status": str(r.get("status", "")),
            "values": r.get("values") or {k: r[k] for k in ("miles", "verl") if k in r},
            "note": r.get("note") or r.get("reason") or "",
            "backend": r.get("backend"),
            "layout": r.get("layout"),
        }
        for r in flat
        if isinstance(r, dict)
    ]
    return [{"backend": None, "layout": None, "title": "all cells", "rows": rows, "error": None}]


def unexplained_parity(parity: Any, backend: str, layout: str) -> list[str]:
    """Why the parity proof does not cover this backend/layout: rows neither matched nor a declared asymmetry with a
    note, a recorded parity error, a parity table for another spec, or no table at all."""
    if parity is None:
        return ["no parity.json in the run folder: the launches were never proven matched"]
    tables = [t for t in parity_tables(parity) if t["backend"] in (None, backend) and t["layout"] in (None, layout)]
    if not tables:
        return [f"parity.json has no table for {backend}/{layout}"]
    problems = [f"parity error: {t['error']}" for t in tables if t["error"]]
    for table in tables:
        for row in table["rows"]:
            if row.get("backend") not in (None, backend) or row.get("layout") not in (None, layout):
                continue
            status = row["status"].lower()
            if status in PARITY_OK_STATUSES or (status in PARITY_ASYMMETRY_STATUSES and row["note"]):
                continue
            problems.append(f"{row['knob']} ({row['status'] or 'no status'}: {row['values']})")
    return problems


def _steady_repeat(repeat_number: int, columns: StepColumns) -> dict[str, Any]:
    steady = detect_steady_state(columns.values["step_time_s"])
    start = None if steady.start_index is None else int(columns.steps[steady.start_index])
    return {
        "repeat": repeat_number,
        "start_step": start,
        "start_index": steady.start_index,
        "reached": steady.reached,
        "method": steady.method,
        "more_steps": steady.more_steps,
        "steps": len(columns.steps),
        "steady_steps": steady.n_steady,
    }


def _cell_steady_state(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """The cell's steady state starts at the latest start among its repeats; reached only if every repeat is."""
    starts = [info["start_step"] for info in repeats if info["start_step"] is not None]
    reached = all(info["reached"] for info in repeats)
    more = [info["more_steps"] for info in repeats if not info["reached"] and info["more_steps"]]
    method = ", ".join(sorted({info["method"].split(":")[0] for info in repeats}))
    if not reached:
        method += "; no steady state in at least one repeat" + (
            f": the spec needs at least {max(more)} more steps" if more else ""
        )
    return {
        "start_step": max(starts) if starts else None,
        "reached": reached,
        "more_steps": max(more) if more else None,
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
        "not the next one); run 3 or more repeats (--repeats, the default 3) for intervals that do"
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
    repeat_numbers: list[int], columns: list[StepColumns]
) -> tuple[dict[str, Any], list[StepColumns], list[np.ndarray]]:
    """The cell's steady state, each repeat's columns cut at the cell's start, and the kept-step masks."""
    infos = [_steady_repeat(number, c) for number, c in zip(repeat_numbers, columns, strict=True)]
    steady_state = _cell_steady_state(infos)
    start = steady_state["start_step"]
    keep = [c.steps >= start if start is not None else np.zeros(len(c.steps), bool) for c in columns]
    steady = [c.select(k) for c, k in zip(columns, keep, strict=True)]
    return steady_state, steady, keep


def side_samples(steady: list[StepColumns], metrics: tuple[str, ...]) -> SideSamples:
    return SideSamples(metrics=metrics, repeats=tuple(np.column_stack([c.values[n] for n in metrics]) for c in steady))


def _analyse_cell(cell: Cell, settings: AnalysisSettings) -> tuple[dict[str, Any], SideSamples]:
    columns = [r.columns for r in cell.repeats]
    steady_state, steady, _ = cut_to_steady_state([r.repeat for r in cell.repeats], columns)
    summaries, samples = _metric_entries(steady, settings)
    environment = cell.repeats[0].environment
    entry = {
        "id": cell.id,
        "framework": cell.framework,
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
        "step_time_series": [
            {"repeat": rep.repeat, "steps": c.steps.tolist(), "step_time_s": _nulls(c.values["step_time_s"])}
            for rep, c in zip(cell.repeats, columns, strict=True)
        ],
    }
    return entry, side_samples(steady, tuple(REPORT_METRICS))


def _nulls(values: np.ndarray) -> list[float | None]:
    """A float column as a JSON list, NaN (missing or non-finite) as null."""
    return [None if not math.isfinite(v) else v for v in values.tolist()]


def _compare_pairs(
    cells: list[dict[str, Any]],
    sides: dict[str, SideSamples],
    parity: Any,
    *,
    settings: AnalysisSettings,
    spec_hash: str | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    comparisons, attribution, refused = [], [], []
    parity_hash = parity.get("spec_hash") if isinstance(parity, dict) else None
    by_key = {(c["framework"], c["backend"], c["layout"]): c for c in cells}
    pairs = sorted({(c["backend"], c["layout"]) for c in cells})
    for backend, layout in pairs:
        miles, verl = by_key.get(("miles", backend, layout)), by_key.get(("verl", backend, layout))
        if miles is None or verl is None:
            continue
        problems = unexplained_parity(parity, backend, layout)
        if parity_hash and spec_hash and parity_hash != spec_hash:
            problems.append(f"parity.json is for spec {parity_hash}, the plan for spec {spec_hash}")
        reason = refusal_reason(
            unexplained_parity=problems,
            miles_hardware=miles["hardware"],
            verl_hardware=verl["hardware"],
        )
        if reason is not None:
            refused.append({"backend": backend, "layout": layout, "reason": reason})
            continue
        metric_rows, phase_rows = compare_sides(
            sides[miles["id"]],
            sides[verl["id"]],
            phases=STEP_PHASES,  # additive: generate may overlap the step, rollout_wait is its share
            settings=settings,
        )
        for row in metric_rows:
            spec = REPORT_METRICS[row.metric]
            comparisons.append(
                {"backend": backend, "layout": layout, **row.__dict__, "unit": spec.unit, "direction": spec.direction}
            )
        attribution.extend({"backend": backend, "layout": layout, **row.__dict__} for row in phase_rows)
    return comparisons, attribution, refused


def calibration_view(
    cells: list[dict[str, Any]],
    *,
    measured_peak_tflops: MeasuredPeak,
    roofline_tflops: Roofline,
    preset: str | None,
    grad_ckpt_by_backend: dict[str, bool],
    weight_sync_floor_s: WeightSyncFloor | None = None,
    roofline_spread: RooflineSpread | None = None,
) -> list[dict[str, Any]]:
    """Per cell: MFU against the datasheet (from the records) and the measured peak; TFLOPs/GPU vs the roofline;
    the weight-sync phase against the time to move every weight once at the measured bandwidth."""
    rows = []
    for cell in cells:
        device, _ = gpu_of(cell["environment"])
        tflops = cell["summaries"]["train_tflops_per_gpu"]["median"]
        peak = measured_peak_tflops(device) if device else None
        grad_ckpt = grad_ckpt_by_backend.get(cell["backend"], True)
        # The roofline's shape is that backend's token budget per GPU (Megatron and FSDP presets pack differently).
        roof = roofline_tflops(device, preset, grad_ckpt, backend=cell["backend"]) if device and preset else None
        spread = (
            roofline_spread(device, preset, grad_ckpt, backend=cell["backend"]) if roof and roofline_spread else None
        )
        sync = cell["summaries"]["phases_s.weight_sync"]["median"]
        floor_path = WEIGHT_SYNC_FLOOR_PATH.get(cell["layout"])
        floor = (
            weight_sync_floor_s(device, preset, floor_path)
            if weight_sync_floor_s and device and preset and floor_path
            else None
        )
        rows.append(
            {
                "id": cell["id"],
                "device": device,
                "train_tflops_per_gpu": tflops,
                "mfu_datasheet": cell["summaries"]["train_mfu"]["median"],
                "measured_peak_tflops": peak,
                "mfu_measured_peak": tflops / peak if tflops is not None and peak else None,
                "roofline_tflops": roof,
                "grad_ckpt": grad_ckpt,
                "fraction_of_roofline": tflops / roof if tflops is not None and roof else None,
                **_roofline_spread_fields(tflops, spread),
                "weight_sync_s": sync,
                "weight_sync_floor_s": floor,
                "weight_sync_floor_path": floor_path,
                "weight_sync_over_floor": sync / floor if sync is not None and floor else None,
            }
        )
    return rows


def _roofline_spread_fields(tflops: float | None, spread: dict[str, Any] | None) -> dict[str, Any]:
    """The fraction of the roofline at the roofline's p90 and p10 (low, high), and its run-to-run spread."""
    if tflops is None or not spread or not spread.get("p10") or not spread.get("p90"):
        return {"fraction_of_roofline_range": None, "roofline_run_to_run_pct": None}
    return {
        "fraction_of_roofline_range": [tflops / spread["p90"], tflops / spread["p10"]],
        "roofline_run_to_run_pct": spread.get("run_to_run_pct"),
    }


def grad_ckpt_by_backend(plan: dict[str, Any] | None) -> dict[str, bool]:
    """Whether each backend recomputes activations, from the resolved spec in plan.json (absent when unknown)."""
    spec = (plan or {}).get("spec") or {}
    found: dict[str, bool] = {}
    fsdp, megatron = spec.get("fsdp"), spec.get("megatron")
    if isinstance(fsdp, dict) and "gradient_checkpointing" in fsdp:
        found["fsdp"] = bool(fsdp["gradient_checkpointing"])
    if isinstance(megatron, dict) and "recompute" in megatron:
        found["megatron"] = megatron["recompute"] not in (None, False, "none")
    return found


def roofline_model_key(plan: dict[str, Any] | None) -> str | None:
    """The calibration roofline is keyed by model config name (spec.model.config); the preset name otherwise."""
    plan = plan or {}
    config = ((plan.get("spec") or {}).get("model") or {}).get("config")
    return config if isinstance(config, str) else plan.get("preset")


def analyse_run_folder(
    run_dir: Path,
    settings: AnalysisSettings | None = None,
    *,
    measured_peak_tflops: MeasuredPeak | None = None,
    roofline_tflops: Roofline | None = None,
    weight_sync_floor_s: WeightSyncFloor | None = None,
    roofline_spread: RooflineSpread | None = None,
) -> dict[str, Any]:
    """The report.json document for one run folder."""
    settings = settings or AnalysisSettings()
    folder = read_run_folder(run_dir)
    analysed = [_analyse_cell(cell, settings) for cell in folder.cells]
    cells = [entry for entry, _ in analysed]
    sides = {entry["id"]: side for entry, side in analysed}
    comparisons, attribution, refused = _compare_pairs(
        cells,
        sides,
        folder.parity,
        settings=settings,
        spec_hash=(folder.plan or {}).get("spec_hash"),
    )
    plan = folder.plan or {}
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
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "run_dir": str(folder.run_dir),
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "spec_hash": plan.get("spec_hash"),
        "preset": plan.get("preset"),
        "confidence": settings.confidence,
        "practical_thresholds": practical_thresholds(plan, list(REPORT_METRICS)),
        "family_wise": settings.family_wise,
        "bootstrap_reps": settings.reps,
        "cells": cells,
        "incomplete": [r.__dict__ for r in folder.incomplete],
        "comparisons": comparisons,
        "refused": refused,
        "attribution": attribution,
        "calibration": calibration,
        "parity": folder.parity,
        "learning": analyse_learning(folder.cells, cells, folder.plan, seed=settings.seed),
    }


_NONFINITE_MARKERS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _strict(value: Any) -> Any:
    """NaN/Inf as bench_metrics' string markers; long all-finite float lists pass through without a copy."""
    if isinstance(value, float):
        return value if math.isfinite(value) else _NONFINITE_MARKERS[repr(float(value))]
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        if value and _all_finite_numbers(value):
            return value
        return [_strict(v) for v in value]
    return value


def _all_finite_numbers(values: list[Any] | tuple[Any, ...]) -> bool:
    """True when every item (or nested item) is a finite number, so `_strict` would return it unchanged; one C
    pass (numpy) instead of a Python loop over a 10,000-step series."""
    try:
        return bool(np.isfinite(np.asarray(values, dtype=float)).all())
    except (TypeError, ValueError):  # None, strings, dicts, ragged lists: item by item
        return False


def report_json_bytes(doc: dict[str, Any]) -> bytes:
    """The document as strict JSON in UTF-8 (non-finite numbers as "NaN"/"Infinity" strings), by the C encoder: the
    samples of 10,000 steps x 8 cells are a million numbers, too many for the indenting pure-Python encoder. Bytes,
    not text: a 40 MB document is written without a second copy."""
    try:
        import orjson
    except ImportError:
        return (json.dumps(_strict(doc), allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
    return orjson.dumps(_strict(doc), option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)
