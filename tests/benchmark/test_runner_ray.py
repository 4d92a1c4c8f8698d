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
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from tests.benchmark.process_marks import MARK_VAR, marked_processes, new_mark, stop_marked, wait_until_none
from tests.benchmark.standins.plans import RUN_PY, read_manifest, read_metric_steps, standin_cell, write_plan

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(420)]

RAY = Path(sys.executable).parent / "ray"
# Small nodes for a 2-core CI machine: one CPU each, a 100 MB object store.
SMALL_NODE = ["--num-cpus=1", "--object-store-memory=100000000"]
RUNTIME_ENV = {"env_vars": {"STANDIN_JOB_ENV": "from-runtime-env"}}


def _require_ray() -> None:
    if not RAY.is_file():
        pytest.fail(f"the Ray CLI is missing at {RAY}: install the test extra (pip install -e '.[test]')")


def _ray_cell(backend: str, tmp_path: Path, *, steps: int, extra: list[str], submit: list[str] = ()) -> dict:
    """A Miles-style cell: `ray job submit ... -- python3 standin_trainer.py`, like Miles's own launchers."""
    cell = standin_cell("miles", backend=backend, steps=steps, step_s=0.2, python="python3")
    probes = ["--pid-file", str(tmp_path / f"{backend}.pids"), "--sigterm-file", str(tmp_path / f"{backend}.sigterm")]
    cell["argv"] += [*probes, *extra]
    cell["launch_argv"] = [
        "ray", "job", "submit", "--address", "http://127.0.0.1:8265", *submit,
        "--runtime-env-json", json.dumps(RUNTIME_ENV), "--", *cell["argv"],
    ]  # fmt: skip
    cell["gpus"] = {**cell["gpus"], "per_node": 0}
    return cell


def _harness(*args: str) -> list[str]:
    return [
        sys.executable, str(RUN_PY), "execute", *args,
        "--miles-python", sys.executable, "--grace-s", "15", "--poll-interval-s", "0.1",
    ]  # fmt: skip


def _env(mark: dict[str, str], **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", MARK_VAR)}
    return {**base, **mark, "BENCH_RAY_START_ARGS": " ".join(SMALL_NODE), **extra}


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


def _interrupt_when_stepping(popen: subprocess.Popen, run_dir: Path, cell_id: str, log: Path) -> int:
    """SIGINT to the harness once the cell wrote a step; returns the harness's exit status."""
    metrics = run_dir / "cells" / cell_id / "rep-0" / "metrics.jsonl"

    def stepping() -> bool:
        if popen.poll() is not None:
            raise AssertionError(f"the harness exited early ({popen.returncode}):\n{log.read_text()}")
        return metrics.is_file() and metrics.stat().st_size > 0

    _wait_for(stepping, 180, f"a step of {cell_id}")
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
        _require_ray()
        mark = new_mark()
        cells = [
            _ray_cell("fsdp", tmp_path, steps=3, extra=["--print-env"]),
            _ray_cell("megatron", tmp_path, steps=30, extra=[]),
        ]
        plan = write_plan(tmp_path / "plan", cells)
        run_dir, log = tmp_path / "run", tmp_path / "harness.log"
        try:
            with open(log, "w") as out:
                popen = subprocess.Popen(
                    _harness(str(plan), "--output-dir", str(run_dir), "--ray", "auto"),
                    env=_env(mark), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
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
            result = subprocess.run(
                _harness("--resume", str(run_dir)), env=_env(mark), capture_output=True, text=True, timeout=300
            )
            assert result.returncode == 0, result.stdout + result.stderr
            resumed = read_manifest(run_dir)
            assert [c["state"] for c in resumed["cells"]] == ["complete", "complete"]
            assert resumed["cells"][0]["previous_attempts"] == [] and (done / "log.txt").read_bytes() == fsdp_log
            assert resumed["cells"][1]["previous_attempts"] == ["cells/miles-megatron-colocate/rep-0.attempt-1"]
            assert read_metric_steps(run_dir, resumed["cells"][1]) == list(range(1, 31))
            assert "standin done" in (stopped / "log.txt").read_text()
        finally:
            stop_marked(marked_processes(mark[MARK_VAR]), grace_s=10)
        assert wait_until_none(mark[MARK_VAR], 10) == {}
