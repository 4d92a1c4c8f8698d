"""The figures of one roofline measurement, and the same figures pooled over back-to-back runs with their spread.

- `mode_figures(flops, tokens, kernel_s, wall_s, ...)`: for one shape and checkpointing mode, the headline
  `tflops` (model FLOPs over GPU kernel seconds, median with p10/p90/min/max over repeats), `step_s` (kernel
  seconds), `wall_step_s` and `wall_tflops` (host-launched wall time), and the raw repeats under `samples`.
- `merge_runs(runs)`: several `calibrate` roofline runs of one invocation into one: every figure recomputed over all
  runs' repeats, each run's medians kept under `runs`, and `run_to_run_pct` = (largest - smallest run median) /
  smallest, in percent, for the kernel-time and the wall-time TFLOP/s.

Caveats:
- A mode that failed in any run (out of memory, say) keeps the first run's error.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from scripts.benchmark.calibration.peak import summarize


def mode_figures(
    flops: float, tokens: int, kernel_s: Sequence[float], wall_s: Sequence[float], **extra: Any
) -> dict[str, Any]:
    """Summaries of one shape and mode from its repeats (kernel time is the headline)."""
    return {
        "tflops": summarize([flops / s / 1e12 for s in kernel_s]),
        "step_s": summarize(kernel_s),
        "wall_tflops": summarize([flops / s / 1e12 for s in wall_s]),
        "wall_step_s": summarize(wall_s),
        "tokens_per_s": statistics.median(tokens / s for s in kernel_s),
        **extra,
        "samples": {"kernel_s": list(kernel_s), "wall_s": list(wall_s)},
    }


def spread_pct(values: Sequence[float]) -> float:
    """(largest - smallest) / smallest, in percent."""
    return 100.0 * (max(values) - min(values)) / min(values)


def _merge_mode(flops: float, tokens: int, modes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    failed = next((m for m in modes if "error" in m), None)
    if failed is not None:
        return failed
    kernel = [s for m in modes for s in m["samples"]["kernel_s"]]
    wall = [s for m in modes for s in m["samples"]["wall_s"]]
    memory = [m["peak_memory_gib"] for m in modes if m.get("peak_memory_gib") is not None]
    merged = mode_figures(
        flops,
        tokens,
        kernel,
        wall,
        kernels_per_step=modes[0].get("kernels_per_step"),
        peak_memory_gib=max(memory) if memory else None,
        gpu_state_after=modes[-1].get("gpu_state_after"),
    )
    merged["runs"] = [
        {key: m[key]["median"] for key in ("tflops", "wall_tflops", "step_s", "wall_step_s")} for m in modes
    ]
    merged["run_to_run_pct"] = {key: spread_pct([r[key] for r in merged["runs"]]) for key in ("tflops", "wall_tflops")}
    return merged


def merge_runs(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Preset -> roofline entry, pooled over `runs` (each a preset -> entry mapping of one run)."""
    if not runs:
        raise ValueError("merge_runs needs at least one run")
    merged: dict[str, Any] = {}
    for preset, first in runs[0].items():
        entries = [run[preset] for run in runs]
        if any("shapes" not in e for e in entries):
            merged[preset] = next(e for e in entries if "shapes" not in e)
            continue
        shapes = {}
        for name, shape in first["shapes"].items():
            modes = {
                mode: _merge_mode(
                    shape["model_train_flops_per_step"],
                    shape["tokens"],
                    [e["shapes"][name]["grad_ckpt"][mode] for e in entries],
                )
                for mode in shape["grad_ckpt"]
            }
            shapes[name] = {**shape, "grad_ckpt": modes}
        merged[preset] = {**first, "runs": len(runs), "shapes": shapes}
    return merged
