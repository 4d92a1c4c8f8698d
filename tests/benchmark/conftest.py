"""Shared fixtures: where the real upstream artifacts live (the isolated VERL 0.9.1 wheel, the Miles release: each
fetched with pip into .cache/ when absent, the rule Miles's CI job follows as this project's set-up does); the
benchmark's own pytest markers, registered here so that they hold wherever the tests run: in this project and in
Miles, whose pytest settings are `--strict-markers` and declare no markers (tests/benchmark sits under its tests/)."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
VERL_CONFIG = Path("verl/trainer/config/ppo_trainer.yaml")

MARKERS = {
    "gpu": "needs a CUDA device (run on the lent accelerator and Miles's GPU suites; skipped in CPU CI)",
    "cluster": "starts a real Ray cluster or Slurm (tens of seconds each; deselect with -m 'not cluster')",
}


def pytest_configure(config):
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")


def fetched(folder: Path, check: Path, requirements: list[str], require_env: str) -> Path:
    """`folder`, holding `check` once `pip install --no-deps --target folder REQUIREMENTS` has run (what
    tests/benchmark/setup_env.sh does here): installed now when it is not there, into a scratch folder renamed into
    place, so a run cut short leaves nothing half-installed. Where pip cannot fetch (no package index), the test
    skips with pip's reason, or fails when `require_env` is 1."""
    if (folder / check).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(scratch), *requirements]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not (scratch / check).is_file():
        shutil.rmtree(scratch, ignore_errors=True)
        reason = (
            f"could not fetch {' '.join(requirements)} into {folder}: {(done.stderr.strip() or 'no output')[-400:]}"
        )
        if os.environ.get(require_env) == "1":
            pytest.fail(f"{reason} ({require_env}=1)")
        pytest.skip(reason)
    try:
        scratch.rename(folder)
    except OSError:  # another process fetched it first
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


@pytest.fixture(scope="session")
def verl_root() -> Path:
    """Folder holding the VERL 0.9.1 wheel installed with `pip install --no-deps --target`, never on sys.path
    (VERL_ISOLATED_DIR, else .cache/verl-0.9.1, fetched there when absent)."""
    if os.environ.get("VERL_ISOLATED_DIR"):
        root = Path(os.environ["VERL_ISOLATED_DIR"])
        if not (root / VERL_CONFIG).is_file():
            pytest.fail(f"VERL_ISOLATED_DIR={root} holds no VERL 0.9.1 ({VERL_CONFIG})")
        return root
    return fetched(
        REPO_ROOT / ".cache" / "verl-0.9.1", VERL_CONFIG, ["verl==0.9.1"], "MILES_BENCH_REQUIRE_VERL_CHECKS"
    )


@pytest.fixture(scope="session")
def miles_release() -> Path:
    """Folder holding the miles-rl release (and what its parser imports beyond the test interpreter), installed with
    `pip install --no-deps --target` from requirements-miles-release.txt, never on this process's sys.path (its
    `miles` would shadow ours): MILES_RELEASE_DIR, else .cache/miles-rl-<release>, fetched there when absent."""
    from scripts.benchmark.frameworks.miles.parser_check import release_dir

    requirements = ["-r", str(Path(__file__).resolve().parent / "requirements-miles-release.txt")]
    return fetched(release_dir(), Path("miles/utils/arguments.py"), requirements, "MILES_BENCH_REQUIRE_VERL_CHECKS")
