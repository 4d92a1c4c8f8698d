"""`run.py bisect` end to end on a real repository: the Miles snapshot with synthetic commits, one of which makes the
step slower (tests/benchmark/bisect_repo.py). Each probe checks out its two commits as git worktrees and runs the
real main command with the real runner on their own train.py (a stand-in trainer at the commit's step time, under a
stand-in `ray` CLI), judged by `ab`'s rule and recorded into a history store; only the trainer is a stand-in."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripts.benchmark.runner.process import is_alive
from tests.benchmark.bisect_repo import (
    FAST_S,
    RECORD,
    SLOW_S,
    SLOWDOWN_AT,
    snapshot_repo,
    standin_environment,
    worktree_paths,
)
from tests.benchmark.standins.plans import RUN_PY


@pytest.fixture(scope="module")
def miles_repo(tmp_path_factory) -> tuple[Path, list[str]]:
    return snapshot_repo(tmp_path_factory.mktemp("git"))


def _bisect_argv(repo: Path, good: str, bad: str, out: Path, *extra: str) -> list[str]:
    argv = [sys.executable, str(RUN_PY), "bisect", "--good", good, "--bad", bad, "--repo", str(repo)]
    argv += ["--preset", "smoke", "--backend", "fsdp", "--output-dir", str(out), "--budget-minutes", "900"]
    return argv + ["--no-preflight", "--skip-prepare", *extra]


def test_bisect_names_the_commit_that_made_the_step_slower(miles_repo, tmp_path):
    """Each probe checks out its two commits as worktrees and runs the paired check on their own train.py; the
    slower commit is named, each probe is recorded into the store with its side's commit, and no worktree is left."""
    repo, shas = miles_repo
    env, out, store = standin_environment(tmp_path), tmp_path / "bisect", tmp_path / "history.db"
    ran = subprocess.run(_bisect_argv(repo, shas[0], shas[-1], out, "--store", str(store), "--create"),
                         capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-6000:] + ran.stderr[-3000:]
    state = json.loads((out / "bisect.json").read_text())["state"]
    assert state["commits"][state["bad"]] == shas[SLOWDOWN_AT] and state["good"] == SLOWDOWN_AT - 1
    heads = [p["head"] for p in state["probes"]]
    assert heads == [3, SLOWDOWN_AT], state["probes"]
    assert [p["decision"] for p in state["probes"]] == ["NO_DIFFERENCE", "REGRESSED"]
    answer = (out / "bisect.md").read_text()
    assert f"### Bisect: {shas[SLOWDOWN_AT][:12]} (synthetic change {SLOWDOWN_AT}) made the step slower" in answer
    assert "cost, a round (a launch a side)" in ran.stdout and "budget: --budget-minutes 900" in ran.stdout
    assert all((Path(p["run_dir"]) / "ab.md").is_file() for p in state["probes"])
    launches = [json.loads(line) for line in (tmp_path / RECORD).read_text().splitlines()]
    ran_from = {(Path(x["checkout"]).name, x["step_s"]) for x in launches}  # each commit's own train.py and step
    expected = {(shas[i][:12], str(SLOW_S if i >= SLOWDOWN_AT else FAST_S)) for i in (0, 3, SLOWDOWN_AT)}
    assert ran_from == expected and {Path(x["checkout"]).parent for x in launches} == {out / "checkouts"}
    rows = _recorded(store)
    assert {(r["trigger"], r["trusted"]) for r in rows} == {("bisect", 0)} and len(rows) == 2 * len(heads)
    for probe in state["probes"]:
        sides = {r["cell_id"]: r["commit"] for r in rows if r["run_dir"] == probe["run_dir"]}
        assert sides == {"miles-fsdp-colocate": shas[probe["head"]], "miles-base-fsdp-colocate": shas[probe["base"]]}
    assert worktree_paths(repo) == [str(repo)] and not any((out / "checkouts").iterdir())


def _recorded(store: Path) -> list[dict]:
    import sqlite3

    with sqlite3.connect(store) as db:
        db.row_factory = sqlite3.Row
        query = 'SELECT cell_id, "commit", trigger, trusted, run_dir FROM bench_runs'
        return [dict(r) for r in db.execute(query)]


def test_sigterm_stops_the_probe_removes_the_worktrees_and_the_same_command_goes_on(miles_repo, tmp_path):
    """SIGTERM while a probe runs: the probe's run is stopped (exit 130), its worktrees are removed, bisect.json
    keeps what was decided; the same command then goes on and names the commit."""
    repo, shas = miles_repo
    env, out = standin_environment(tmp_path), tmp_path / "bisect"
    argv = _bisect_argv(repo, shas[0], shas[-1], out)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not list((out / "probes").glob("*/cells/*/rep-0/metrics.jsonl")):
            time.sleep(0.2)
        assert list((out / "checkouts").iterdir()), "no worktree while a probe runs"
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, output[-4000:]
    assert worktree_paths(repo) == [str(repo)] and not any((out / "checkouts").iterdir())
    data = json.loads((out / "bisect.json").read_text())
    assert data["state"]["stopped"].startswith("interrupted") and data["state"]["probes"] == []
    [probe_dir] = list((out / "probes").iterdir())
    cells = json.loads((probe_dir / "manifest.json").read_text())["cells"]
    assert [c["state"] for c in cells][:2] == ["interrupted", "pending"], [c["state"] for c in cells]
    trainers = [json.loads(line) for line in (tmp_path / RECORD).read_text().splitlines()]
    assert trainers and not [x["pid"] for x in trainers if is_alive(x["pid"], x["start"])]
    again = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    assert again.returncode == 0, again.stdout[-6000:] + again.stderr[-3000:]
    state = json.loads((out / "bisect.json").read_text())["state"]
    assert state["commits"][state["bad"]] == shas[SLOWDOWN_AT]
    assert len(list((out / "probes").iterdir())) == len(state["probes"]) + 1  # the interrupted probe's folder kept
