"""A plan carries what its dry run printed: `run.py --dry-run` then `run.py execute plan.json` runs the repeats the
dry run announced, and a plan made in one folder by one checkout executes from a copy of its folder elsewhere.

Every step is the real `run.py` in a subprocess; only the framework commands of the plan are replaced by the stand-in
trainer (tests/benchmark/standins/standin_trainer.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

from scripts.benchmark.contracts.plan import HARNESS_DIR
from scripts.benchmark.runner.relocate import relocated
from tests.benchmark.standins.plans import REPO_ROOT, RUN_PY, STANDINS, harness_argv, reprove, standin_cell, write_plan
from tests.benchmark.test_end_to_end import _run_py, _substitute_standins


def _plan(folder: Path, *extra: str) -> str:
    planned = _run_py("--preset", "smoke", "--backend", "fsdp", "--num-steps", "2", "--output-dir", str(folder),
                      "--dry-run", *extra)  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    _substitute_standins(folder / "plan.json")
    return planned.stdout


def _execute(plan: Path, run: Path, *extra: str):
    return _run_py("execute", str(plan), "--output-dir", str(run), "--skip-prepare", "--no-preflight",
                   "--poll-interval-s", "0.05", *extra)  # fmt: skip


def _repeats_run(run: Path) -> Counter:
    manifest = json.loads((run / "manifest.json").read_text())
    assert {c["state"] for c in manifest["cells"]} == {"complete"}
    return Counter(c["id"] for c in manifest["cells"])


def test_dry_run_then_execute_runs_the_repeats_the_dry_run_printed(tmp_path: Path):
    printed = _plan(tmp_path / "D", "--compare-verl")
    announced = int(re.search(r"repeats: (\d+) interleaved per cell", printed).group(1))
    assert announced == 3
    executed = _execute(tmp_path / "D" / "plan.json", tmp_path / "R")
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert _repeats_run(tmp_path / "R") == {"miles-fsdp-colocate": 3, "verl-fsdp-colocate": 3}


def test_a_repeats_option_of_the_dry_run_travels_and_execute_can_still_override_it(tmp_path: Path):
    printed = _plan(tmp_path / "D", "--repeats", "2")
    assert "repeats: 2 interleaved per cell" in printed
    assert json.loads((tmp_path / "D" / "plan.json").read_text())["repeats"] == 2
    assert _execute(tmp_path / "D" / "plan.json", tmp_path / "R2").returncode == 0
    assert _repeats_run(tmp_path / "R2") == {"miles-fsdp-colocate": 2}
    assert _execute(tmp_path / "D" / "plan.json", tmp_path / "R1", "--repeats", "1").returncode == 0
    assert _repeats_run(tmp_path / "R1") == {"miles-fsdp-colocate": 1}


def _as_planned_elsewhere(plan_path: Path, source: Path) -> None:
    """The plan as another checkout wrote it, edited as a node needs it: the node's dataset, no downloads, the
    stand-in trainer for the frameworks; the VERL cell starts only if the converted data is where its words say."""
    elsewhere = "/home/someone/miles/scripts/benchmark"
    plan = json.loads(plan_path.read_text().replace(str(HARNESS_DIR), elsewhere))
    assert plan["origin"] == {"run_dir": str(plan_path.parent), "harness": elsewhere}
    plan["prepare"] = [step for step in plan["prepare"] if not step["name"].startswith("download-")]
    convert = plan["prepare"][0]["argv"]
    convert[convert.index("--source") + 1] = str(source)
    for cell in plan["cells"]:
        words = [w.split("=", 1)[1] for w in cell["launch_argv"] if w.startswith("data.train_files=")]
        sink = cell["sink"]
        argv = [sys.executable, str(STANDINS / "standin_trainer.py"), "--format", sink["format"], "--sink",
                sink["path"], "--steps", str(cell["num_steps"]), "--step-s", "0.05"]  # fmt: skip
        if words:
            argv = ["bash", "-c", 'test -s "$1" || exit 3; shift; exec "$@"', "_", words[0], *argv]
        cell["argv"], cell["launch_argv"] = argv, list(argv)
    plan_path.write_text(json.dumps(plan, indent=2))
    reprove(plan_path.parent)


def test_a_plan_made_in_one_folder_executes_from_a_copy_in_another(tmp_path: Path):
    laptop, node = tmp_path / "laptop" / "D", tmp_path / "node"
    planned = _run_py("--preset", "smoke", "--backend", "fsdp", "--compare-verl", "--num-steps", "2", "--output-dir",
                      str(laptop), "--dry-run")  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    rows = "".join(json.dumps({"prompt": f"q{i}", "label": str(i)}) + "\n" for i in range(120))
    (tmp_path / "node-dataset.jsonl").write_text(rows)
    _as_planned_elsewhere(laptop / "plan.json", tmp_path / "node-dataset.jsonl")
    shutil.copytree(laptop, node / "D2")
    shutil.rmtree(tmp_path / "laptop")

    executed = _execute(node / "D2" / "plan.json", node / "R", "--prepare", "--repeats", "1")
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert _repeats_run(node / "R") == {"miles-fsdp-colocate": 1, "verl-fsdp-colocate": 1}
    assert list((node / "R" / "data").glob("*.parquet"))
    ran = [(node / "R" / "plan.json").read_text()] + [p.read_text() for p in (node / "R").rglob("command.sh")]
    assert all("laptop" not in text and "/home/someone" not in text for text in ran)
    assert json.loads(ran[0])["origin"] == {"run_dir": str(node / "R"), "harness": str(HARNESS_DIR)}


def test_only_whole_path_prefixes_move():
    plan = {"origin": {"run_dir": "/a/D", "harness": str(HARNESS_DIR)}, "prepare": [], "cells": [
        {"launch_argv": ["data.train_files=/a/D/x.parquet", "/a/D2/y", "/x/a/D/z", "/a/D", "/a/D.old/w"],
         "env": {"PYTHONPATH": "/m:/a/D/lib"}, "model_config": "/a/D/c.json"}]}  # fmt: skip
    cell = relocated(plan, Path("/r"))["cells"][0]
    assert cell["launch_argv"] == ["data.train_files=/r/x.parquet", "/a/D2/y", "/x/a/D/z", "/r", "/a/D.old/w"]
    assert cell["env"] == {"PYTHONPATH": "/m:/r/lib"} and cell["model_config"] == "/r/c.json"
    assert plan["cells"][0]["launch_argv"][0] == "data.train_files=/a/D/x.parquet"


def test_a_path_inside_a_quoted_override_moves_with_its_escapes():
    old, new = "/w/it's ${HOME}", "/r/b's"
    plan = {"origin": {"run_dir": old, "harness": str(HARNESS_DIR)}, "prepare": [],
            "cells": [{"launch_argv": ["data.train_files='/w/it\\'s \\${HOME}/data/x'"]}]}  # fmt: skip
    assert relocated(plan, Path(new))["cells"][0]["launch_argv"] == ["data.train_files='/r/b\\'s/data/x'"]


def test_resuming_a_finished_run_says_nothing_to_do_without_a_gpu_check(tmp_path: Path):
    plan = write_plan(tmp_path / "P", [standin_cell("verl", steps=2, step_s=0.02)])
    assert subprocess.run(harness_argv(str(plan), "--output-dir", str(tmp_path / "R")), timeout=120).returncode == 0
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:/bin"}  # no nvidia-smi: the GPU check would fail
    argv = [sys.executable, str(RUN_PY), "execute", "--resume", str(tmp_path / "R"), "--ray", "none"]
    resumed = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "nothing to do" in resumed.stdout + resumed.stderr


def _doc_execute_commands(name: str) -> list[list[str]]:
    """The `run.py execute` commands of a doc's bash blocks, as shell words (continuation lines joined)."""
    text = (REPO_ROOT / "docs" / "benchmark" / name).read_text()
    blocks = [block.split("```", 1)[0] for block in text.split("```bash\n")[1:]]
    lines = "\n".join(blocks).replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if "run.py execute" in line]


def test_the_slurm_recipe_of_the_docs_runs_the_repeats_its_plan_printed(tmp_path: Path):
    """multi-node.md's --emit-sbatch command, word for word, on a comparison planned with the default repeats: the
    script it writes runs `execute plan.json` as the doc gives it, and that plan carries the repeats it printed."""
    [emit] = [w for w in _doc_execute_commands("multi-node.md") if "--emit-sbatch" in w and "plan.json" in w]
    assert "--repeats" not in emit
    printed = _plan(tmp_path, "--compare-verl")
    [planned] = re.findall(r"repeats: (\d+) interleaved per cell", printed)
    argv = [sys.executable if w == "python" else str(RUN_PY) if w == "scripts/benchmark/run.py" else w for w in emit]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    script = (tmp_path / emit[emit.index("--emit-sbatch") + 1]).read_text()
    assert "execute plan.json --output-dir run1" in script
    assert json.loads((tmp_path / "plan.json").read_text())["repeats"] == int(planned) == 3
