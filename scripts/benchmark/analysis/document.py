# doc-dev: docs/benchmark.md
"""A run folder in, the report.json document (contract 3) out: steady state, summaries, comparisons, attribution.

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
- A cell's steady state starts at the latest start among its repeats; "reached" needs every repeat to reach it.
- Only repeats in state "complete" are analysed; the others are listed under "incomplete" with their reason.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from miles.utils.bench_metrics import STEP_PHASES
from scripts.benchmark.analysis.compare import (
    DEFAULT_CONFIDENCE,
    DEFAULT_REPS,
    SideSamples,
    compare_sides,
    refusal_reason,
)
from scripts.benchmark.analysis.run_folder import (
    REPORT_METRICS,
    RESPONSE_LENGTH_RAW_KEYS,
    Cell,
    Repeat,
    gpu_of,
    hardware_of,
    metric_value,
    raw_value,
    read_run_folder,
)
from scripts.benchmark.analysis.stats import summarise
from scripts.benchmark.analysis.steady_state import detect_steady_state

REPORT_SCHEMA_VERSION = 1
PARITY_OK_STATUSES = frozenset({"matched", "match", "equal", "ok"})
PARITY_ASYMMETRY_STATUSES = frozenset({"asymmetry", "declared_asymmetry", "declared asymmetry"})

MeasuredPeak = Callable[[str], "float | None"]
Roofline = Callable[..., "float | None"]  # (device, model key, grad_ckpt, *, backend) -> TFLOP/s or None
WeightSyncFloor = Callable[[str, str, str], "float | None"]  # (device, model key, path) -> seconds or None
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


def _steady_repeat(repeat: Repeat) -> dict[str, Any]:
    series = [metric_value(r, "step_time_s") for r in repeat.records]
    steady = detect_steady_state(series)
    start = None if steady.start_index is None else repeat.records[steady.start_index].step
    return {
        "repeat": repeat.repeat,
        "start_step": start,
        "start_index": steady.start_index,
        "reached": steady.reached,
        "method": steady.method,
        "steps": len(repeat.records),
        "steady_steps": steady.n_steady,
    }


def _response_length(steady_records: list[list[Any]]) -> dict[str, float | None]:
    """Mean response length and its spread: across steady steps (std of step means) and within steps (min/max)."""
    records = [r for rs in steady_records for r in rs]
    means = np.asarray([v for v in (metric_value(r, "response_length_mean") for r in records) if v is not None])
    out: dict[str, float | None] = {
        "mean": float(means.mean()) if len(means) else None,
        "std_of_step_means": float(means.std(ddof=1)) if len(means) > 1 else None,
    }
    for stat, keys in RESPONSE_LENGTH_RAW_KEYS.items():
        values = [v for v in (raw_value(r, keys) for r in records) if v is not None]
        out[f"median_step_{stat}"] = float(np.median(values)) if values else None
    return out


def _analyse_cell(cell: Cell, confidence: float) -> tuple[dict[str, Any], SideSamples]:
    repeats = [_steady_repeat(r) for r in cell.repeats]
    steady_records = [rep.records[info["start_index"] or 0 :] for rep, info in zip(cell.repeats, repeats, strict=True)]
    starts = [info["start_step"] for info in repeats if info["start_step"] is not None]
    reached = all(info["reached"] for info in repeats)
    methods = sorted({info["method"].split(":")[0] for info in repeats})
    summaries, samples, columns = {}, {}, []
    for name, spec in REPORT_METRICS.items():
        per_repeat = [[metric_value(r, name) for r in rs] for rs in steady_records]
        columns.append([[math.nan if v is None else v for v in values] for values in per_repeat])
        summary = summarise(per_repeat, confidence)
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
            (
                [v for v in (metric_value(r, name, nonfinite=math.nan) for r in rs) if v is not None]
                if any(v is not None for v in values)
                else []
            )
            for rs, values in zip(steady_records, per_repeat, strict=True)
        ]
    environment = cell.repeats[0].environment
    entry = {
        "id": cell.id,
        "framework": cell.framework,
        "backend": cell.backend,
        "layout": cell.layout,
        "repeats": len(cell.repeats),
        "hardware": hardware_of(environment),
        "environment": environment,
        "environments": [r.environment for r in cell.repeats],
        "steady_state": {
            "start_step": max(starts) if starts else None,
            "reached": reached,
            "method": ", ".join(methods)
            + ("" if reached else "; never reached a steady state in at least one repeat"),
            "repeats": repeats,
        },
        "summaries": summaries,
        "samples": samples,
        "response_length": _response_length(steady_records),
        "step_time_series": [
            {
                "repeat": rep.repeat,
                "steps": [r.step for r in rep.records],
                "step_time_s": [metric_value(r, "step_time_s") for r in rep.records],
            }
            for rep in cell.repeats
        ],
    }
    matrices = tuple(
        np.column_stack([np.asarray(column[k], dtype=float).reshape(-1) for column in columns])
        for k in range(len(cell.repeats))
    )
    return entry, SideSamples(metrics=tuple(REPORT_METRICS), repeats=matrices)


def _compare_pairs(
    cells: list[dict[str, Any]],
    sides: dict[str, SideSamples],
    parity: Any,
    *,
    reps: int,
    confidence: float,
    seed: int,
    family_wise: bool,
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
            reps=reps,
            confidence=confidence,
            seed=seed,
            family_wise=family_wise,
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
                "weight_sync_s": sync,
                "weight_sync_floor_s": floor,
                "weight_sync_floor_path": floor_path,
                "weight_sync_over_floor": sync / floor if sync is not None and floor else None,
            }
        )
    return rows


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
    *,
    reps: int = DEFAULT_REPS,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
    family_wise: bool = True,
    measured_peak_tflops: MeasuredPeak | None = None,
    roofline_tflops: Roofline | None = None,
    weight_sync_floor_s: WeightSyncFloor | None = None,
) -> dict[str, Any]:
    """The report.json document for one run folder."""
    folder = read_run_folder(run_dir)
    analysed = [_analyse_cell(cell, confidence) for cell in folder.cells]
    cells = [entry for entry, _ in analysed]
    sides = {entry["id"]: side for entry, side in analysed}
    comparisons, attribution, refused = _compare_pairs(
        cells,
        sides,
        folder.parity,
        reps=reps,
        confidence=confidence,
        seed=seed,
        family_wise=family_wise,
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
        )
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "run_dir": str(folder.run_dir),
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "spec_hash": plan.get("spec_hash"),
        "preset": plan.get("preset"),
        "confidence": confidence,
        "family_wise": family_wise,
        "bootstrap_reps": reps,
        "cells": cells,
        "incomplete": [r.__dict__ for r in folder.incomplete],
        "comparisons": comparisons,
        "refused": refused,
        "attribution": attribution,
        "calibration": calibration,
        "parity": folder.parity,
    }
