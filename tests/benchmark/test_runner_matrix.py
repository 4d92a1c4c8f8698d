"""The runner end to end: the real harness (run.py execute) on plans whose cells run stand-in executables.

Real subprocesses and real signals throughout; the stand-ins write the real VERL FileLogger and Miles event-log
formats step by step, and crash, stall or ignore SIGTERM on demand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.benchmark.runner.process import is_alive
from tests.benchmark.read_only import lock_read_only
from tests.benchmark.standins.plans import (
    REPO_ROOT,
    STANDINS,
    alive_processes,
    harness_argv,
    read_manifest,
    read_metric_steps,
    read_pid_file,
    run_harness,
    standin_cell,
    write_plan,
)

CELL_FILES = ("command.sh", "env.json", "log.txt", "sink", "metrics.jsonl", "environment.json")


class TestCleanMatrix:
    def test_two_frameworks_two_repeats_run_interleaved_and_record_every_step(self, tmp_path: Path):
        """The normal path: every cell repeat complete, Miles and VERL alternating (the first slot alternating
        too), all steps and files on disk."""
        plan = write_plan(
            tmp_path / "plan",
            [standin_cell("verl", python="python3"), standin_cell("miles", python="python3")],
        )
        run_dir = tmp_path / "run"
        result = run_harness(
            str(plan), "--output-dir", str(run_dir), "--repeats", "2",
            "--miles-python", sys.executable, "--verl-python", sys.executable,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr + result.stdout
        manifest = read_manifest(run_dir)
        assert [(c["framework"], c["repeat"]) for c in manifest["cells"]] == [
            ("miles", 0), ("verl", 0), ("verl", 1), ("miles", 1),
        ]  # fmt: skip
        assert all(c["state"] == "complete" and c["reason"] is None for c in manifest["cells"])
        for cell in manifest["cells"]:
            cell_dir = run_dir / cell["dir"]
            assert cell["dir"] == f"cells/{cell['id']}/rep-{cell['repeat']}"
            for name in CELL_FILES:
                assert (cell_dir / name).exists(), f"{cell['dir']}/{name} missing"
            assert read_metric_steps(run_dir, cell) == sorted(read_metric_steps(run_dir, cell))
            assert len(read_metric_steps(run_dir, cell)) == 4
            assert sys.executable in (cell_dir / "command.sh").read_text()  # --<fw>-python replaced python3
            env = json.loads((cell_dir / "env.json").read_text())
            assert env["plan_and_runner"]["BENCH_CELL_DIR"] == str(cell_dir)
            record = json.loads((cell_dir / "environment.json").read_text())
            assert record["hostname"] and "packages" in record and "gpu_count" in record
        starts = [c["started_at"] for c in manifest["cells"]]
        assert starts == sorted(starts)
        assert (run_dir / "plan.json").exists()
        assert "complete" in result.stdout  # plain progress lines when stdout is not a terminal


class TestFaults:
    def test_a_crash_mid_run_keeps_completed_steps_and_the_matrix_goes_on(self, tmp_path: Path):
        """A crashing cell is failed with its reason; its steps stay on disk; the next cell still runs."""
        plan = write_plan(
            tmp_path / "plan",
            [standin_cell("miles", steps=5, extra=["--crash-after", "2"]), standin_cell("verl", steps=3)],
        )
        run_dir = tmp_path / "run"
        result = run_harness(str(plan), "--output-dir", str(run_dir))
        assert result.returncode == 1
        miles, verl = read_manifest(run_dir)["cells"]
        assert miles["state"] == "failed"
        assert "exited with code 1 after 2 of 5 steps" in miles["reason"]
        assert read_metric_steps(run_dir, miles) == [1, 2]
        assert "standin crash on demand" in (run_dir / miles["dir"] / "log.txt").read_text()
        assert verl["state"] == "complete" and len(read_metric_steps(run_dir, verl)) == 3
        # the run still ends with its report (exit status unchanged): the complete cell, the failed one listed
        report = json.loads((run_dir / "report.json").read_text())
        assert [c["id"] for c in report["cells"]] == ["verl-fsdp-colocate"]
        assert [(i["cell_id"], i["state"]) for i in report["incomplete"]] == [("miles-fsdp-colocate", "failed")]
        assert (run_dir / "report.md").is_file() and (run_dir / "report.html").is_file()
        assert "Miles vs VERL at a glance" in result.stdout and f"report: wrote {run_dir / 'plots'}" in result.stdout
        assert read_manifest(run_dir)["warnings"] == []

    def test_fail_fast_leaves_the_remaining_cells_pending(self, tmp_path: Path):
        plan = write_plan(
            tmp_path / "plan",
            [standin_cell("miles", steps=3, extra=["--crash-after", "1"]), standin_cell("verl", steps=2)],
        )
        run_dir = tmp_path / "run"
        result = run_harness(str(plan), "--output-dir", str(run_dir), "--fail-fast")
        assert result.returncode == 1
        assert [c["state"] for c in read_manifest(run_dir)["cells"]] == ["failed", "pending"]

    def test_a_stalled_cell_is_stopped_by_the_watchdog(self, tmp_path: Path):
        """No new step within the stall window: the cell is stopped, failed as stalled, its steps kept."""
        pid_file = tmp_path / "pids"
        plan = write_plan(
            tmp_path / "plan",
            [standin_cell("verl", steps=6, extra=["--stall-after", "2", "--pid-file", str(pid_file)])],
        )
        run_dir = tmp_path / "run"
        started = time.monotonic()
        result = run_harness(str(plan), "--output-dir", str(run_dir), "--stall-timeout-s", "0.8", "--grace-s", "1")
        assert result.returncode == 1
        assert time.monotonic() - started < 20
        (cell,) = read_manifest(run_dir)["cells"]
        assert cell["state"] == "failed"
        assert cell["reason"].startswith("stalled: no new step for") and "after step 2" in cell["reason"]
        assert read_metric_steps(run_dir, cell) == [1, 2]
        assert alive_processes(pid_file) == []

    def test_a_child_that_ignores_sigterm_and_its_children_are_all_gone_afterwards(self, tmp_path: Path):
        """SIGTERM is ignored by the leader, its children and a setsid-escaped grandchild: SIGKILL reaches all."""
        pid_file = tmp_path / "pids"
        extra = ["--ignore-sigterm", "--spawn-children", "2", "--stall-after", "1", "--pid-file", str(pid_file)]
        plan = write_plan(tmp_path / "plan", [standin_cell("miles", steps=4, extra=extra)])
        run_dir = tmp_path / "run"
        limits = ["--first-step-timeout-s", "1", "--stall-timeout-s", "0.5", "--grace-s", "0.5"]
        result = run_harness(str(plan), "--output-dir", str(run_dir), *limits)
        assert result.returncode == 1
        assert len(read_pid_file(pid_file)) == 4  # the leader, two children, one escaped grandchild
        survivors = alive_processes(pid_file)
        assert survivors == [], f"still running: {survivors}"
        (cell,) = read_manifest(run_dir)["cells"]
        assert cell["state"] == "failed" and "stalled" in cell["reason"]
        assert not read_manifest(run_dir)["warnings"]

    def test_children_left_behind_by_a_cell_that_exited_normally_are_stopped(self, tmp_path: Path):
        """The leader finishes all steps and exits 0, leaving children (one escaped): the runner stops them."""
        pid_file = tmp_path / "pids"
        extra = ["--spawn-children", "1", "--pid-file", str(pid_file)]
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=2, extra=extra)])
        run_dir = tmp_path / "run"
        result = run_harness(str(plan), "--output-dir", str(run_dir), "--grace-s", "0.5")
        assert result.returncode == 0, result.stdout + result.stderr
        assert len(read_pid_file(pid_file)) == 3 and alive_processes(pid_file) == []
        assert read_manifest(run_dir)["cells"][0]["state"] == "complete"


def _signal_after_two_steps(plan: Path, run_dir: Path, sig: signal.Signals) -> tuple[str, int]:
    """Run the harness, send it `sig` once its first cell has two steps on disk; (merged output, exit status)."""
    harness = subprocess.Popen(
        harness_argv(str(plan), "--output-dir", str(run_dir), "--grace-s", "2"),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if (run_dir / "manifest.json").exists() and read_manifest(run_dir)["cells"][0]["steps_completed"] >= 2:
            break
        time.sleep(0.05)
    harness.send_signal(sig)
    output, _ = harness.communicate(timeout=60)
    return output, harness.returncode


class TestInterruptAndResume:
    def test_ctrl_c_marks_the_running_cell_interrupted_and_resume_completes_the_run(self, tmp_path: Path):
        """SIGINT to the harness: running cell interrupted (steps kept), rest pending; --resume reruns those only."""
        plan = write_plan(
            tmp_path / "plan",
            [standin_cell("miles", steps=8, step_s=0.15), standin_cell("verl", steps=2, step_s=0.1)],
        )
        run_dir = tmp_path / "run"
        output, returncode = _signal_after_two_steps(plan, run_dir, signal.SIGINT)
        assert returncode == 130, output
        miles, verl = read_manifest(run_dir)["cells"]
        assert miles["state"] == "interrupted" and miles["reason"] == "interrupted by SIGINT"
        kept = read_metric_steps(run_dir, miles)
        assert len(kept) >= 2 and len(kept) < 8
        assert verl["state"] == "pending"

        result = run_harness("--resume", str(run_dir))
        assert result.returncode == 0, result.stdout + result.stderr
        miles, verl = read_manifest(run_dir)["cells"]
        assert (miles["state"], verl["state"]) == ("complete", "complete")
        assert len(read_metric_steps(run_dir, miles)) == 8
        assert miles["previous_attempts"] == ["cells/miles-fsdp-colocate/rep-0.attempt-1"]
        old = run_dir / miles["previous_attempts"][0] / "metrics.jsonl"
        assert len(old.read_text().splitlines()) == len(kept)

        again = run_harness("--resume", str(run_dir))
        assert again.returncode == 0 and "nothing to do" in again.stdout

    def test_sigterm_to_the_harness_interrupts_the_running_cell_too(self, tmp_path: Path):
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=20, step_s=0.1)])
        run_dir = tmp_path / "run"
        harness = subprocess.Popen(
            harness_argv(str(plan), "--output-dir", str(run_dir)), cwd=REPO_ROOT, stdout=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if (run_dir / "manifest.json").exists() and read_manifest(run_dir)["cells"][0]["steps_completed"] >= 1:
                break
            time.sleep(0.05)
        harness.send_signal(signal.SIGTERM)
        assert harness.wait(timeout=30) == 130
        (cell,) = read_manifest(run_dir)["cells"]
        assert (cell["state"], cell["reason"]) == ("interrupted", "interrupted by SIGTERM")
        assert 1 <= len(read_metric_steps(run_dir, cell)) < 20


class TestInputErrors:
    def test_an_unwritable_output_folder_is_a_clear_error_before_anything_starts(self, tmp_path: Path):
        pid_file = tmp_path / "pids"
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", extra=["--pid-file", str(pid_file)])])
        blocker = tmp_path / "a-file"
        blocker.write_text("not a folder")
        result = run_harness(str(plan), "--output-dir", str(blocker / "run"))
        assert result.returncode == 2
        assert f"--output-dir {blocker / 'run'} is not writable" in result.stderr
        assert not pid_file.exists()

    def test_a_read_only_output_folder_is_refused(self, tmp_path: Path):
        """Read-only to root too (chattr +i or a read-only tmpfs, see tests/benchmark/read_only.py)."""
        plan = write_plan(tmp_path / "plan", [standin_cell("verl")])
        locked = tmp_path / "locked"
        locked.mkdir()
        unlock = lock_read_only(locked)
        if unlock is None:
            pytest.skip("root on a file system without chattr +i and no permission to mount: nothing is read-only")
        try:
            result = run_harness(str(plan), "--output-dir", str(locked))
        finally:
            unlock()
        assert result.returncode == 2 and "is not writable" in result.stderr

    def test_a_missing_executable_and_a_plan_secret_are_refused_before_anything_starts(self, tmp_path: Path):
        cell = standin_cell("verl")
        cell["launch_argv"] = ["no-such-trainer-binary", *cell["launch_argv"][1:]]
        cell["env"]["WANDB_API_KEY"] = "literal-key-in-plan"
        plan = write_plan(tmp_path / "plan", [cell])
        result = run_harness(str(plan), "--output-dir", str(tmp_path / "run"))
        assert result.returncode == 2
        assert "a literal secret in cells[verl-fsdp-colocate].env.WANDB_API_KEY" in result.stderr
        assert "literal-key-in-plan" not in result.stderr
        assert not (tmp_path / "run" / "manifest.json").exists()

    def test_the_main_command_refuses_to_replan_over_an_existing_run(self, tmp_path: Path):
        """Without --dry-run the main command plans then executes; it must not rewrite a run folder's plan."""
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "manifest.json").write_text("{}")
        argv = [sys.executable, str(REPO_ROOT / "scripts/benchmark/run.py"), "--backend", "fsdp", "--preset"]
        result = subprocess.run(
            [*argv, "qwen3-1.7b-base", "--output-dir", str(run_dir)], capture_output=True, text=True
        )
        assert result.returncode == 2
        assert f"{run_dir} already holds a run (manifest.json)" in result.stderr
        assert not (run_dir / "plan.json").exists()


def test_a_relative_output_dir_and_resume_work_from_any_working_directory(tmp_path: Path):
    """`run.py execute plan.json --output-dir run1` as the docs show it: the cell's cwd is its own folder, so
    ${BENCH_CELL_DIR} must be absolute or the sink lands where the runner never reads it."""
    write_plan(tmp_path / "plan", [standin_cell("verl", steps=2), standin_cell("miles", steps=2)])
    argv = harness_argv("plan/plan.json", "--output-dir", "run1")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = read_manifest(tmp_path / "run1")
    assert [(c["state"], c["steps_completed"]) for c in manifest["cells"]] == [("complete", 2), ("complete", 2)]
    command = (tmp_path / "run1/cells/verl-fsdp-colocate/rep-0/command.sh").read_text()
    assert f"export BENCH_CELL_DIR={tmp_path / 'run1/cells/verl-fsdp-colocate/rep-0'}" in command
    resumed = subprocess.run(
        harness_argv("--resume", "run1"), capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert resumed.returncode == 0 and "nothing to do: all 2 cell repeats" in resumed.stdout + resumed.stderr


class TestPrepare:
    def test_prepare_steps_run_once_skip_what_exists_and_a_failure_stops_before_any_cell(self, tmp_path: Path):
        made, existing = tmp_path / "made.txt", tmp_path / "existing.txt"
        existing.write_text("already here")
        steps = [
            {"name": "make", "argv": ["python3", "-c", f"open({str(made)!r}, 'w').write('x')"], "creates": str(made),
             "skip_if_exists": True},
            {"name": "have", "argv": ["false"], "creates": str(existing), "skip_if_exists": True},
        ]  # fmt: skip
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=1)], prepare=steps)
        result = run_harness(str(plan), "--output-dir", str(tmp_path / "run"))
        assert result.returncode == 0, result.stdout + result.stderr
        assert made.read_text() == "x"
        prepare = read_manifest(tmp_path / "run")["prepare"]
        assert [(p["name"], p["state"]) for p in prepare] == [("make", "complete"), ("have", "skipped")]

        failing = [{"name": "boom", "argv": ["python3", "-c", "raise SystemExit(3)"], "creates": str(tmp_path / "no")}]
        plan = write_plan(tmp_path / "plan2", [standin_cell("verl", steps=1)], prepare=failing)
        result = run_harness(str(plan), "--output-dir", str(tmp_path / "run2"))
        assert result.returncode == 1
        manifest = read_manifest(tmp_path / "run2")
        assert manifest["prepare"][0]["state"] == "failed"
        assert manifest["prepare"][0]["reason"] == "exited with code 3; see prepare/boom.log"
        assert [c["state"] for c in manifest["cells"]] == ["pending"]
        skipped = run_harness("--resume", str(tmp_path / "run2"), "--skip-prepare")
        assert skipped.returncode == 0 and read_manifest(tmp_path / "run2")["cells"][0]["state"] == "complete"

    def test_a_download_tool_missing_from_path_is_reported_before_anything_starts(self, tmp_path: Path):
        """The plan's `hf download` step needs the hf CLI, unless what it creates is there or --skip-prepare."""
        present = tmp_path / "model" / "config.json"
        present.parent.mkdir()
        present.write_text("{}")
        steps = [
            {"name": "download-model", "argv": ["hf-missing-here", "download", "Qwen/Qwen3-0.6B"],
             "creates": str(tmp_path / "absent" / "config.json"), "skip_if_exists": True},
            {"name": "download-dataset", "argv": ["hf-missing-too", "download"], "creates": str(present),
             "skip_if_exists": True},
        ]  # fmt: skip
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=1)], prepare=steps)
        result = run_harness(str(plan), "--output-dir", str(tmp_path / "run"))
        assert result.returncode == 2
        assert "prepare step download-model: 'hf-missing-here' is not on PATH" in result.stderr
        assert "hf-missing-too" not in result.stderr  # its config.json exists: it would be skipped
        assert not (tmp_path / "run" / "manifest.json").exists()
        skipped = run_harness(str(plan), "--output-dir", str(tmp_path / "run"), "--skip-prepare")
        assert skipped.returncode == 0, skipped.stderr


class TestEndOfRunReport:
    """Every run ends with `run.py report DIR`, whatever the cells did; the report never sets the status."""

    def test_an_interrupted_run_is_reported_with_the_steps_it_has(self, tmp_path: Path):
        plan = write_plan(tmp_path / "plan", [standin_cell("miles", steps=40, step_s=0.1)])
        run_dir = tmp_path / "run"
        output, returncode = _signal_after_two_steps(plan, run_dir, signal.SIGTERM)
        assert returncode == 130, output
        assert read_manifest(run_dir)["cells"][0]["state"] == "interrupted"
        report = json.loads((run_dir / "report.json").read_text())
        assert report["cells"] == [] and report["incomplete"][0]["state"] == "interrupted"
        assert "report: wrote" in output

    def test_a_report_that_cannot_be_written_is_a_warning_not_the_run_outcome(self, tmp_path: Path):
        run_dir = tmp_path / "run"
        (run_dir / "report.md").mkdir(parents=True)  # a real failure: report.md cannot be written
        plan = write_plan(tmp_path / "plan", [standin_cell("miles", steps=3), standin_cell("verl", steps=3)])
        result = run_harness(str(plan), "--output-dir", str(run_dir))
        assert result.returncode == 0, result.stdout + result.stderr
        manifest = read_manifest(run_dir)
        assert [c["state"] for c in manifest["cells"]] == ["complete", "complete"]
        assert len(manifest["warnings"]) == 1 and manifest["warnings"][0].startswith(
            f"report: not written: {run_dir.resolve() / 'report.md'}: Is a directory"
        )
        assert manifest["warnings"][0] in result.stdout

    def test_no_report_when_no_cell_wrote_a_step(self, tmp_path: Path):
        failing = [{"name": "boom", "argv": ["python3", "-c", "raise SystemExit(3)"], "creates": str(tmp_path / "no")}]
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=1)], prepare=failing)
        result = run_harness(str(plan), "--output-dir", str(tmp_path / "run"))
        assert result.returncode == 1
        assert not (tmp_path / "run" / "report.json").exists()
        assert "report: not written (no cell repeat wrote a step)" in result.stdout


class TestSecrets:
    def test_a_secret_in_the_environment_appears_in_no_file_of_the_run_folder(self, tmp_path: Path):
        """WANDB_API_KEY and HF_TOKEN reach the cell (it prints its environment) but no file of the run folder."""
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=2, extra=["--print-env"])])
        run_dir = tmp_path / "run"
        secrets = {"WANDB_API_KEY": "sekrit-123", "HF_TOKEN": "hf_sekrit_token_456", "MY_DB_PASSWORD": "pw-7890"}
        result = run_harness(str(plan), "--output-dir", str(run_dir), env=secrets)
        assert result.returncode == 0, result.stderr
        log = (run_dir / "cells/verl-fsdp-colocate/rep-0/log.txt").read_text()
        assert "WANDB_API_KEY=<redacted>" in log  # the cell did see and print it
        files = [p for p in run_dir.rglob("*") if p.is_file()]
        assert len(files) >= 8
        for path in files:
            data = path.read_bytes()
            for value in secrets.values():
                assert value.encode() not in data, f"{value} leaked into {path.relative_to(run_dir)}"
        assert not any(value in result.stdout + result.stderr for value in secrets.values())

    def test_the_wandb_key_reaches_the_miles_ray_head_and_job_but_no_file(self, tmp_path: Path):
        """With --wandb the plan carries no --wandb-key: Miles's wandb reads WANDB_API_KEY, which a Ray job gets from
        the Ray head's environment. The runner hands its environment to the head it starts and redacts the key."""
        run_dir, record, key = tmp_path / "run", tmp_path / "ray-record.jsonl", "wandb-key-0123456789abcdef"
        result = _run_miles_cell_on_a_private_standin_head(
            tmp_path, run_dir, record, extra=["--print-env"], env={"WANDB_API_KEY": key}
        )
        assert result.returncode == 0, result.stdout + result.stderr
        start = next(json.loads(line) for line in record.read_text().splitlines() if '"start"' in line)
        assert "WANDB_API_KEY" in start["env_names"]
        log = (run_dir / "cells/miles-fsdp-colocate/rep-0/log.txt").read_text()
        assert "WANDB_API_KEY=<redacted>" in log  # the job saw it
        env_json = json.loads((run_dir / "cells/miles-fsdp-colocate/rep-0/env.json").read_text())
        assert env_json["inherited"]["WANDB_API_KEY"] == "<redacted>"
        files = [p for p in run_dir.rglob("*") if p.is_file()]
        assert any(p.name == "ray-head.log" for p in files) and len(files) >= 8
        for path in files:
            assert key.encode() not in path.read_bytes(), f"the key leaked into {path.relative_to(run_dir)}"
        assert key not in result.stdout + result.stderr


def _run_miles_cell_on_a_private_standin_head(
    tmp_path: Path, run_dir: Path, record: Path, extra: list[str] | None = None, env: dict | None = None
) -> subprocess.CompletedProcess:
    """A Miles cell submitted with `ray job submit`, run with a stand-in `ray` next to the Miles interpreter."""
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").symlink_to(sys.executable)
    ray = bin_dir / "ray"
    ray.write_text(f"#!{sys.executable}\n" + (STANDINS / "standin_ray.py").read_text())
    ray.chmod(0o755)
    cell = standin_cell("miles", steps=2, python="python3", extra=extra)
    cell["launch_argv"] = ["ray", "job", "submit", "--address=http://127.0.0.1:8265", "--", *cell["argv"]]
    plan = write_plan(tmp_path / "plan", [cell])
    argv = harness_argv(str(plan), "--output-dir", str(run_dir), "--miles-python", str(bin_dir / "python3"))
    argv[argv.index("--ray") + 1] = "auto"
    base = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env = {**base, **(env or {}), "STANDIN_RAY_RECORD": str(record)}
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


class TestPrivateRayHead:
    def test_a_ray_job_submit_cell_gets_its_own_head_its_address_and_a_stop_of_exactly_that_head(self, tmp_path: Path):
        """With a stand-in `ray` next to the Miles interpreter: head on free ports, submit rewired, head stopped."""
        run_dir, record = tmp_path / "run", tmp_path / "ray-record.jsonl"
        result = _run_miles_cell_on_a_private_standin_head(tmp_path, run_dir, record)
        assert result.returncode == 0, result.stdout + result.stderr
        entries = [json.loads(line) for line in record.read_text().splitlines()]
        start = next(e for e in entries if e["cmd"] == "start")
        submit = next(e for e in entries if e["cmd"] == "submit")
        ray_json = json.loads((run_dir / "cells/miles-fsdp-colocate/rep-0/ray.json").read_text())
        assert "--block" in start["argv"] and "--head" in start["argv"]
        assert submit["RAY_ADDRESS"] == ray_json["dashboard_url"] != "http://127.0.0.1:8265"
        assert f"--address={ray_json['dashboard_url']}" in submit["argv"]
        assert "--address=http://127.0.0.1:8265" not in submit["argv"]
        assert any(w.startswith("--submission-id=bench-miles-fsdp-colocate-rep0-") for w in submit["argv"])
        assert not is_alive(start["pid"]) and not is_alive(start["child"])
        assert read_manifest(run_dir)["cells"][0]["state"] == "complete"

    def test_a_stopped_private_head_leaves_no_session_folder_and_a_finished_run_no_lock_file(self, tmp_path: Path):
        """The head's temp dir (Ray's session folder under the system temp dir) goes with the head; the run folder's
        lock file goes with the run."""
        run_dir, record = tmp_path / "run", tmp_path / "ray-record.jsonl"
        result = _run_miles_cell_on_a_private_standin_head(tmp_path, run_dir, record)
        assert result.returncode == 0, result.stdout + result.stderr
        temp_dir = Path(json.loads((run_dir / "cells/miles-fsdp-colocate/rep-0/ray.json").read_text())["temp_dir"])
        assert temp_dir.name.startswith("bench-ray-") and not temp_dir.exists()
        assert not (run_dir / "run.lock").exists() and (run_dir / "manifest.json").is_file()
