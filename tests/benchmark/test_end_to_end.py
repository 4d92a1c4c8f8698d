"""The pieces fit: dry-run plan -> hand-edited plan (stand-in executables) -> execute -> report -> record -> check.

Every step is the real `run.py` in a subprocess, as a maintainer types it. Only the framework commands of the plan are
replaced (by tests/benchmark/standins/standin_trainer.py, which writes the real Miles and VERL sink formats); the
sinks, environment, parity table and spec hash are the plan's own, so the report compares Miles with VERL through the
real readers and the real parity.json, and the history accepts what the report wrote.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from scripts.benchmark.contracts.parity import read_parity_file
from tests.benchmark.standins.plans import REPO_ROOT, RUN_PY, STANDINS, reprove

STEP_S = 0.05


def _run_py(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RUN_PY), *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
    )


def _substitute_standins(plan_path: Path) -> dict:
    """What a test does to a plan: other executables for the framework commands, nothing else, proven again (the
    runner refuses launch words parity.json did not prove)."""
    plan = json.loads(plan_path.read_text())
    for cell in plan["cells"]:
        sink = cell["sink"]
        argv = [sys.executable, str(STANDINS / "standin_trainer.py"), "--format", sink["format"]]
        argv += ["--sink", sink["path"], "--steps", str(cell["num_steps"]), "--step-s", str(STEP_S)]
        argv += ["--startup-s", "0.02"]
        cell["argv"], cell["launch_argv"] = argv, list(argv)
    plan_path.write_text(json.dumps(plan, indent=2))
    reprove(plan_path.parent)
    return plan


def test_dry_run_edit_execute_report_record_check(tmp_path: Path):
    plan_dir, run_dir, store = tmp_path / "D", tmp_path / "R", f"sqlite:///{tmp_path / 'history.db'}"
    planned = _run_py(
        "--preset", "smoke", "--backend", "fsdp", "--compare-verl", "--output-dir", str(plan_dir), "--dry-run"
    )
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = _substitute_standins(plan_dir / "plan.json")
    assert [c["id"] for c in plan["cells"]] == ["miles-fsdp-colocate", "verl-fsdp-colocate"]

    executed = _run_py("execute", str(plan_dir / "plan.json"), "--output-dir", str(run_dir), "--skip-prepare",
                       "--no-preflight", "--poll-interval-s", "0.05", "--repeats", "1")  # fmt: skip
    assert executed.returncode == 0, executed.stdout + executed.stderr

    manifest = json.loads((run_dir / "manifest.json").read_text())
    steps = plan["spec"]["run"]["num_steps"]
    assert [(c["id"], c["state"], c["steps_completed"]) for c in manifest["cells"]] == [
        ("miles-fsdp-colocate", "complete", steps),
        ("verl-fsdp-colocate", "complete", steps),
    ]
    assert manifest["spec_hash"] == plan["spec_hash"] and manifest["warnings"] == [] and manifest["prepare"] == []
    miles_dir, verl_dir = (run_dir / c["dir"] for c in manifest["cells"])
    # Miles's sink for the in-tree target: the tracking backend's per-process files, as plan.json says
    assert plan["cells"][0]["sink"]["format"] == "miles-tracking"
    assert [c["sink_format"] for c in manifest["cells"]] == ["miles-tracking", "verl-file-logger"]
    assert sorted(p.name.split("-")[0] for p in (miles_dir / "sink" / "miles-tracking").glob("*.jsonl")) == [
        "rollout_manager",
        "train",
    ]
    assert not (miles_dir / "sink" / "rollout_manager.jsonl").exists() and (verl_dir / "sink" / "verl.jsonl").is_file()
    for cell in manifest["cells"]:
        records = [json.loads(line) for line in (run_dir / cell["metrics"]).read_text().splitlines()]
        assert [r["step"] for r in records] == list(range(1, steps + 1))
        assert {r["framework"] for r in records} == {cell["framework"]} and {r["schema_version"] for r in records} == {
            2
        }
        assert all(r["phases_s"]["generate"] > 0 and r["phases_s"]["train"] > 0 for r in records)
    miles_last = json.loads((run_dir / manifest["cells"][0]["metrics"]).read_text().splitlines()[-1])
    assert miles_last["step_time_s"] is None and "miles_shift:no_next_step" in miles_last["flags"]

    report = json.loads((run_dir / "report.json").read_text())
    assert report["spec_hash"] == plan["spec_hash"] and report["refused"] == []
    assert report["parity"] == read_parity_file(plan_dir / "parity.json").model_dump(mode="json")
    step = next(c for c in report["comparisons"] if c["metric"] == "step_time_s")
    assert (step["backend"], step["layout"]) == ("fsdp", "colocate") and step["ratio"] > 0
    assert math.isfinite(step["candidate"]) and math.isfinite(step["reference"])
    assert (step["candidate_cell"], step["reference_cell"]) == ("miles-fsdp-colocate", "verl-fsdp-colocate")
    miles_cell = next(c for c in report["cells"] if c["framework"] == "miles")
    assert miles_cell["samples"]["step_time_s"][0] and not any(
        map(math.isnan, miles_cell["samples"]["step_time_s"][0])
    )
    assert "## Miles vs VERL: fsdp / colocate" in (run_dir / "report.md").read_text()
    for name in ("report.html", "plots/phase_bars.svg", "plots/step_times.svg", "plots/ratios.svg"):
        assert (run_dir / name).stat().st_size > 0, name
    assert "Miles vs VERL at a glance" in executed.stdout and "**fsdp / colocate**" in executed.stdout

    missing = _run_py("check", str(run_dir), "--store", store)
    assert missing.returncode == 2 and "no history database" in missing.stderr and store in missing.stderr
    assert not (tmp_path / "history.db").exists() and "Traceback" not in missing.stderr
    checked = _run_py("check", str(run_dir), "--store", store, "--create")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "cold start" in checked.stdout and "ERROR" not in checked.stdout
    recorded = _run_py("record", str(run_dir), "--store", store)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert recorded.stdout.count("recorded run") == 2 and "trusted=False" not in recorded.stdout
    again = _run_py("check", str(run_dir), "--store", store)
    assert again.returncode == 0, again.stdout + again.stderr
