"""The calibration view of a report: each cell's numbers against the ceilings measured on its GPU model.

- `calibration_view(...)`: given `measured_peak_tflops(device)` and `roofline_tflops(device, preset, grad_ckpt, *,
  backend)` it gives, per cell, MFU against the measured peak and training TFLOPs/GPU as a fraction of the roofline,
  next to the datasheet MFU of the records; given `weight_sync_floor_s(device, model, path)` also the weight-sync
  phase against its floor (colocated: one on-GPU copy of all weights; disaggregated: one NCCL broadcast of them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scripts.benchmark.analysis.folder_reader import gpu_of
from scripts.benchmark.contracts.report import CalibrationRowModel

MeasuredPeak = Callable[[str], "float | None"]
Roofline = Callable[..., "float | None"]  # (device, model key, grad_ckpt, *, backend) -> TFLOP/s or None
WeightSyncFloor = Callable[[str, str, str], "float | None"]  # (device, model key, path) -> seconds or None
RooflineSpread = Callable[..., "dict | None"]  # as Roofline -> {"p10", "p90", "run_to_run_pct"} or None
WEIGHT_SYNC_FLOOR_PATH = {"colocate": "d2d_copy", "disaggregated": "broadcast"}


def calibration_view(
    cells: list[dict[str, Any]],
    *,
    measured_peak_tflops: MeasuredPeak,
    roofline_tflops: Roofline,
    preset: str | None,
    grad_ckpt_by_backend: dict[str, bool],
    weight_sync_floor_s: WeightSyncFloor | None = None,
    roofline_spread: RooflineSpread | None = None,
) -> list[CalibrationRowModel]:
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
            CalibrationRowModel(
                **{
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
