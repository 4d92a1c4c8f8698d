"""Collective bandwidth between the GPUs of one node: the floor under weight sync and FSDP collectives.

- `measure_collectives(world_size, ...)` starts one process per GPU (torch.multiprocessing, spawn) and times
  all-gather, reduce-scatter, all-reduce and broadcast on message sizes 1 MiB .. 2 GiB (NCCL on GPUs; gloo on the
  CPU, which CI uses to test this launch with two processes and small sizes).
- Message size is the full buffer as nccl-tests defines it (the all-gather output, the reduce-scatter input, the
  all-reduce and broadcast buffer). algbw = size / time; busbw = algbw * factor, with factor (n-1)/n for all-gather
  and reduce-scatter, 2(n-1)/n for all-reduce and 1 for broadcast, so that busbw is comparable to link bandwidth.
- Time per op is the slowest rank's (all-reduce MAX of each rank's elapsed time over a loop of ops), median of rounds.
- `MULTICAST_OFF_ENV` is set in this process and again in every worker before any communicator exists: NVLink
  multicast (NVLS) stays off, as the lent machines require.

Caveats:
- One node only; cross-node links are not measured.
- Gloo numbers measure host memory copies and mean nothing about GPUs; they only prove the launch and bookkeeping.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

MULTICAST_OFF_ENV: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
COLLECTIVES: tuple[str, ...] = ("all_gather", "reduce_scatter", "all_reduce", "broadcast")
GPU_MESSAGE_BYTES: tuple[int, ...] = tuple(2**p for p in range(20, 32))  # 1 MiB .. 2 GiB


def apply_multicast_off_env() -> None:
    """Force NVLink multicast off in this process (and so in every child it starts)."""
    os.environ.update(MULTICAST_OFF_ENV)


def bus_bandwidth_factor(collective: str, world_size: int) -> float:
    """nccl-tests' busbw / algbw factor."""
    n = world_size
    factors = {
        "all_gather": (n - 1) / n,
        "reduce_scatter": (n - 1) / n,
        "all_reduce": 2 * (n - 1) / n,
        "broadcast": 1.0,
    }
    if collective not in factors:
        raise ValueError(f"unknown collective {collective!r}; expected one of {', '.join(COLLECTIVES)}")
    return factors[collective]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _run_collective(dist: Any, collective: str, buffers: dict[str, Any]) -> None:
    if collective == "all_gather":
        dist.all_gather_into_tensor(buffers["full"], buffers["shard"])
    elif collective == "reduce_scatter":
        dist.reduce_scatter_tensor(buffers["shard"], buffers["full"])
    elif collective == "all_reduce":
        dist.all_reduce(buffers["full"])
    else:
        dist.broadcast(buffers["full"], src=0)


def _verify_collectives(dist: Any, torch: Any, world_size: int, rank: int, device: Any) -> list[str]:
    """Each collective on rank-dependent values gives the exact expected result (before anything is timed)."""
    shard = torch.full((4,), float(rank + 1), device=device)
    full = torch.empty(4 * world_size, device=device)
    dist.all_gather_into_tensor(full, shard)
    expected = torch.arange(1, world_size + 1, device=device, dtype=full.dtype).repeat_interleave(4)
    checks = {"all_gather": torch.equal(full, expected)}
    full = torch.full((4 * world_size,), float(rank + 1), device=device)
    dist.reduce_scatter_tensor(shard, full)
    total = world_size * (world_size + 1) / 2
    checks["reduce_scatter"] = bool((shard == total).all())
    dist.all_reduce(full)
    checks["all_reduce"] = bool((full == total).all())
    full.fill_(float(rank + 1))
    dist.broadcast(full, src=0)
    checks["broadcast"] = bool((full == 1.0).all())
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        raise RuntimeError(f"rank {rank}: collectives gave wrong results: {', '.join(failed)}")
    return sorted(checks)


def _time_collective(dist: Any, torch: Any, collective: str, buffers: dict, device: Any, iters: int) -> float:
    """Seconds per op on the slowest rank, over one loop of `iters` ops."""
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    begin = time.perf_counter()
    for _ in range(iters):
        _run_collective(dist, collective, buffers)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = torch.tensor([time.perf_counter() - begin], dtype=torch.float64, device=device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return float(elapsed.item()) / iters


def _iters_for(num_bytes: int, budget_bytes: int) -> int:
    return max(2, min(20, budget_bytes // num_bytes))


def _collective_worker(rank: int, world_size: int, backend: str, port: int, options: dict, result_path: str) -> None:
    apply_multicast_off_env()
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world_size, device_id=device if backend == "nccl" else None)
    try:
        verified = _verify_collectives(dist, torch, world_size, rank, device)
        rows = []
        for num_bytes in options["message_bytes"]:
            numel = num_bytes // 2 // world_size * world_size
            full = torch.randn(numel, dtype=torch.float32, device=device).to(torch.bfloat16)
            buffers = {"full": full, "shard": torch.empty(numel // world_size, dtype=torch.bfloat16, device=device)}
            for collective in options["collectives"]:
                iters = _iters_for(num_bytes, options["budget_bytes"])
                _time_collective(dist, torch, collective, buffers, device, 2)  # warm-up, also sets up channels
                times = [
                    _time_collective(dist, torch, collective, buffers, device, iters) for _ in range(options["rounds"])
                ]
                seconds = statistics.median(times)
                algbw = numel * 2 / seconds / 1e9
                rows.append(
                    {
                        "collective": collective,
                        "message_bytes": numel * 2,
                        "time_s": seconds,
                        "algbw_gb_per_s": algbw,
                        "busbw_gb_per_s": algbw * bus_bandwidth_factor(collective, world_size),
                        "iters": iters,
                        "rounds": options["rounds"],
                    }
                )
            del full, buffers
        if rank == 0:
            env_seen = {k: os.environ.get(k) for k in MULTICAST_OFF_ENV}
            written = {"verified": verified, "table": rows, "env_seen_by_rank0": env_seen}
            Path(result_path).write_text(json.dumps(written), encoding="utf-8")
    finally:
        dist.destroy_process_group()


def measure_collectives(
    world_size: int,
    *,
    backend: str = "nccl",
    message_bytes: Sequence[int] = GPU_MESSAGE_BYTES,
    collectives: Sequence[str] = COLLECTIVES,
    rounds: int = 5,
    budget_bytes: int = 8 * 1024**3,
) -> dict[str, Any]:
    """Bus bandwidth table of each collective and size, over `world_size` processes (one per GPU for NCCL)."""
    import torch.multiprocessing as mp

    if world_size < 2:
        raise ValueError(f"collective bandwidth needs at least 2 processes, got world_size={world_size}")
    for collective in collectives:
        bus_bandwidth_factor(collective, world_size)
    bad = [b for b in message_bytes if b < 2 * world_size]
    if bad:
        raise ValueError(f"message sizes {bad} are too small to split over {world_size} ranks in bf16")
    apply_multicast_off_env()
    options = {
        "message_bytes": list(message_bytes),
        "collectives": list(collectives),
        "rounds": rounds,
        "budget_bytes": budget_bytes,
    }
    with tempfile.TemporaryDirectory() as tmp:
        result_path = str(Path(tmp) / "collectives.json")
        mp.start_processes(
            _collective_worker,
            args=(world_size, backend, _free_port(), options, result_path),
            nprocs=world_size,
            join=True,
            start_method="spawn",
        )
        written = json.loads(Path(result_path).read_text(encoding="utf-8"))
    rows = written["table"]
    peak = {
        c: max(r["busbw_gb_per_s"] for r in rows if r["collective"] == c)
        for c in collectives
        if any(r["collective"] == c for r in rows)
    }
    return {
        "world_size": world_size,
        "backend": backend,
        "env": written["env_seen_by_rank0"],
        "dtype": "bfloat16",
        "verified_collectives": written["verified"],
        "table": rows,
        "peak_busbw_gb_per_s": peak,
    }
