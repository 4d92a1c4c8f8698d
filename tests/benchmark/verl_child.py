"""A FileLogger sink written by one of VERL's own code paths: a child script of `verl_children/` run with the VERL
check interpreter and the wheel on its path (VERL cannot be imported beside the project's packages)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from scripts.benchmark.frameworks.verl.config import find_verl_root
from scripts.benchmark.frameworks.verl.own_checks import find_check_python

CHILDREN = Path(__file__).resolve().parent / "verl_children"


def verl_child_output(child: str, *args: str) -> str:
    """The stdout of `verl_children/<child>` run with `args` (skips as `verl_child_sink` does)."""
    python, root = _interpreter()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "RAY_ADDRESS")}
    env.update(PYTHONPATH=str(root))
    argv = [str(python), str(CHILDREN / child), *args]
    done = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _interpreter() -> tuple[Path, Path]:
    python, root = find_check_python(), find_verl_root()
    if python is None or root is None:
        if os.environ.get("MILES_BENCH_REQUIRE_VERL_CHECKS") == "1":
            pytest.fail("MILES_BENCH_REQUIRE_VERL_CHECKS=1 but no VERL check interpreter or wheel")
        pytest.skip("no VERL check interpreter (.cache/verl-check-venv or VERL_CHECK_PYTHON)")
    return python, root


def verl_child_sink(folder: Path, child: str, *args: str) -> Path:
    """Run `verl_children/<child>` with `args`; the jsonl its FileLogger wrote. Skips without VERL's interpreter
    (fails instead under MILES_BENCH_REQUIRE_VERL_CHECKS=1)."""
    python, root = _interpreter()
    path = folder / "verl.jsonl"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "RAY_ADDRESS")}
    env.update(PYTHONPATH=str(root), VERL_FILE_LOGGER_PATH=str(path))
    argv = [str(python), str(CHILDREN / child), *args]
    done = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return path
