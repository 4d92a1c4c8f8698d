"""One owner per run folder, against the real harness with stand-in trainers, real subprocesses and real signals:
the lock, what a SIGKILLed harness leaves behind, stops that leave nothing, restarts inside a cell, a full disk and
secrets in any file of the run folder."""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripts.benchmark.contracts.manifest import CellProcesses, ProcessRecord
from scripts.benchmark.frameworks.sinks import build_step_records
from scripts.benchmark.runner import executor, folder_lock
from scripts.benchmark.runner.folder_lock import RunLock, acquire_run_lock, release_run_lock
from scripts.benchmark.runner.leftovers import find_leftovers
from scripts.benchmark.runner.options import ExecuteOptions, RunError
from scripts.benchmark.runner.process import boot_id, is_alive, read_proc_info
from tests.benchmark.standins.plans import (
    REPO_ROOT,
    alive_processes,
    harness_argv,
    no_stray_processes,
    read_manifest,
    read_metric_steps,
    read_pid_file,
    run_harness,
    standin_cell,
    write_plan,
)

from miles.utils.bench_metrics import RunContext, read_records


@pytest.fixture(autouse=True)
def _no_stray_processes(tmp_path: Path):
    """Every test here records its stand-ins in tmp_path/pids: none outlives the test, even a failing one."""
    with no_stray_processes(tmp_path / "pids"):
        yield


def _start_harness(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        harness_argv(*args),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _wait_for_steps(run_dir: Path, steps: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if read_manifest(run_dir)["cells"][0]["steps_completed"] >= steps:
                return
        except (OSError, ValueError, KeyError, IndexError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"{run_dir}: {steps} steps not recorded within {timeout} s")


class TestRunFolderLock:
    def test_simultaneous_starts_on_one_folder_let_exactly_one_run(self, tmp_path: Path):
        """Six harnesses started at once on one folder: one runs the matrix, the five others exit 2 at once."""
        pid_file = tmp_path / "pids"
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=3, extra=["--pid-file", str(pid_file)])])
        run_dir = tmp_path / "run"
        harnesses = [_start_harness(str(plan), "--output-dir", str(run_dir)) for _ in range(6)]
        results = [(h.wait(timeout=90), h.stdout.read()) for h in harnesses]
        codes = sorted(code for code, _ in results)
        assert codes == [0, 2, 2, 2, 2, 2], results
        for code, output in results:
            if code == 2:
                # the live run's pid and host, or (its record not yet written) the held lock, or its finished run
                named = ("is in use by a live run: harness pid", "is in use by another harness", "already holds a run")
                assert any(words in output for words in named), output
                assert "Traceback" not in output
        assert len([line for line in pid_file.read_text().splitlines()]) == 1  # one trainer was ever started
        assert [c["state"] for c in read_manifest(run_dir)["cells"]] == ["complete"]
        assert not (run_dir / "run.lock").exists()  # released and removed at the end

    def test_a_refused_start_leaves_the_winners_lock_file_alone(self, tmp_path: Path, monkeypatch):
        """The race of two simultaneous starts, made deterministic: the winner locks the folder after the loser
        looked for run.lock and before the loser tries it. The loser is refused and the winner's file stays."""
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=1)])
        run_dir = tmp_path / "run"
        winner: dict[str, RunLock] = {}
        real_check = executor.check_output_dir

        def check_then_lose_the_race(output_dir: Path) -> None:
            real_check(output_dir)
            winner["lock"] = acquire_run_lock(output_dir)

        monkeypatch.setattr(executor, "check_output_dir", check_then_lose_the_race)
        with pytest.raises(RunError, match="is in use by"):
            executor.execute(plan, run_dir, ExecuteOptions())
        try:
            held, there = os.fstat(winner["lock"].fd), os.stat(run_dir / "run.lock")
            assert (held.st_dev, held.st_ino) == (there.st_dev, there.st_ino)
            assert json.loads((run_dir / "run.lock").read_text())["pid"] == os.getpid()
        finally:
            release_run_lock(winner["lock"])

    def test_a_lock_removed_by_its_holder_is_not_held_by_a_late_locker(self, tmp_path: Path):
        """A harness that opened run.lock before its holder removed it (a refused run cleaning up) must not go on
        to hold the removed file while a third harness locks the new one."""
        first = acquire_run_lock(tmp_path)
        late = os.open(tmp_path / "run.lock", os.O_RDWR)  # what a harness starting meanwhile has open
        release_run_lock(first)
        assert not (tmp_path / "run.lock").exists()
        third = acquire_run_lock(tmp_path)
        try:
            assert not folder_lock._is_the_file_at(late, tmp_path / "run.lock")
            with pytest.raises(RunError, match="is in use by"):
                acquire_run_lock(tmp_path)
        finally:
            os.close(late)
            release_run_lock(third)

    def test_resume_refuses_while_the_manifests_harness_lives_even_without_its_lock_file(self, tmp_path: Path):
        """run.lock removed under a live run (by hand, or by an older harness): --resume must prove the previous
        harness gone before it stops anything as a leftover, and here it is alive."""
        pid_file = tmp_path / "pids"
        cell = standin_cell("verl", steps=40, step_s=0.1, extra=["--pid-file", str(pid_file)])
        run_dir = tmp_path / "run"
        harness = _start_harness(str(write_plan(tmp_path / "plan", [cell])), "--output-dir", str(run_dir))
        try:
            _wait_for_steps(run_dir, 1)
            (run_dir / "run.lock").unlink()
            second = run_harness("--resume", str(run_dir))
            assert second.returncode == 2, second.stderr
            assert f"harness pid {harness.pid} on host {socket.gethostname()}" in second.stderr
            assert len(alive_processes(pid_file)) == 1  # the live cell was not stopped as a leftover
        finally:
            harness.send_signal(signal.SIGINT)
            harness.communicate(timeout=60)
        assert harness.returncode == 130

    def test_resume_on_a_live_run_is_refused_naming_its_pid_and_host(self, tmp_path: Path):
        pid_file = tmp_path / "pids"
        cell = standin_cell("verl", steps=30, step_s=0.1, extra=["--pid-file", str(pid_file)])
        run_dir = tmp_path / "run"
        harness = _start_harness(str(write_plan(tmp_path / "plan", [cell])), "--output-dir", str(run_dir))
        try:
            _wait_for_steps(run_dir, 1)
            second = run_harness("--resume", str(run_dir))
            assert second.returncode == 2
            assert f"harness pid {harness.pid} on host {socket.gethostname()}" in second.stderr
            assert "Traceback" not in second.stderr
            assert len(read_pid_file(pid_file)) == 1  # no second copy of the running cell
            assert read_manifest(run_dir)["harness"]["pid"] == harness.pid
        finally:
            harness.send_signal(signal.SIGINT)
            harness.communicate(timeout=60)
        assert harness.returncode == 130 and alive_processes(pid_file) == []


class TestKilledHarness:
    def test_resume_stops_what_the_killed_run_left_before_rerunning_the_cell(self, tmp_path: Path):
        """SIGKILL to the harness: the trainer (reopening its sink by path at every write), its SIGTERM-deaf child
        and a setsid-escaped grandchild keep running. --resume takes over the stale lock, finds them by pid and start
        time from the manifest, stops them, moves the old attempt aside and reruns the cell into a clean sink."""
        pid_file = tmp_path / "pids"
        extra = ["--pid-file", str(pid_file), "--spawn-children", "1", "--ignore-sigterm"]
        cell = standin_cell("verl", steps=20, step_s=0.05, extra=extra)
        run_dir = tmp_path / "run"
        plan = write_plan(tmp_path / "plan", [cell])
        # 1 s per step (20 s in all): the trainer is still writing steps when --resume starts, even on a slow box
        harness = _start_harness(str(plan), "--output-dir", str(run_dir), env={"STANDIN_STEP_S": "1.0"})
        _wait_for_steps(run_dir, 2)
        harness.kill()
        harness.communicate(timeout=10)
        (killed,) = read_manifest(run_dir)["cells"]
        assert killed["state"] == "running"
        recorded = {
            (p["pid"], p["start_time"]) for p in [killed["processes"]["leader"], *killed["processes"]["members"]]
        }
        assert set(read_pid_file(pid_file)) <= recorded  # leader, child and escaped grandchild, with start times
        assert len(alive_processes(pid_file)) == 3

        result = run_harness("--resume", str(run_dir), "--grace-s", "0.5", env={"STANDIN_STEP_S": "0.05"})
        assert result.returncode == 0, result.stdout + result.stderr
        assert "stopping 3 process(es) left by the previous harness" in result.stdout
        old_processes = read_pid_file(pid_file)[:3]
        assert [pid for pid, start in old_processes if pid in alive_processes(pid_file)] == []
        assert alive_processes(pid_file) == []  # nor any of the rerun's
        manifest = read_manifest(run_dir)
        (cell_run,) = manifest["cells"]
        assert cell_run["state"] == "complete" and read_metric_steps(run_dir, cell_run) == list(range(1, 21))
        assert cell_run["previous_attempts"] == ["cells/verl-fsdp-colocate/rep-0.attempt-1"]
        assert cell_run["processes"] is None and cell_run["survivors"] == []
        assert any(
            w.startswith(f"took over the stale lock of harness pid {harness.pid}") for w in manifest["warnings"]
        )
        assert f"warning: took over the stale lock of harness pid {harness.pid}" in result.stderr
        sink_lines = (run_dir / cell_run["dir"] / "sink/verl.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in sink_lines] == list(range(21))  # no late writer in it

    def test_a_process_that_escaped_before_any_poll_is_found_by_resume(self, tmp_path: Path):
        """No poll ever runs (a poll interval of an hour): the setsid-escaped grandchild was never recorded, yet
        --resume finds it by the token it inherited and stops it before the rerun."""
        pid_file = tmp_path / "pids"
        cell = standin_cell("verl", steps=5, step_s=0.05, extra=["--pid-file", str(pid_file), "--spawn-children", "1"])
        run_dir = tmp_path / "run"
        argv = harness_argv(str(write_plan(tmp_path / "plan", [cell])), "--output-dir", str(run_dir))
        argv[argv.index("--poll-interval-s") + 1] = "3600"
        harness = subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env={**os.environ, "STANDIN_STEP_S": "1000"})  # fmt: skip
        _wait_until(lambda: pid_file.is_file() and len(pid_file.read_text().splitlines()) == 3, harness)
        harness.kill()
        harness.wait(timeout=10)
        (killed,) = read_manifest(run_dir)["cells"]
        escaped = read_pid_file(pid_file)[2]
        recorded = [
            (p["pid"], p["start_time"]) for p in [killed["processes"]["leader"], *killed["processes"]["members"]]
        ]
        assert escaped not in recorded and alive_processes(pid_file) == [p for p, _ in read_pid_file(pid_file)]

        result = run_harness("--resume", str(run_dir), "--grace-s", "0.5", env={"STANDIN_STEP_S": "0.05"})
        assert result.returncode == 0, result.stdout + result.stderr
        assert "stopping 3 process(es) left by the previous harness" in result.stdout
        assert alive_processes(pid_file) == []

    def test_a_dead_leaders_pid_reused_as_another_sessions_id_is_never_signalled(self, tmp_path: Path):
        """A daemon in a session whose id is the dead leader's pid (the pid was reused, its new owner called setsid,
        forked the daemon and exited): it carries no token of the cell, so --resume's search leaves it alone."""
        pid_file = tmp_path / "pids"
        daemon_maker = (
            "import os, sys, time\n"
            "daemon = os.fork()\n"
            "if daemon == 0:\n"
            "    time.sleep(600)\n"
            "open(sys.argv[1], 'w').write(str(daemon))\n"
        )
        made = tmp_path / "daemon"
        subprocess.run([sys.executable, "-c", daemon_maker, str(made)], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip  # its own session
        daemon = int(made.read_text())
        start = read_proc_info(daemon).start_time
        pid_file.write_text(f"{daemon} {start}\n")
        dead_leader = read_proc_info(daemon).sid  # the session's own leader has exited: its pid is free
        assert read_proc_info(dead_leader) is None
        record = CellProcesses(
            host=socket.gethostname(), boot_id=boot_id(), leader=ProcessRecord(pid=dead_leader, start_time=1),
            pgid=dead_leader, sid=dead_leader, members=[], token="the-cells-own-token",
        )  # fmt: skip
        assert find_leftovers(record) == {}
        assert is_alive(daemon, start)

    def test_resume_remembers_no_preflight(self, tmp_path: Path):
        """A run started with --no-preflight (stand-ins, no GPUs here) is resumed without repeating the option."""
        pid_file = tmp_path / "pids"
        cell = standin_cell("verl", steps=3, step_s=0.05, extra=["--pid-file", str(pid_file), "--crash-after", "1"])
        run_dir = tmp_path / "run"
        first = run_harness(str(write_plan(tmp_path / "plan", [cell])), "--output-dir", str(run_dir))
        assert first.returncode == 1, first.stderr
        bare = [sys.executable, str(REPO_ROOT / "scripts/benchmark/run.py"), "execute", "--resume", str(run_dir)]
        resumed = subprocess.run(bare, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
        assert "cannot execute the plan on this machine" not in resumed.stderr
        assert (
            resumed.returncode == 1
            and "standin crash on demand" in (run_dir / "cells/verl-fsdp-colocate/rep-0/log.txt").read_text()
        )
        assert read_manifest(run_dir)["options"]["preflight"] is False


def _wait_until(predicate, harness: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert harness.poll() is None, "the harness ended first"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


class TestStopLeavesNothing:
    def test_a_supervisor_forking_workers_during_the_stop_leaves_none_alive(self, tmp_path: Path):
        """A SIGTERM-deaf supervisor forks a worker every 5 ms (every other one in its own session) while the cell
        is stopped: the stop scans again until group, session and descendants are all gone."""
        pid_file = tmp_path / "pids"
        extra = ["--pid-file", str(pid_file), "--fork-workers", "--stall-after", "1"]
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=3, extra=extra)])
        run_dir = tmp_path / "run"
        limits = ["--first-step-timeout-s", "20", "--stall-timeout-s", "0.6", "--grace-s", "0.4"]
        result = run_harness(str(plan), "--output-dir", str(run_dir), *limits)
        assert result.returncode == 1, result.stdout + result.stderr
        # leader + supervisor + workers: the supervisor was still forking (short of its 400) when it was stopped
        assert 20 < len(read_pid_file(pid_file)) < 402
        assert alive_processes(pid_file) == []
        manifest = read_manifest(run_dir)
        assert manifest["warnings"] == [] and manifest["cells"][0]["survivors"] == []
        assert manifest["cells"][0]["reason"].startswith("stalled: no new step for")


class TestRestartInsideACell:
    @pytest.mark.parametrize("framework", ["miles", "verl"])
    def test_repeated_steps_keep_the_last_attempt_flagged_as_ingest_does(self, tmp_path: Path, framework: str):
        """The trainer restarts after step 7 and runs steps 5.. again with other values: metrics.jsonl holds each
        step once, the repeated ones from the last attempt and flagged, the earlier ones kept."""
        extra = ["--restart-after", "7", "--restart-from", "5"]
        plan = write_plan(tmp_path / "plan", [standin_cell(framework, steps=9, step_s=0.05, extra=extra)])
        run_dir = tmp_path / "run"
        result = run_harness(str(plan), "--output-dir", str(run_dir))
        assert result.returncode == 0, result.stdout + result.stderr
        (cell,) = read_manifest(run_dir)["cells"]
        written = read_records(run_dir / cell["metrics"])
        assert [r.step for r in written] == list(range(1, 10))
        cell_dir = run_dir / cell["dir"]
        ctx = RunContext.build(arch=None, num_train_gpus=1, num_rollout_gpus=1)
        sink = cell_dir / ("log.txt" if framework == "miles" else "sink")  # Miles is read from its stdout
        ingested = {r.step: r for r in build_step_records(framework, [sink], ctx)}
        repeated = range(5, 8)
        for record in written:
            if record.step in repeated:
                assert any(f.startswith("duplicate_step:") for f in record.flags), (record.step, record.flags)
            if record.step in ingested:  # VERL's truncated file no longer holds steps 1-4: they stay as written
                assert record.raw == ingested[record.step].raw
                assert record.step_time_s == ingested[record.step].step_time_s
        assert not any(f.startswith("duplicate_step:") for r in written if r.step < 5 for f in r.flags)
        if framework == "miles":  # step 4's weight update is in rollout 4's record, which the restarted process wrote
            assert written[3].step_time_s is None and "miles_shift:next_step_restarted" in written[3].flags


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    return mounted.returncode == 0


def _fill(path: Path) -> None:
    """Write until the file system says it is full."""
    try:
        with open(path, "ab") as handle:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc


@pytest.fixture
def small_disk(tmp_path: Path):
    disk = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(disk, "1536k"):
        pytest.skip("needs root to mount a small tmpfs (test_sink_follower_write_error covers the write layer)")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


class TestFullDisk:
    def test_a_full_disk_fails_the_cell_cleanly_and_resume_completes_it_once_there_is_space(
        self, tmp_path: Path, small_disk: Path
    ):
        """A real 1.5 MiB tmpfs holds the run folder; the cell prints 64 KiB per step until the disk is full."""
        ballast = small_disk / "ballast"
        ballast.write_bytes(b"\0" * 512 * 1024)
        pid_file = tmp_path / "pids"
        cell = standin_cell("verl", steps=24, step_s=0.05, extra=["--pid-file", str(pid_file)])
        cell["sink"]["path"] = str(tmp_path / "sink" / "verl.jsonl")  # the trainer's own files are elsewhere
        cell["launch_argv"][cell["launch_argv"].index("--sink") + 1] = cell["sink"]["path"]
        plan = write_plan(tmp_path / "plan", [cell])
        run_dir = small_disk / "run"
        result = run_harness(str(plan), "--output-dir", str(run_dir), env={"STANDIN_LOG_BYTES": "65536"})
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stdout + result.stderr
        assert "No space left on device" in result.stderr and f"--resume {run_dir}" in result.stderr
        (failed,) = read_manifest(run_dir)["cells"]
        assert failed["state"] == "failed" and "No space left on device" in failed["reason"]
        kept = read_metric_steps(run_dir, failed)  # every line whole: a cut line would not parse
        assert kept == list(range(1, len(kept) + 1)) and failed["steps_completed"] == len(kept)
        assert alive_processes(pid_file) == []

        ballast.unlink()
        resumed = run_harness("--resume", str(run_dir), env={"STANDIN_LOG_BYTES": "0"})
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        (cell_run,) = read_manifest(run_dir)["cells"]
        assert cell_run["state"] == "complete" and read_metric_steps(run_dir, cell_run) == list(range(1, 25))
        assert len(read_records(run_dir / cell_run["previous_attempts"][0] / "metrics.jsonl")) == len(kept)

    def test_a_full_disk_at_the_start_leaves_nothing_torn_and_the_same_command_then_runs(
        self, tmp_path: Path, small_disk: Path
    ):
        """The plan's 600 KiB parity.json (on another file system) does not fit the run folder's disk: exit 2 naming
        the run folder's copy and the fix, nothing half-written, no probe left; once there is space, the same
        command runs and copies it whole. At 0 bytes free the probe of the folder leaves no file either."""
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=2)])
        parity = plan.parent / "parity.json"
        parity.write_text(json.dumps({"padding": "x" * 600 * 1024}))
        ballast = small_disk / "ballast"
        ballast.write_bytes(b"\0" * 1024 * 1024)
        run_dir = small_disk / "run"
        refused = run_harness(str(plan), "--output-dir", str(run_dir))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert f"cannot write {run_dir / 'parity.json'}: No space left on device" in refused.stderr
        assert "free space, then run the same command again" in refused.stderr and "Traceback" not in refused.stderr
        assert not run_dir.exists() and sorted(p.name for p in small_disk.iterdir()) == ["ballast"]
        ballast.unlink()
        done = run_harness(str(plan), "--output-dir", str(run_dir))
        assert done.returncode == 0, done.stdout + done.stderr
        assert (run_dir / "parity.json").read_bytes() == parity.read_bytes()

        empty = small_disk / "empty"
        empty.mkdir()
        _fill(small_disk / "ballast")
        refused = run_harness(str(plan), "--output-dir", str(empty))
        assert refused.returncode == 2 and "No space left on device" in refused.stderr, refused.stderr
        assert list(empty.iterdir()) == []

    def test_a_folder_whose_start_failed_before_the_run_began_is_resumed(self, tmp_path: Path):
        """A plan written into its run folder whose start never wrote manifest.json (the main command's plan, then a
        full disk): --resume starts its plan instead of refusing the folder."""
        run_dir = tmp_path / "run"
        write_plan(run_dir, [standin_cell("verl", steps=2)])
        resumed = run_harness("--resume", str(run_dir))
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert "no manifest.json yet, so nothing ran: starting its plan.json" in resumed.stderr
        assert [cell["state"] for cell in read_manifest(run_dir)["cells"]] == ["complete"]


SECRETS = {"WANDB_API_KEY": "wandb-sekrit-0123", "HF_TOKEN": "hf_sekrit_token_456"}


class TestSecretsNeverReachTheRunFolder:
    def test_a_secret_named_override_or_a_secret_value_in_a_plan_is_refused_naming_the_field(self, tmp_path: Path):
        cell = standin_cell("verl")
        cell["launch_argv"] += ["+trainer.api_key=abc-literal-9876"]
        result = run_harness(str(write_plan(tmp_path / "p1", [cell])), "--output-dir", str(tmp_path / "r1"))
        assert result.returncode == 2
        assert "a literal secret in cells[verl-fsdp-colocate].launch_argv: +trainer.api_key" in result.stderr
        assert "abc-literal-9876" not in result.stderr and not (tmp_path / "r1" / "plan.json").exists()

        cell = standin_cell("verl")
        cell["launch_argv"] += ["--run-name", SECRETS["HF_TOKEN"]]  # an ordinary flag, a secret's value
        plan = write_plan(tmp_path / "p2", [cell])
        result = run_harness(str(plan), "--output-dir", str(tmp_path / "r2"), env=SECRETS)
        assert result.returncode == 2
        assert "cells[0].launch_argv[11] (the value of a secret environment variable)" in result.stderr
        assert SECRETS["HF_TOKEN"] not in result.stderr and not (tmp_path / "r2" / "plan.json").exists()

    def test_a_literal_secret_in_a_launch_prefix_is_refused(self, tmp_path: Path):
        plan = write_plan(tmp_path / "plan", [standin_cell("verl")])
        prefix = "env WANDB_API_KEY=prefix-literal-5555"
        result = run_harness(str(plan), "--output-dir", str(tmp_path / "run"), "--verl-prefix", prefix)
        assert result.returncode == 2
        assert "a literal secret in --side-prefix verl: WANDB_API_KEY" in result.stderr
        assert "prefix-literal-5555" not in result.stderr and not (tmp_path / "run" / "manifest.json").exists()

    def test_a_secret_value_passed_in_a_prefix_appears_in_no_file_of_the_run_folder(self, tmp_path: Path):
        """The prefix hands a secret's value to the trainer under an ordinary name; the trainer prints it, its
        environment record, the manifest's options and the report see the prefix: no file holds the value."""
        plan = write_plan(tmp_path / "plan", [standin_cell("verl", steps=2, extra=["--print-env"])])
        run_dir = tmp_path / "run"
        prefix = f"env RUN_LABEL={SECRETS['WANDB_API_KEY']}"
        result = run_harness(str(plan), "--output-dir", str(run_dir), "--verl-prefix", prefix, env=SECRETS)
        assert result.returncode == 0, result.stdout + result.stderr
        log = (run_dir / "cells/verl-fsdp-colocate/rep-0/log.txt").read_text()
        assert "RUN_LABEL=<redacted>" in log  # the cell got it
        files = [p for p in run_dir.rglob("*") if p.is_file()]
        assert {"plan.json", "manifest.json", "environment.json", "report.md", "report.json"} <= {
            p.name for p in files
        }
        for path in files:
            for value in SECRETS.values():
                assert value.encode() not in path.read_bytes(), f"{value} leaked into {path.relative_to(run_dir)}"
        assert not any(value in result.stdout + result.stderr for value in SECRETS.values())


def test_a_miles_cell_on_the_train_step_axis_is_refused(tmp_path: Path):
    cell = standin_cell("miles")
    cell["launch_argv"].append("--wandb-always-use-train-step")
    result = run_harness(str(write_plan(tmp_path / "plan", [cell])), "--output-dir", str(tmp_path / "run"))
    assert result.returncode == 2
    assert "cells[miles-fsdp-colocate].launch_argv: --wandb-always-use-train-step: it puts" in result.stderr
    assert not (tmp_path / "run" / "manifest.json").exists()
