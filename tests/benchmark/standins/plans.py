"""Test helpers: plan.json files whose cells run the stand-in trainer, and a way to run the real harness on them."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from scripts.benchmark.spec import spec_json_hash

REPO_ROOT = Path(__file__).resolve().parents[3]
STANDINS = Path(__file__).resolve().parent
RUN_PY = REPO_ROOT / "scripts" / "benchmark" / "run.py"

SINKS = {
    "verl": {"format": "verl-file-logger", "path": "${BENCH_CELL_DIR}/sink/verl.jsonl"},
    "miles": {"format": "miles-stdout", "path": "${BENCH_CELL_DIR}/log.txt"},
}


def standin_cell(
    framework: str,
    *,
    backend: str = "fsdp",
    steps: int = 4,
    step_s: float = 0.1,
    extra: list[str] | None = None,
    python: str | None = None,
) -> dict:
    sink = SINKS[framework]
    argv = [
        python or sys.executable,
        str(STANDINS / "standin_trainer.py"),
        "--format",
        sink["format"],
        "--sink",
        sink["path"],
        "--steps",
        str(steps),
        "--step-s",
        str(step_s),
        *(extra or []),
    ]
    return {
        "id": f"{framework}-{backend}-colocate",
        "framework": framework,
        "backend": backend,
        "layout": "colocate",
        "argv": argv,
        "launch_argv": list(argv),
        "env": {"STANDIN_CELL": f"{framework}-{backend}"},
        "sink": dict(sink),
        "gpus": {"train": 1, "rollout": 1, "total": 1, "per_node": 1, "nodes": 1},
        "num_steps": steps,
        "model_config": "qwen3-0.6b",
        "script": f"cells/{framework}-{backend}-colocate.sh",
    }


def write_plan(folder: Path, cells: list[dict], prepare: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"test": "standin"}
    plan = {
        "schema_version": 1,
        "spec": spec,
        "spec_hash": spec_json_hash(spec),
        "preset": None,
        "prepare": prepare or [],
        "cells": cells,
    }
    path = folder / "plan.json"
    path.write_text(json.dumps(plan, indent=2))
    return path


def harness_argv(*args: str) -> list[str]:
    options = ["--no-preflight", "--ray", "none", "--poll-interval-s", "0.05"]
    return [sys.executable, str(RUN_PY), "execute", *args, *options]


def run_harness(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return run_py(*harness_argv(*args)[2:], env={**os.environ, **(env or {})}, timeout=timeout)


def read_manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def read_metric_steps(run_dir: Path, cell: dict) -> list[int]:
    path = run_dir / cell["metrics"]
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def read_pid_file(pid_file: Path) -> list[tuple[int, int]]:
    """(pid, start time) of every process a stand-in recorded."""
    pairs = []
    for line in pid_file.read_text().splitlines():
        pid, start = line.split()
        pairs.append((int(pid), int(start)))
    return pairs


def alive_processes(pid_file: Path) -> list[int]:
    """Recorded processes still running with their recorded start time (a reused pid does not count)."""
    from scripts.benchmark.runner.process import is_alive

    return [pid for pid, start in read_pid_file(pid_file) if is_alive(pid, start)]


@contextlib.contextmanager
def no_stray_processes(pid_file: Path) -> Iterator[None]:
    """Whatever a test asserts, no recorded stand-in process outlives it (SIGKILL by pid and start time)."""
    try:
        yield
    finally:
        import signal

        from scripts.benchmark.runner.process import signal_exact

        if pid_file.exists():
            for pid, start in read_pid_file(pid_file):
                signal_exact(pid, start, signal.SIGKILL)


def run_py(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real `run.py` in a subprocess, from the checkout, as a maintainer types it."""
    return subprocess.run(
        [sys.executable, str(RUN_PY), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env=env or os.environ,
    )


def reprove(plan_dir: Path) -> None:
    """parity.json's launch digests for the cells as plan.json now holds them: a test that puts the stand-in trainer
    in place of the planned launches proves its own cells, as the planner proves the launches it writes."""
    from scripts.benchmark.contracts.parity import parity_text, read_parity_file
    from scripts.benchmark.contracts.plan import launch_digest

    plan = json.loads((plan_dir / "plan.json").read_text())
    cells = {cell["id"]: cell for cell in plan["cells"]}
    proof = read_parity_file(plan_dir / "parity.json")
    pairs = []
    for pair in proof.pairs:
        digests = {
            f"{role}_digest": launch_digest(cells[getattr(pair, f"{role}_cell")], plan["prepare"], plan.get("origin"))
            for role in ("candidate", "reference")
            if getattr(pair, f"{role}_cell") in cells
        }
        pairs.append(pair.model_copy(update=digests))
    (plan_dir / "parity.json").write_text(parity_text(proof.model_copy(update={"pairs": pairs})))
