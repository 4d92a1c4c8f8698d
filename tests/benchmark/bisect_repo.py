"""Test helpers for `run.py bisect` on a real repository: the Miles snapshot in a git repository with synthetic
commits on top, one of which makes the step slower, and the environment its probes run in.

- `snapshot_repo(root)`: the snapshot committed as it is, then the good end (train.py replaced by a stand-in that runs
  tests/benchmark/standins/standin_miles_train.py at the step time its commit states in bench_step_s.txt, and
  records which checkout ran, its step time, pid and start time) and `COMMITS_AFTER_GOOD` synthetic commits; commit
  `SLOWDOWN_AT` and every later one are 25% slower. Returns (repo, shas of the good end and every later commit).
- `standin_environment(tmp)`: a stand-in `ray` CLI (its head listens on the ports it is given) and `python3` = this
  interpreter on PATH, and where the stand-ins record.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from tests.benchmark.standins.plans import STANDINS

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = Path(os.environ.get("MILES_BENCH_UPSTREAM", REPO_ROOT.parent / "shared" / "upstream"))
SNAPSHOT = "miles-31f1ca9.tar.gz"
FAST_S, SLOW_S = 0.02, 0.025
COMMITS_AFTER_GOOD = 6
SLOWDOWN_AT = 4
"""The synthetic commit (1-based, after the good end) that makes every later step 25% slower."""
RECORD = "checkouts.jsonl"

STANDIN_TRAIN = """# Test stand-in: the stand-in Miles trainer at this commit's step time (bench_step_s.txt).
import json, os, runpy, sys
here = os.path.dirname(os.path.abspath(__file__))
os.environ["STANDIN_STEP_S"] = open(os.path.join(here, "bench_step_s.txt")).read().strip()
stat = open("/proc/self/stat").read()
started = int(stat[stat.rfind(")") + 2 :].split()[19])
with open(os.environ["BISECT_TEST_RECORD"], "a") as f:
    f.write(json.dumps({{"checkout": here, "step_s": os.environ["STANDIN_STEP_S"], "pid": os.getpid(),
                        "start": started}}) + "\\n")
sys.argv[0] = {trainer!r}
runpy.run_path({trainer!r}, run_name="__main__")
"""


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def snapshot_repo(root: Path) -> tuple[Path, list[str]]:
    """The repository of the module docstring in root/miles; skipped (failed where required) without the snapshot."""
    archive = UPSTREAM / SNAPSHOT
    if not archive.is_file():
        if os.environ.get("MILES_BENCH_REQUIRE_MILES_OVERLAY") == "1":
            pytest.fail(f"no Miles snapshot {archive} (MILES_BENCH_REQUIRE_MILES_OVERLAY=1)")
        pytest.skip(f"no Miles snapshot {archive}")
    repo = root / "miles"
    with tarfile.open(archive) as tar:
        tar.extractall(repo.parent, filter="data")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "Miles 31f1ca9")
    (repo / "train.py").write_text(STANDIN_TRAIN.format(trainer=str(STANDINS / "standin_miles_train.py")))
    shas = []
    for number in range(COMMITS_AFTER_GOOD + 1):
        (repo / "bench_step_s.txt").write_text(f"{SLOW_S if number >= SLOWDOWN_AT else FAST_S}\n")
        (repo / "miles" / "bench_synthetic.py").write_text(f"CHANGE = {number}\n")
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "stand-in trainer (the good end)" if number == 0 else f"synthetic change {number}")
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    return repo, shas


def standin_environment(tmp: Path) -> dict[str, str]:
    """A stand-in `ray` (its head listens on the ports it is given) and `python3` = this interpreter, on PATH."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "python3").exists():
        (bin_dir / "python3").symlink_to(sys.executable)
        (bin_dir / "ray").write_text(f"#!{sys.executable}\n" + (STANDINS / "standin_ray.py").read_text())
        (bin_dir / "ray").chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "GITHUB_STEP_SUMMARY")}
    return {**base, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STANDIN_MILES_RECORD": str(tmp / "miles.jsonl"),
            "BISECT_TEST_RECORD": str(tmp / RECORD)}  # fmt: skip


def worktree_paths(repo: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in git(repo, "worktree", "list", "--porcelain").splitlines()
            if line.startswith("worktree ")]  # fmt: skip
