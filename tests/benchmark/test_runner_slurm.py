"""The --emit-sbatch path on a real single-node Slurm (slurmctld + slurmd + munged, started by `.ci/local-slurm`; CI's
.ci/run starts one and exports BENCH_TEST_SLURM_CONF): the emitted script is submitted with `sbatch`, starts a real
Ray head inside the allocation, runs the cells (stand-in trainers as Ray jobs) through the harness, is interrupted by
`scancel`, and the run folder it leaves is resumed by a second emitted script.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

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
from tests.benchmark.standins.plans import REPO_ROOT, read_manifest, read_metric_steps, write_plan

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(480)]
_ACTIVE = ("PENDING", "CONFIGURING", "RUNNING")


@pytest.fixture
def slurm_conf() -> str:
    """CI (BENCH_REQUIRE_SLURM=1) must test Slurm for real: a missing cluster fails there, skips elsewhere."""
    conf = os.environ.get("BENCH_TEST_SLURM_CONF")
    problem = None
    if not conf:
        problem = "no Slurm for the tests: start one with `.ci/local-slurm start DIR`, set BENCH_TEST_SLURM_CONF"
    elif subprocess.run(["sinfo"], env={**os.environ, "SLURM_CONF": conf}, capture_output=True).returncode != 0:
        problem = f"sinfo fails with SLURM_CONF={conf}"
    if problem and os.environ.get("BENCH_REQUIRE_SLURM") == "1":
        pytest.fail(problem)
    if problem:
        pytest.skip(problem)
    return conf


def _slurm(args: list[str], env: dict[str, str], timeout_s: float = 60) -> str:
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout_s)
    assert result.returncode == 0, f"{args}: {result.stdout}{result.stderr}"
    return result.stdout.strip()


def _emit(args: list[str], script: Path, env: dict[str, str]) -> str:
    """`run.py execute ... --emit-sbatch SCRIPT`, run from the repository (the script's working directory)."""
    result = subprocess.run(
        [*harness(*args), "--grace-s", "5", "--emit-sbatch", str(script)],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return script.read_text()


def _job_state(job_id: str, env: dict[str, str]) -> str:
    out = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True, timeout=30)
    return next((w.split("=", 1)[1] for w in out.stdout.split() if w.startswith("JobState=")), "GONE")


class TestSbatch:
    def test_the_emitted_script_runs_the_cells_under_slurm_survives_scancel_and_resumes(
        self, tmp_path: Path, slurm_conf: str
    ):
        require_ray()
        mark = new_mark()
        gcs_port, dashboard_port = free_ports(2)
        ray_temp = Path(f"/tmp/bench-slurm-ray-{os.getpid()}")  # short: Ray's socket paths are limited
        env = marked_env(
            mark, SLURM_CONF=slurm_conf, BENCH_RAY=str(RAY), BENCH_RAY_PORT=str(gcs_port),
            BENCH_RAY_DASHBOARD_PORT=str(dashboard_port),
            BENCH_RAY_START_ARGS=" ".join([*SMALL_NODE, f"--temp-dir={ray_temp}"]),
        )  # fmt: skip
        cells = [
            ray_cell("fsdp", tmp_path, steps=3, extra=[], gpus_per_node=1),
            ray_cell("megatron", tmp_path, steps=30, extra=[], gpus_per_node=1),
        ]
        plan = write_plan(tmp_path / "plan", cells)
        run_dir = tmp_path / "run"
        sbatch = ["sbatch", "--parsable", "-o", str(tmp_path / "slurm-%j.out")]
        jobs: list[str] = []
        try:
            script = _emit([str(plan), "--output-dir", str(run_dir)], tmp_path / "run.sbatch", env)
            assert "#SBATCH --gpus-per-node=1" in script and "--ray external" in script
            first = _slurm([*sbatch, str(tmp_path / "run.sbatch")], env)
            jobs.append(first)
            wait_for_step(run_dir, "miles-megatron-colocate", still_running=lambda: _job_state(first, env) in _ACTIVE)
            _slurm(["scancel", first], env)
            wait_for(lambda: _job_state(first, env) not in (*_ACTIVE, "COMPLETING"), 120, "the cancelled job to end")
            output = (tmp_path / f"slurm-{first}.out").read_text()
            assert _job_state(first, env) == "CANCELLED", output
            assert wait_until_none(mark[MARK_VAR], 30) == {}, "the cancelled job left processes behind"

            manifest = read_manifest(run_dir)
            assert [c["state"] for c in manifest["cells"]] == ["complete", "interrupted"], output
            assert manifest["cells"][1]["reason"] == "interrupted by SIGTERM"
            assert read_metric_steps(run_dir, manifest["cells"][0]) == [1, 2, 3]
            assert (run_dir / "report.md").is_file() and (run_dir / "plan.json").is_file()

            resume = _emit(["--resume", str(run_dir)], tmp_path / "resume.sbatch", env)
            assert f"--resume {run_dir}" in resume
            jobs.append(_slurm([*sbatch, "--wait", str(tmp_path / "resume.sbatch")], env, timeout_s=300))
            resumed = read_manifest(run_dir)
            output = (tmp_path / f"slurm-{jobs[1]}.out").read_text()
            assert [c["state"] for c in resumed["cells"]] == ["complete", "complete"], output
            assert resumed["cells"][0]["previous_attempts"] == []
            assert resumed["cells"][1]["previous_attempts"] == ["cells/miles-megatron-colocate/rep-0.attempt-1"]
            assert read_metric_steps(run_dir, resumed["cells"][1]) == list(range(1, 31))
        finally:
            for job in jobs:
                subprocess.run(["scancel", job], env=env, capture_output=True, timeout=30)
            stop_marked(marked_processes(mark[MARK_VAR]), grace_s=10)
            shutil.rmtree(ray_temp, ignore_errors=True)
        assert wait_until_none(mark[MARK_VAR], 30) == {}


class TestSbatchChecks:
    def test_a_ray_head_that_dies_ends_the_job_at_once_naming_its_node(self, tmp_path: Path, slurm_conf: str):
        """`ray start` that exits at once (BENCH_RAY=false): the job fails with one line naming the node, instead of
        waiting out the 300 s and running the benchmark against no cluster."""
        mark = new_mark()
        env = marked_env(mark, SLURM_CONF=slurm_conf, BENCH_RAY="false")
        plan = write_plan(tmp_path / "plan", [ray_cell("fsdp", tmp_path, steps=3, extra=[], gpus_per_node=1)])
        _emit([str(plan), "--output-dir", str(tmp_path / "run")], tmp_path / "run.sbatch", env)
        sbatch = ["sbatch", "--parsable", "--wait", "-o", str(tmp_path / "slurm-%j.out"), str(tmp_path / "run.sbatch")]
        try:
            done = subprocess.run(sbatch, env=env, capture_output=True, text=True, timeout=240)
            job = done.stdout.strip().splitlines()[0]
            output = (tmp_path / f"slurm-{job}.out").read_text()
            assert done.returncode != 0, output
            assert "error: the Ray node on " in output and " exited" in output, output
            assert not (tmp_path / "run" / "manifest.json").exists()  # the benchmark never started
        finally:
            stop_marked(marked_processes(mark[MARK_VAR]), grace_s=10)
