"""Device ceilings measured on the card: achieved dense BF16 matmul rate and device-to-device copy bandwidth.

- `measure_matmul(device, shapes, ...)` times `torch.matmul` on random bf16 operands (never zeros: they run faster),
  rotating among several operand sets so no product reads another's inputs from L2; each product is timed on its
  own (CUDA events on a GPU, a host clock after a synchronize on the CPU) after a warm-up, and the summary is the
  median with its spread (p10, p90, min, max, n).
- `measure_copy(device, num_bytes, ...)` times `dst.copy_(src)`; bandwidth counts bytes read plus bytes written.
- `summarize(samples)` is the one summary used by every calibration number.

Caveats:
- The card is measured as found: clocks, power limit and other settings are never changed.
- On the CPU these functions only prove the code path (CI); their numbers mean nothing about any GPU.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

MatmulShape = tuple[int, int, int]

GPU_MATMUL_SHAPES: tuple[MatmulShape, ...] = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384))
GPU_COPY_BYTES = 2 * 1024**3


def summarize(samples: Sequence[float]) -> dict[str, float | int]:
    """Median and spread of one measurement's repeats."""
    if not samples:
        raise ValueError("summarize needs at least one sample, got none")
    ordered = sorted(samples)

    def quantile(q: float) -> float:
        pos = q * (len(ordered) - 1)
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return {
        "median": statistics.median(ordered),
        "p10": quantile(0.1),
        "p90": quantile(0.9),
        "min": ordered[0],
        "max": ordered[-1],
        "n": len(ordered),
    }


def time_calls(fn: Callable[[int], Any], device: Any, *, warmup: int, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls fn(i), after `warmup` untimed calls; CUDA events on a GPU."""
    import torch

    for i in range(warmup):
        fn(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
        for i in range(repeats):
            starts[i].record()
            fn(i)
            ends[i].record()
        torch.cuda.synchronize(device)
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]
    seconds = []
    for i in range(repeats):
        begin = time.perf_counter()
        fn(i)
        seconds.append(time.perf_counter() - begin)
    return seconds


def read_gpu_state(device: Any) -> dict[str, float | None] | None:
    """SM clock, power draw and temperature as NVML reads them now (read only; None where unavailable)."""
    import torch

    if device.type != "cuda":
        return None
    state: dict[str, float | None] = {}
    for name, read, scale in (
        ("sm_clock_mhz", torch.cuda.clock_rate, 1.0),
        ("power_w", torch.cuda.power_draw, 1e-3),
        ("temperature_c", torch.cuda.temperature, 1.0),
    ):
        try:
            state[name] = float(read(device)) * scale
        except Exception:  # noqa: BLE001 - NVML may be missing; the state is informative only
            state[name] = None
    return state


def measure_matmul(
    device: Any, shapes: Sequence[MatmulShape], *, warmup: int = 10, repeats: int = 50, num_operand_sets: int = 3
) -> dict[str, Any]:
    """Achieved bf16 matmul TFLOP/s per shape (2*m*n*k per product) and the best shape's median."""
    import torch

    results = []
    for m, n, k in shapes:
        generator = torch.Generator(device=device).manual_seed(m + n + k)
        operands = [
            (
                torch.randn(m, k, device=device, dtype=torch.bfloat16, generator=generator),
                torch.randn(k, n, device=device, dtype=torch.bfloat16, generator=generator),
            )
            for _ in range(num_operand_sets)
        ]
        out = torch.empty(m, n, device=device, dtype=torch.bfloat16)

        def product(i: int, operands=operands, out=out) -> None:
            a, b = operands[i % len(operands)]
            torch.matmul(a, b, out=out)

        seconds = time_calls(product, device, warmup=warmup, repeats=repeats)
        tflops = [2.0 * m * n * k / s / 1e12 for s in seconds]
        results.append(
            {"m": m, "n": n, "k": k, "tflops": summarize(tflops), "gpu_state_after": read_gpu_state(device)}
        )
        del operands, out
    best = max(results, key=lambda r: r["tflops"]["median"])
    return {
        "dtype": "bfloat16",
        "shapes": results,
        "best_median_tflops": best["tflops"]["median"],
        "best_shape": [best["m"], best["n"], best["k"]],
    }


def measure_copy(device: Any, num_bytes: int, *, warmup: int = 5, repeats: int = 30) -> dict[str, Any]:
    """Device-to-device copy bandwidth in GB/s (1e9 bytes), counting bytes read plus bytes written."""
    import torch

    numel = num_bytes // 2
    src = torch.randn(numel, device=device, dtype=torch.float32).to(torch.bfloat16)
    dst = torch.empty_like(src)
    seconds = time_calls(lambda _i: dst.copy_(src), device, warmup=warmup, repeats=repeats)
    moved = 2 * numel * src.element_size()
    return {"bytes_copied": numel * src.element_size(), "gb_per_s": summarize([moved / s / 1e9 for s in seconds])}


def measure_device_ceilings(
    device_indices: Sequence[int] | None, *, shapes: Sequence[MatmulShape], copy_bytes: int, repeats: int
) -> dict[str, Any]:
    """Matmul rate and copy bandwidth on every listed GPU (None: the CPU), plus node-level medians."""
    import torch

    devices = [torch.device("cpu")] if device_indices is None else [torch.device("cuda", i) for i in device_indices]
    per_device = []
    for device in devices:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        matmul = measure_matmul(device, shapes, repeats=repeats)
        copy = measure_copy(device, copy_bytes, repeats=max(5, repeats // 2))
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        per_device.append({"device": str(device), "name": name, "matmul_bf16": matmul, "d2d_copy": copy})
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return {
        "per_device": per_device,
        "bf16_tflops_median": statistics.median(d["matmul_bf16"]["best_median_tflops"] for d in per_device),
        "bf16_tflops_min_over_devices": min(d["matmul_bf16"]["best_median_tflops"] for d in per_device),
        "d2d_copy_gb_per_s_median": statistics.median(d["d2d_copy"]["gb_per_s"]["median"] for d in per_device),
    }
