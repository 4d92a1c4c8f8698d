"""Folder names with shell and Hydra syntax in them round-trip through plan, the cell scripts and execute.

The cell scripts run for real (bash), with stand-ins for the frameworks: a `verl` package whose main_ppo parses its
overrides with Hydra's own parser, a Miles train.py, and a `ray` that runs jobs as Ray does (list2cmdline + /bin/sh).
The data conversion of the plan runs for real into the hostile folder. Nothing a name contains may be executed: the
name holds `$(touch pwned)`, and no file named `pwned` may appear. A folder Ray's shell line cannot carry is refused
by the dry run of a plan with Miles cells; the hostile folder is planned with VERL alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.benchmark.standins.plans import REPO_ROOT, RUN_PY, STANDINS

SAFE_FOR_RAY = "a b,c=d@e%f+g:h"
HOSTILE = "$(touch pwned) $5 ,=(x) 'q' \"dq\" ${oc.env:HOME} back\\slash\nnewline"
STEPS = 3


def _spec(tmp: Path) -> Path:
    """The smoke preset with local data and no downloads (so the scripts' prepare step is the real conversion)."""
    spec = yaml.safe_load((REPO_ROOT / "scripts/benchmark/presets/smoke.yaml").read_text())
    data = tmp / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i}", "label": str(i)}) + "\n" for i in range(100)))
    spec["model"].pop("hf_repo")
    spec["data"].pop("hf_repo")
    spec["model"]["hf_checkpoint"] = str(tmp / "model")
    spec["data"]["prompt_data"] = str(data)
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _environment(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')  # this venv, by its own path
    (bin_dir / "python3").chmod(0o755)
    (bin_dir / "ray").write_text(f"#!{sys.executable}\n" + (STANDINS / "standin_ray_shell.py").read_text())
    (bin_dir / "ray").chmod(0o755)
    return {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(STANDINS / "verl_pkg"),
        "STANDIN_VERL_RECORD": str(tmp / "verl-record.jsonl"),
        "STANDIN_MILES_RECORD": str(tmp / "miles-record.jsonl"),
    }


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _plan(tmp: Path, out: Path, env: dict[str, str], *sides: str, code: int = 0):
    miles_root = tmp / "miles"
    if not miles_root.exists():
        miles_root.mkdir()
        (miles_root / "train.py").symlink_to(STANDINS / "standin_miles_train.py")
    argv = [
        sys.executable,
        str(RUN_PY),
        "--backend",
        "fsdp",
        *(sides or ["--compare-verl"]),
        "--spec",
        str(_spec(tmp)),
    ]
    argv += ["--output-dir", str(out), "--num-steps", str(STEPS), "--miles-root", str(miles_root), "--dry-run"]
    planned = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp / "work", timeout=120)
    assert planned.returncode == code, planned.stderr
    return json.loads((out / "plan.json").read_text()) if code == 0 else planned


@pytest.mark.parametrize("name", [SAFE_FOR_RAY, HOSTILE], ids=["ray-safe", "hostile"])
def test_a_folder_name_round_trips_through_plan_scripts_and_execute(tmp_path: Path, name: str):
    (tmp_path / "work").mkdir()
    env = _environment(tmp_path)
    out = tmp_path / name / "out"
    if name == HOSTILE:  # Ray would run Miles's command through /bin/sh: the dry run refuses the folder for Miles
        refused = _plan(tmp_path, out, env, code=2)
        assert "Ray job submission" in refused.stderr and "--output-dir" in refused.stderr and not out.exists()
    plan = _plan(tmp_path, out, env, *(["--candidate", "verl"] if name == HOSTILE else []))
    cell_dirs = {cell["framework"]: out / "cells" / cell["id"] / "rep-0" for cell in plan["cells"]}
    parquet = out / "data" / "prompts.rows-0-96.parquet"

    scripts = {cell["framework"]: out / cell["script"] for cell in plan["cells"]}
    verl = subprocess.run(["bash", str(scripts["verl"])], capture_output=True, text=True, env=env,
                          cwd=tmp_path / "work", timeout=120)  # fmt: skip
    assert verl.returncode == 0, verl.stderr
    assert parquet.is_file() and (out / "data" / "prompts.rows-0-96.val.parquet").is_file()
    [record] = _records(tmp_path / "verl-record.jsonl")
    assert record["data.train_files"] == str(parquet)
    assert record["hydra.run.dir"] == f"{cell_dirs['verl']}/hydra"
    assert record["actor_rollout_ref.model.path"] == str(tmp_path / "model")
    assert (cell_dirs["verl"] / "sink" / "verl.jsonl").is_file()

    if name == SAFE_FOR_RAY:
        miles = subprocess.run(["bash", str(scripts["miles"])], capture_output=True, text=True, env=env,
                               cwd=tmp_path / "work", timeout=120)  # fmt: skip
        assert miles.returncode == 0, miles.stderr
        [miles_record] = _records(tmp_path / "miles-record.jsonl")
        assert miles_record["cell_dir"] == str(cell_dirs["miles"])

    run_dir = tmp_path / name / "run"
    execute = [sys.executable, str(RUN_PY), "execute", str(out / "plan.json"), "--output-dir", str(run_dir)]
    execute += ["--no-preflight", "--ray", "none", "--poll-interval-s", "0.05", "--repeats", "1"]
    ran = subprocess.run(execute, capture_output=True, text=True, env=env, cwd=tmp_path / "work", timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert {(c["state"], c["steps_completed"]) for c in manifest["cells"]} == {("complete", STEPS)}
    executed = _records(tmp_path / "verl-record.jsonl")[-1]
    assert executed["hydra.run.dir"] == f"{run_dir}/cells/verl-fsdp-colocate/rep-0/hydra"
    assert executed["data.train_files"] == str(run_dir / "data" / parquet.name)  # the plan's data moves with it

    assert not any(path.name == "pwned" for path in tmp_path.rglob("*"))
    assert not (REPO_ROOT / "pwned").exists()


def test_a_miles_without_the_tracking_backend_fails_its_cell_by_naming_the_sink(tmp_path: Path):
    """The plan gives the in-tree Miles the tracking sink; a checkout without the patch series ignores
    BENCH_TRACKING_DIR and prints to stdout only: the cell fails and says which sink never appeared."""
    (tmp_path / "work").mkdir()
    env = {**_environment(tmp_path), "STANDIN_MILES_WITHOUT_TRACKING": "1"}
    out = tmp_path / "out"
    plan = _plan(tmp_path, out, env)
    miles_only = {**plan, "cells": [c for c in plan["cells"] if c["framework"] == "miles"]}
    assert miles_only["cells"][0]["sink"]["format"] == "miles-tracking"
    (out / "plan.json").write_text(json.dumps(miles_only))
    run_dir = tmp_path / "run"
    execute = [sys.executable, str(RUN_PY), "execute", str(out / "plan.json"), "--output-dir", str(run_dir)]
    execute += ["--no-preflight", "--ray", "none", "--poll-interval-s", "0.05", "--repeats", "1"]
    ran = subprocess.run(execute, capture_output=True, text=True, env=env, cwd=tmp_path / "work", timeout=180)
    [cell] = json.loads((run_dir / "manifest.json").read_text())["cells"]
    assert ran.returncode != 0, ran.stdout + ran.stderr
    assert (cell["state"], cell["steps_completed"], cell["sink_format"]) == ("failed", 0, "miles-tracking")
    reason = cell["reason"]
    assert "miles-tracking sink" in reason and "holds no files" in reason, cell
    assert " perf 0: {" in (run_dir / "cells" / cell["id"] / "rep-0" / "log.txt").read_text()
