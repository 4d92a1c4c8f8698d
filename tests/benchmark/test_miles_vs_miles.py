"""Two builds of one framework through the same code as Miles vs VERL: Miles at its default target (the candidate)
against the Miles release (the reference side `miles-base`). The plan's parity proof matches every knob but the
declared target; the run uses the Miles stand-in (the real miles-stdout sink); the report carries the pair's
headline card.

Every step is the real `run.py` in a subprocess, as a maintainer types it (Miles is a registered framework)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from scripts.benchmark.frameworks.miles.versions import DEFAULT_MILES_TARGET, MILES_RELEASE
from tests.benchmark.standins.plans import STANDINS, reprove, run_py

STEP_S = {"miles": 0.04, "miles-base": 0.05}
"""The release side is the slower stand-in, so the pair has a difference to report."""


def _plan(out: Path) -> subprocess.CompletedProcess:
    sides = ["--candidate", "miles", "--reference", f"miles@{MILES_RELEASE}"]
    return run_py("--preset", "smoke", "--backend", "megatron", "--output-dir", str(out), "--dry-run", *sides)


def _substitute_standins(plan_path: Path) -> dict:
    plan = json.loads(plan_path.read_text())
    for cell in plan["cells"]:
        sink = cell["sink"]
        argv = [sys.executable, str(STANDINS / "standin_trainer.py"), "--format", sink["format"]]
        argv += ["--sink", sink["path"], "--steps", str(cell["num_steps"]), "--step-s", str(STEP_S[cell["side"]])]
        cell["argv"], cell["launch_argv"] = argv, list(argv)
    plan_path.write_text(json.dumps(plan, indent=2))
    reprove(plan_path.parent)
    return plan


def test_two_miles_targets_plan_with_only_the_target_and_its_sink_declared(tmp_path):
    planned = _plan(tmp_path / "D")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = json.loads((tmp_path / "D" / "plan.json").read_text())
    assert [(s["role"], s["name"], s["framework"], s["target"], s["label"]) for s in plan["sides"]] == [
        ("candidate", "miles", "miles", DEFAULT_MILES_TARGET, f"Miles {DEFAULT_MILES_TARGET}"),
        ("reference", "miles-base", "miles", MILES_RELEASE, f"Miles {MILES_RELEASE}"),
    ]
    assert plan["targets"] == {"miles": DEFAULT_MILES_TARGET, "miles-base": MILES_RELEASE}
    assert [(c["id"], c["side"]) for c in plan["cells"]] == [
        ("miles-megatron-colocate", "miles"),
        ("miles-base-megatron-colocate", "miles-base"),
    ]
    assert [step["name"] for step in plan["prepare"]] == ["download-model", "download-dataset"]  # no conversion
    (pair,) = json.loads((tmp_path / "D" / "parity.json").read_text())["pairs"]
    differing = {row["knob"]: row for row in pair["rows"] if row["status"] != "matched"}
    # colocated: both prefill off; no decode-graph cap in the launches: each bundled SGLang's own rule
    assert list(differing) == ["target", "cuda_graph_max_bs", "rollout_engine_version", "metric_sink"]
    assert {row["status"] for row in differing.values()} == {"asymmetry"}
    assert (differing["rollout_engine_version"]["candidate"], differing["rollout_engine_version"]["reference"]) == (
        "sglang 0.5.16 + Miles's patches (sglang-miles)",
        "sglang 0.5.12 (bundled with this Miles release)",
    )
    assert (differing["metric_sink"]["candidate"], differing["metric_sink"]["reference"]) == (
        "benchmark tracking backend (BENCH_TRACKING_DIR)",
        "stdout",
    )
    assert (differing["target"]["candidate"], differing["target"]["reference"]) == (
        DEFAULT_MILES_TARGET,
        MILES_RELEASE,
    )
    text = (tmp_path / "D" / "parity.md").read_text()
    assert "## miles-megatron-colocate vs miles-base-megatron-colocate" in text
    assert f"| group | knob | Miles {DEFAULT_MILES_TARGET} | Miles {MILES_RELEASE} | status |" in text
    assert "0 mismatches" in text and "VERL" not in text.split("## ")[1]


def test_two_miles_targets_run_and_report_with_the_headline_card(tmp_path):
    plan_dir, run_dir = tmp_path / "D", tmp_path / "R"
    planned = _plan(plan_dir)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = _substitute_standins(plan_dir / "plan.json")
    executed = run_py("execute", str(plan_dir / "plan.json"), "--output-dir", str(run_dir), "--skip-prepare",
                       "--no-preflight", "--ray", "none", "--poll-interval-s", "0.05", "--repeats", "1")  # fmt: skip
    steps = plan["spec"]["run"]["num_steps"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [(c["id"], c["side"], c["state"], c["steps_completed"]) for c in manifest["cells"]] == [
        ("miles-megatron-colocate", "miles", "complete", steps),
        ("miles-base-megatron-colocate", "miles-base", "complete", steps),
    ], (
        executed.stdout + executed.stderr
    )
    assert manifest["sides"] == plan["sides"]

    reported = run_py("report", str(run_dir))
    assert reported.returncode == 0, reported.stdout + reported.stderr
    report = json.loads((run_dir / "report.json").read_text())
    step = next(c for c in report["comparisons"] if c["metric"] == "step_time_s")
    assert (step["candidate_cell"], step["reference_cell"]) == (
        "miles-megatron-colocate",
        "miles-base-megatron-colocate",
    )
    assert step["ratio"] < 1  # the candidate stand-in is faster
    headline = (run_dir / "headline.md").read_text()
    assert "**megatron / colocate**" in headline
    assert f"Miles {DEFAULT_MILES_TARGET}" in headline and f"Miles {MILES_RELEASE}" in headline
    assert (
        f"## Miles {DEFAULT_MILES_TARGET} vs Miles {MILES_RELEASE}: megatron / colocate"
        in (run_dir / "report.md").read_text()
    )


def test_two_checkouts_of_one_target_plan_with_the_checkout_declared(tmp_path):
    """A PR head against its merge base: the same target, two checkouts; each cell runs its own checkout's train.py."""
    sides = ["--candidate", "miles", "--candidate-root", "/ci/miles-head"]
    sides += ["--reference", "miles", "--reference-root", "/ci/miles-base"]
    out = tmp_path / "D"
    planned = run_py("--preset", "smoke", "--backend", "fsdp", "--output-dir", str(out), "--dry-run", *sides)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert [(s["name"], s["target"], s["root"], s["label"]) for s in plan["sides"]] == [
        ("miles", DEFAULT_MILES_TARGET, "/ci/miles-head", "Miles miles-head"),
        ("miles-base", DEFAULT_MILES_TARGET, "/ci/miles-base", "Miles miles-base"),
    ]
    for cell, root in zip(plan["cells"], ("/ci/miles-head", "/ci/miles-base"), strict=True):
        assert f"{root}/train.py" in cell["launch_argv"], cell["launch_argv"]
    parity = json.loads((out / "parity.json").read_text())
    rows = {row["knob"]: row for row in parity["pairs"][0]["rows"]}
    assert (rows["target"]["status"], rows["checkout"]["status"]) == ("matched", "asymmetry")
    assert (rows["checkout"]["candidate"], rows["checkout"]["reference"]) == ("/ci/miles-head", "/ci/miles-base")
    assert [r["knob"] for r in parity["pairs"][0]["rows"] if r["status"] != "matched"] == ["checkout"]


def test_a_side_checkout_is_refused_where_it_cannot_apply(tmp_path):
    base = ["--preset", "smoke", "--backend", "fsdp", "--dry-run"]
    cases = {
        "no_reference": (["--reference-root", "/ci/base"], "--reference-root needs --reference"),
        "relative": (["--candidate-root", "ci/head", "--reference", "miles@" + MILES_RELEASE], "absolute path"),
        "same_build": (["--reference", "miles"], "another target or checkout"),
    }
    for name, (args, message) in cases.items():
        out = tmp_path / name
        result = run_py(*base, "--output-dir", str(out), *args)
        assert result.returncode == 2, (name, result.stdout + result.stderr)
        assert message in result.stderr and "Traceback" not in result.stderr, (name, result.stderr)
        assert not out.exists(), name


def _head_and_base_run(root: Path, step_s: dict[str, float]) -> Path:
    """A PR head against its merge base as the PR workflow runs it: two checkouts of one target, the default
    repeats, the stand-in trainer in place of each checkout's train.py (head and base step times as given)."""
    sides = ["--candidate", "miles", "--candidate-root", "/ci/miles-head"]
    sides += ["--reference", "miles", "--reference-root", "/ci/miles-base"]
    plan_dir, run_dir = root / "D", root / "R"
    planned = run_py("--preset", "smoke", "--backend", "fsdp", "--output-dir", str(plan_dir), "--dry-run", *sides)
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "repeats: 3 interleaved per cell" in planned.stdout
    assert "cost, 3 repeat(s): node wall time" in planned.stdout
    STEP_S.update(step_s)
    try:
        _substitute_standins(plan_dir / "plan.json")
    finally:
        STEP_S.update({"miles": 0.04, "miles-base": 0.05})
    executed = run_py("execute", str(plan_dir / "plan.json"), "--output-dir", str(run_dir), "--skip-prepare",
                       "--no-preflight", "--ray", "none", "--poll-interval-s", "0.05", "--repeats", "3")  # fmt: skip
    assert executed.returncode == 0, executed.stdout + executed.stderr
    reported = run_py("report", str(run_dir))
    assert reported.returncode == 0, reported.stdout + reported.stderr
    return run_dir


def test_the_paired_check_fails_a_slower_head_and_passes_an_equal_one(tmp_path):
    """`run.py ab`: exit 1 and REGRESSED when the head is 25% slower than its merge base, 0 when both builds are
    the same speed; the verdict names the phase that moved."""
    slower = _head_and_base_run(tmp_path / "slower", {"miles": 0.05, "miles-base": 0.04})
    judged = run_py("ab", str(slower))
    assert judged.returncode == 1, judged.stdout + judged.stderr
    verdict = (slower / "ab.md").read_text()
    assert verdict.startswith("### Paired check (head vs base): REGRESSION (exit 1)")
    row = next(line for line in verdict.splitlines() if "| step_time_s |" in line)
    assert row.startswith("| fsdp/colocate |") and "**REGRESSED**" in row and "(n=3)" in row, row
    assert "the phase that moved most is" in verdict
    assert json.loads((slower / "ab.json").read_text())["exit_code"] == 1

    equal = _head_and_base_run(tmp_path / "equal", {"miles": 0.04, "miles-base": 0.04})
    judged = run_py("ab", str(equal), "--output", str(tmp_path / "equal.md"))
    assert judged.returncode == 0, judged.stdout + judged.stderr
    row = next(line for line in (tmp_path / "equal.md").read_text().splitlines() if "| step_time_s |" in line)
    assert "REGRESSED" not in row and "IMPROVED" not in row, row


def test_the_paired_check_without_a_report_could_not_judge(tmp_path):
    judged = run_py("ab", str(tmp_path))
    assert judged.returncode == 2 and "could not judge" in judged.stderr and "report.json" in judged.stderr
    assert "Traceback" not in judged.stderr and not (tmp_path / "ab.md").exists()
