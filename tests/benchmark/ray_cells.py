"""Helpers of the real-Ray and real-Slurm runner tests: Miles-style cells (`ray job submit -- python3
standin_trainer.py`), the harness command line, an environment with a process mark and small Ray nodes, polling."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from scripts.benchmark.runner.ray_head import ray_environment
from tests.benchmark.process_marks import MARK_VAR
from tests.benchmark.standins.plans import RUN_PY, standin_cell

RAY = Path(sys.executable).parent / "ray"
# Small nodes for a 2-core CI machine: one CPU each, a 100 MB object store.
SMALL_NODE = ["--num-cpus=1", "--object-store-memory=100000000"]
RUNTIME_ENV = {"env_vars": {"STANDIN_JOB_ENV": "from-runtime-env"}}


def require_ray() -> None:
    if not RAY.is_file():
        pytest.fail(f"the Ray CLI is missing at {RAY}: run tests/benchmark/setup_env.sh (requirements-test.txt)")


def ray_cell(
    backend: str, tmp_path: Path, *, steps: int, extra: list[str], submit: list[str] = (), gpus_per_node: int = 0
) -> dict:
    """A Miles-style cell: `ray job submit ... -- python3 standin_trainer.py`, like Miles's own launchers."""
    cell = standin_cell("miles", backend=backend, steps=steps, step_s=0.2, python="python3")
    probes = ["--pid-file", str(tmp_path / f"{backend}.pids"), "--sigterm-file", str(tmp_path / f"{backend}.sigterm")]
    cell["argv"] += [*probes, *extra]
    cell["launch_argv"] = [
        "ray", "job", "submit", "--address", "http://127.0.0.1:8265", *submit,
        "--runtime-env-json", json.dumps(RUNTIME_ENV), "--", *cell["argv"],
    ]  # fmt: skip
    cell["gpus"] = {**cell["gpus"], "per_node": gpus_per_node}
    return cell


def harness(*args: str) -> list[str]:
    return [
        sys.executable, str(RUN_PY), "execute", *args, "--no-preflight",  # stand-ins on a machine without GPUs
        "--miles-python", sys.executable, "--grace-s", "15", "--poll-interval-s", "0.1",
    ]  # fmt: skip


def marked_env(mark: dict[str, str], **extra: str) -> dict[str, str]:
    """The environment of the tests' own Ray commands and harnesses: Ray's auth mode decided as the harness decides
    it (a cluster a user starts where a Ray token exists runs with token authentication)."""
    base = {k: v for k, v in ray_environment(os.environ).items() if k not in ("RAY_ADDRESS", MARK_VAR)}
    return {**base, **mark, "BENCH_RAY_START_ARGS": " ".join(SMALL_NODE), **extra}


def wait_for(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def wait_for_step(run_dir: Path, cell_id: str, *, still_running: Callable[[], bool], timeout_s: float = 180) -> None:
    """Until repeat 0 of the cell wrote a step to metrics.jsonl; AssertionError if the run ends first."""
    metrics = run_dir / "cells" / cell_id / "rep-0" / "metrics.jsonl"

    def stepping() -> bool:
        if not still_running():
            raise AssertionError(f"the run ended before {cell_id} wrote a step")
        return metrics.is_file() and metrics.stat().st_size > 0

    wait_for(stepping, timeout_s, f"a step of {cell_id}")
