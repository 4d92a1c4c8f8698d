"""The runner's Ray path with a real Ray (the `ray` package, CPU): a private head per cell, `ray job submit` of each
cell, `ray job stop` on interruption, --resume, and an existing two-node cluster joined through RAY_ADDRESS.

The cells are stand-in trainers (writing Miles's real event-log sink) run as Ray job entrypoints, so everything but
the trainer is real: the head, the job server, the job supervisor and its entrypoint process, the job's runtime env.
Every process a test starts carries an environment mark; each test ends by checking that none is left.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from datetime import datetime
from pathlib import Path

import pytest
from scripts.benchmark.runner.process import is_alive, read_proc_info, read_proc_table
from tests.benchmark.process_marks import MARK_VAR, marked_processes, new_mark, stop_marked, wait_until_none
from tests.benchmark.ray_cells import (
    RAY,
    SMALL_NODE,
    free_ports,
    harness,
    marked_env,
    ray_cell,
    require_ray,
    wait_for,
    wait_for_step,
)
from tests.benchmark.standins.plans import read_manifest, read_metric_steps, read_pid_file, write_plan

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]


def _interrupt_when_stepping(popen: subprocess.Popen, run_dir: Path, cell_id: str, log: Path) -> int:
    """SIGINT to the harness once the cell wrote a step; returns the harness's exit status."""
    try:
        wait_for_step(run_dir, cell_id, still_running=lambda: popen.poll() is None)
    except AssertionError as exc:
        cell_dir = run_dir / "cells" / cell_id / "rep-0"
        logs = [cell_dir / "log.txt", cell_dir / "ray-head.log"]
        tails = "\n".join(f"--- {path.name}:\n{path.read_text()[-3000:]}" for path in logs if path.is_file())
        raise AssertionError(f"{exc}; harness exit status {popen.poll()}:\n{log.read_text()}\n{tails}") from None
    popen.send_signal(signal.SIGINT)
    return popen.wait(timeout=120)


def _log_time(line: str) -> float:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _sigterm_time(path: Path) -> float:
    return float(path.read_text().split()[2])


class TestPrivateHead:
    def test_cells_run_as_ray_jobs_are_stopped_with_ray_job_stop_then_the_head_and_resume_reruns_the_rest(
        self, tmp_path: Path
    ):
        require_ray()
        mark, hold = new_mark(), tmp_path / "hold"
        hold.touch()  # the second cell holds after step 2 until the test lets it go: interrupted however slow the box
        cells = [
            ray_cell("fsdp", tmp_path, steps=3, extra=["--print-env"]),
            ray_cell("megatron", tmp_path, steps=6, extra=["--hold-after", "2", "--hold-file", str(hold)]),
        ]
        plan = write_plan(tmp_path / "plan", cells)
        run_dir, log = tmp_path / "run", tmp_path / "harness.log"
        try:
            with open(log, "w") as out:
                popen = subprocess.Popen(
                    harness(str(plan), "--output-dir", str(run_dir), "--ray", "auto"),
                    env=marked_env(mark), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                )  # fmt: skip
                code = _interrupt_when_stepping(popen, run_dir, "miles-megatron-colocate", log)
            assert code == 130, log.read_text()
            assert wait_until_none(mark[MARK_VAR], 10) == {}, "the harness left processes behind"
            manifest = read_manifest(run_dir)
            assert [c["state"] for c in manifest["cells"]] == ["complete", "interrupted"], log.read_text()
            assert read_metric_steps(run_dir, manifest["cells"][0]) == [1, 2, 3]

            # The first cell ran as a Ray job on its own private head, with the job's runtime env.
            done = run_dir / "cells/miles-fsdp-colocate/rep-0"
            ray_json = json.loads((done / "ray.json").read_text())
            assert ray_json["private"] and any(w == "--object-store-memory=100000000" for w in ray_json["argv"])
            job_log = (done / "log.txt").read_text()
            assert re.search(r"Job 'bench-miles-fsdp-colocate-rep0-\d+' submitted successfully", job_log)
            assert "STANDIN_JOB_ENV=from-runtime-env" in job_log and "standin done" in job_log
            assert f"RAY_ADDRESS={ray_json['dashboard_url']}" in (done / "command.sh").read_text().replace("'", "")

            # The interrupted cell: its job got SIGTERM from `ray job stop` before the head was told to stop.
            stopped = run_dir / "cells/miles-megatron-colocate/rep-0"
            head_sigterm = next(
                line for line in (stopped / "ray-head.log").read_text().splitlines() if "received SIGTERM" in line
            )
            assert _sigterm_time(tmp_path / "megatron.sigterm") < _log_time(head_sigterm)
            assert "interrupted by SIGINT" in manifest["cells"][1]["reason"]

            fsdp_log = (done / "log.txt").read_bytes()
            hold.unlink()
            result = subprocess.run(
                harness("--resume", str(run_dir)), env=marked_env(mark), capture_output=True, text=True, timeout=300
            )
            assert result.returncode == 0, result.stdout + result.stderr
            resumed = read_manifest(run_dir)
            assert [c["state"] for c in resumed["cells"]] == ["complete", "complete"]
            assert resumed["cells"][0]["previous_attempts"] == [] and (done / "log.txt").read_bytes() == fsdp_log
            assert resumed["cells"][1]["previous_attempts"] == ["cells/miles-megatron-colocate/rep-0.attempt-1"]
            assert read_metric_steps(run_dir, resumed["cells"][1]) == list(range(1, 7))
            assert "standin done" in (stopped / "log.txt").read_text()
        finally:
            stop_marked(marked_processes(mark[MARK_VAR]), grace_s=10)
            for ray_json in run_dir.glob("cells/*/rep-*/ray.json"):  # the heads' temp dirs (logs) outside tmp_path
                shutil.rmtree(json.loads(ray_json.read_text())["temp_dir"], ignore_errors=True)
        assert wait_until_none(mark[MARK_VAR], 10) == {}


class TestKilledHarness:
    def test_resume_stops_the_ray_job_and_the_private_head_a_sigkilled_harness_left_before_the_rerun(
        self, tmp_path: Path
    ):
        """The harness is SIGKILLed while its cell's Ray job holds after step 2: the head and the job outlive it. The
        resume stops the job (`ray job stop`: its entrypoint sees SIGTERM) and the old head before rerunning."""
        require_ray()
        mark, hold = new_mark(), tmp_path / "hold"
        hold.touch()
        cell = ray_cell("fsdp", tmp_path, steps=4, extra=["--hold-after", "2", "--hold-file", str(hold)])
        plan = write_plan(tmp_path / "plan", [cell])
        run_dir, log = tmp_path / "run", tmp_path / "harness.log"
        try:
            with open(log, "w") as out:
                popen = subprocess.Popen(
                    harness(str(plan), "--output-dir", str(run_dir), "--ray", "auto"),
                    env=marked_env(mark), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                )  # fmt: skip
                wait_for_step(run_dir, "miles-fsdp-colocate", still_running=lambda: popen.poll() is None)
                popen.kill()
                popen.wait(timeout=60)
            (left,) = read_manifest(run_dir)["cells"]
            old_ray = json.loads((run_dir / "cells/miles-fsdp-colocate/rep-0/ray.json").read_text())
            leader = old_ray["pid"]
            old_head = [(pid, info.start_time) for pid, info in read_proc_table().items() if info.sid == leader]
            assert len(old_head) >= 3 and (leader, read_proc_info(leader).start_time) in old_head, log.read_text()
            (driver,) = read_pid_file(tmp_path / "fsdp.pids")
            assert is_alive(*driver)

            resume = subprocess.Popen(
                harness("--resume", str(run_dir)), env=marked_env(mark), stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            )  # fmt: skip
            try:  # the rerun holds too, until the old job and head are gone
                wait_for(lambda: not any(is_alive(*p) for p in [driver, *old_head]), 180, "the old job and head")
                assert (tmp_path / "fsdp.sigterm").read_text().split()[1] == str(driver[0])
            finally:
                hold.unlink()
            out, _ = resume.communicate(timeout=300)
            assert resume.returncode == 0, out
            assert f"stopping Ray job {left['ray']['submission_id']} left by the previous harness" in out
            assert left["ray"]["head"]["leader"]["pid"] == leader
            (rerun,) = read_manifest(run_dir)["cells"]
            assert rerun["state"] == "complete" and rerun["ray"] is None
            assert read_metric_steps(run_dir, rerun) == [1, 2, 3, 4]
            new_ray = json.loads((run_dir / "cells/miles-fsdp-colocate/rep-0/ray.json").read_text())
            assert not Path(old_ray["temp_dir"]).exists() and not Path(new_ray["temp_dir"]).exists()
            assert wait_until_none(mark[MARK_VAR], 10) == {}, "the resume left processes behind"
        finally:
            stop_marked(marked_processes(mark[MARK_VAR]), grace_s=10)
            for ray_json in run_dir.glob("cells/*/rep-*/ray.json"):
                shutil.rmtree(json.loads(ray_json.read_text())["temp_dir"], ignore_errors=True)


class _LocalCluster:
    """A two-node Ray cluster the test starts itself (not the harness): head "a", worker "b", told apart by a custom
    resource and by STANDIN_RAY_NODE in each node's environment (which its workers and job drivers inherit)."""

    def __init__(self, tmp_path: Path, mark: dict[str, str]):
        self.mark = mark
        self.gcs_port, self.dashboard_port = free_ports(2)
        self.temp_dir = Path(f"/tmp/bench-ray-test-{os.getpid()}-{self.gcs_port}")
        self.logs = tmp_path / "cluster"
        self.logs.mkdir()
        self.nodes: dict[str, subprocess.Popen] = {}

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def start(self) -> None:
        """Each node is started again when its `ray start` exits before it is up (Ray's own start-up fails now and
        then on a loaded machine, e.g. a free port taken meanwhile): the test waits for events, never a window."""
        self._start_until_up(
            "a", self._head_options, lambda: self._ray_ok("status", f"--address={self.gcs_address}"), "the Ray head"
        )
        self._start_until_up(
            "b",
            lambda: [f"--address={self.gcs_address}", '--resources={"node_b": 1}'],
            lambda: self._alive_nodes() == 2,
            "the second Ray node to join",
        )
        wait_for(lambda: self._ray_ok("job", "list", f"--address={self.dashboard_url}"), 120, "the job server")

    def _head_options(self) -> list[str]:
        return [
            "--head", f"--port={self.gcs_port}", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}", f"--temp-dir={self.temp_dir}", '--resources={"node_a": 1}',
        ]  # fmt: skip

    def _start_until_up(self, name: str, options, up, what: str, attempts: int = 3) -> None:
        for attempt in range(attempts):
            if attempt and name == "a":
                self.gcs_port, self.dashboard_port = free_ports(2)
            self._start_node(name, options())
            node = self.nodes[name]
            wait_for(lambda node=node: node.poll() is not None or up(), 120, what)
            if node.poll() is None:
                return
        raise AssertionError(f"{what}: `ray start` exited {attempts} times; see {self.logs}")

    def _start_node(self, name: str, options: list[str]) -> None:
        """Two nodes on one machine: each its own agent and metrics ports (Ray's defaults would collide)."""
        agent_grpc, agent_http, metrics, runtime_env = free_ports(4)
        ports = [
            f"--dashboard-agent-grpc-port={agent_grpc}", f"--dashboard-agent-listen-port={agent_http}",
            f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
        ]  # fmt: skip
        argv = [str(RAY), "start", "--block", "--disable-usage-stats", *SMALL_NODE, *ports, *options]
        env = {**marked_env(self.mark), "STANDIN_RAY_NODE": name}
        with open(self.logs / f"node-{name}.log", "a") as log:
            self.nodes[name] = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    def _ray_ok(self, *args: str) -> bool:
        env = marked_env(self.mark)
        return subprocess.run([str(RAY), *args], env=env, capture_output=True, timeout=60).returncode == 0

    def _alive_nodes(self) -> int:
        out = subprocess.run(
            [str(RAY), "list", "nodes", f"--address={self.gcs_address}", "--format=json", "--filter", "state=ALIVE"],
            env=marked_env(self.mark), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        try:  # an empty answer is the text "No resource in the cluster"
            return len(json.loads(out.stdout)) if out.returncode == 0 else 0
        except json.JSONDecodeError:
            return 0

    def job_status(self, submission_id: str) -> str:
        out = subprocess.run(
            [str(RAY), "job", "status", f"--address={self.dashboard_url}", submission_id],
            env=marked_env(self.mark), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return out.stdout + out.stderr

    def running(self) -> bool:
        return all(node.poll() is None for node in self.nodes.values())

    def stop(self) -> None:
        """Worker first, then the head: SIGTERM to each `ray start` alone, then whatever carries the mark."""
        for name in ("b", "a"):
            node = self.nodes.get(name)
            if node is not None and node.poll() is None:
                node.send_signal(signal.SIGTERM)
                try:
                    node.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    pass
        stop_marked(marked_processes(self.mark[MARK_VAR]), grace_s=10)
        for node in self.nodes.values():
            if node.poll() is None:
                node.wait(timeout=10)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


class TestExistingCluster:
    def test_cells_land_on_the_node_their_placement_names_and_the_harness_never_stops_the_cluster(
        self, tmp_path: Path
    ):
        require_ray()
        cluster_mark, harness_mark = new_mark(), new_mark()
        cluster = _LocalCluster(tmp_path, cluster_mark)
        on_node = {name: ["--entrypoint-resources", json.dumps({f"node_{name}": 1})] for name in ("a", "b")}
        hold = tmp_path / "hold"
        hold.touch()  # the second cell holds after step 2 until it is stopped: interrupted however slow the box
        cells = [
            ray_cell("fsdp", tmp_path, steps=2, extra=["--print-env"], submit=on_node["b"]),
            ray_cell(
                "megatron", tmp_path, steps=6, extra=["--print-env", "--hold-after", "2", "--hold-file", str(hold)],
                submit=on_node["a"],
            ),  # fmt: skip
        ]
        plan = write_plan(tmp_path / "plan", cells)
        run_dir, log = tmp_path / "run", tmp_path / "harness.log"
        try:
            cluster.start()
            env = marked_env(harness_mark, RAY_ADDRESS=cluster.gcs_address)
            argv = harness(str(plan), "--output-dir", str(run_dir), "--ray-dashboard-url", cluster.dashboard_url)
            with open(log, "w") as out:
                popen = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                code = _interrupt_when_stepping(popen, run_dir, "miles-megatron-colocate", log)
            assert code == 130, log.read_text()
            assert wait_until_none(harness_mark[MARK_VAR], 10) == {}, "the harness left processes behind"

            # Placement: each job ran on the node its entrypoint resources name; no cell started a head.
            manifest = read_manifest(run_dir)
            assert [c["state"] for c in manifest["cells"]] == ["complete", "interrupted"], log.read_text()
            on_b = (run_dir / "cells/miles-fsdp-colocate/rep-0/log.txt").read_text()
            on_a = (run_dir / "cells/miles-megatron-colocate/rep-0/log.txt").read_text()
            assert "STANDIN_RAY_NODE=b" in on_b and "STANDIN_RAY_NODE=a" not in on_b
            assert "STANDIN_RAY_NODE=a" in on_a and "STANDIN_RAY_NODE=b" not in on_a
            for cell in ("miles-fsdp-colocate", "miles-megatron-colocate"):
                ray_json = json.loads((run_dir / f"cells/{cell}/rep-0/ray.json").read_text())
                assert ray_json == {"gcs_address": cluster.gcs_address, "dashboard_url": cluster.dashboard_url,
                                    "private": False}  # fmt: skip
                assert not (run_dir / f"cells/{cell}/rep-0/ray-head.log").exists()

            # Interruption: `ray job stop` stopped the job (its entrypoint got SIGTERM), not the cluster.
            submit = (run_dir / "cells/miles-megatron-colocate/rep-0/command.sh").read_text()
            submission_id = re.search(r"--submission-id=(\S+)", submit).group(1)
            assert f"Job {submission_id!r} was stopped" in cluster.job_status(submission_id)
            driver_pid = int((tmp_path / "megatron.pids").read_text().split()[0])
            assert (tmp_path / "megatron.sigterm").read_text().split()[1] == str(driver_pid)
            assert cluster.running() and cluster._alive_nodes() == 2
        finally:
            cluster.stop()
            stop_marked(marked_processes(harness_mark[MARK_VAR]), grace_s=10)
        assert wait_until_none(cluster_mark[MARK_VAR], 10) == {}, "the test's own cluster left processes behind"
