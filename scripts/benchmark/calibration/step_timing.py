"""Timing one training step two ways: host-launched wall time, and the GPU's own kernel time.

A plain transformers step is launched op by op from Python. On a small model or a short pack the host cannot queue
kernels as fast as the GPU runs them, so the wall time of the step measures the host's CPU (which differs between
lent machines) more than the GPU. The GPU's kernel time is what the step costs the GPU with the launch gaps removed:
the ceiling a framework reaches when it launches well (CUDA graphs, fused kernels).

- `time_step(step, device, ...)` runs `warmup` untimed steps, then `wall_repeats` steps each between CUDA events
  (a host clock on the CPU), then on a GPU `kernel_repeats` steps each under PyTorch's profiler, whose kernel,
  memcpy and memset records give the union of the intervals in which the GPU was busy.
- `busy_ns(intervals)` is the length of a union of [start, end) intervals.

Caveats:
- On the CPU there is no kernel time: the host-timed step stands in for it.
- The profiler slows the host, never the kernels: profiled steps are used only for their kernel time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

GPU_ACTIVITIES: frozenset[str] = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})


def busy_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by [start, end) intervals, overlaps counted once."""
    total, cover_end = 0, None
    for start, end in sorted(intervals):
        if cover_end is None or start >= cover_end:
            total += end - start
            cover_end = end
        elif end > cover_end:
            total += end - cover_end
            cover_end = end
    return total


def _is_gpu_work(event: Any) -> bool:
    from torch.autograd import DeviceType

    if event.device_type() != DeviceType.CUDA or event.is_user_annotation():
        return False
    activity = getattr(event, "activity_type", None)
    return activity is None or activity() in GPU_ACTIVITIES


def gpu_kernel_seconds(step: Callable[[], None], device: Any) -> tuple[float, int]:
    """GPU busy seconds of one step (union of its kernel, memcpy and memset intervals) and its kernel count."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize(device)
    work = [e for e in prof.profiler.kineto_results.events() if _is_gpu_work(e)]
    if not work:
        raise RuntimeError("the profiler recorded no GPU work for a training step (CUPTI unavailable?)")
    busy = busy_ns((e.start_ns(), e.start_ns() + e.duration_ns()) for e in work)
    return busy / 1e9, len(work)


def _wall_seconds(step: Callable[[], None], device: Any) -> float:
    import torch

    if device.type != "cuda":
        begin = time.perf_counter()
        step()
        return time.perf_counter() - begin
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    step()
    end.record()
    torch.cuda.synchronize(device)
    return start.elapsed_time(end) / 1e3


def time_step(
    step: Callable[[], None], device: Any, *, warmup: int, wall_repeats: int, kernel_repeats: int
) -> dict[str, Any]:
    """Wall seconds per repeat and, on a GPU, kernel seconds per repeat and kernels per step."""
    if warmup < 1 or wall_repeats < 1 or kernel_repeats < 1:
        raise ValueError(
            f"warmup, wall_repeats and kernel_repeats must be >= 1, got {warmup}, {wall_repeats}, " f"{kernel_repeats}"
        )
    for _ in range(warmup):
        step()
    wall = [_wall_seconds(step, device) for _ in range(wall_repeats)]
    if device.type != "cuda":
        return {"wall_s": wall, "kernel_s": list(wall), "kernels": None}
    kernel, counts = [], []
    for _ in range(kernel_repeats):
        seconds, count = gpu_kernel_seconds(step, device)
        kernel.append(seconds)
        counts.append(count)
    return {"wall_s": wall, "kernel_s": kernel, "kernels": max(counts)}
