"""Shared fixtures: where the real upstream artifacts live (the isolated VERL 0.9.1 wheel, the Miles release); the
benchmark's own pytest markers, registered here so that they hold wherever the tests run: in this project and in
Miles, whose pytest settings are `--strict-markers` and declare no markers (tests/benchmark sits under its tests/)."""

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

MARKERS = {
    "gpu": "needs a CUDA device (run on the lent accelerator and Miles's GPU suites; skipped in CPU CI)",
    "cluster": "starts a real Ray cluster or Slurm (tens of seconds each; deselect with -m 'not cluster')",
}


def pytest_configure(config):
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


@pytest.fixture(scope="session")
def verl_root() -> Path:
    """Folder holding the VERL 0.9.1 wheel installed with `pip install --no-deps --target`, never on sys.path."""
    root = Path(os.environ.get("VERL_ISOLATED_DIR", REPO_ROOT / ".cache" / "verl-0.9.1"))
    if not (root / "verl" / "trainer" / "config" / "ppo_trainer.yaml").is_file():
        pytest.fail(
            f"VERL 0.9.1 is not installed at {root}: run "
            "`pip install --no-deps --target .cache/verl-0.9.1 verl==0.9.1` (or set VERL_ISOLATED_DIR)"
        )
    return root


@pytest.fixture(scope="session")
def miles_release() -> Path:
    """Folder holding the miles-rl release (and what its parser imports), installed with `pip install --no-deps
    --target` as the README's test command does; never on this process's sys.path (its `miles` would shadow ours)."""
    from scripts.benchmark.frameworks.miles.parser_check import release_dir

    root = release_dir()
    if not (root / "miles" / "utils" / "arguments.py").is_file():
        pytest.fail(
            f"the Miles release is not installed at {root}: run the README's test command (or set MILES_RELEASE_DIR)"
        )
    return root
