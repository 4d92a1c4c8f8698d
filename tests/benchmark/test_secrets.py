"""No secret reaches a file the harness writes, nor what it prints: secrets planted in the environment, the flags and
the spec of a stand-in run, by every name and token shape the redaction knows, then every file of the planned and
executed run folder scanned.

The scanner's patterns are written here, looser than the harness's own (any `ghp_`-like prefix with 20 characters,
any user:password@ in a URL), and it also looks for every planted value literally, shaped or not.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from tests.benchmark.standins.plans import RUN_PY, STANDINS, reprove, run_harness, standin_cell, write_plan

GHP = "ghp_" + "Zq8Rk2Vt" * 5
FINE_GRAINED = "github_pat_11AAAAAAA0" + "b7Kd" * 15
HUGGING_FACE = "hf_" + "PqRsTuVw" * 4 + "xy"
AWS_KEY_ID = "AKIA" + "J7QW3ZPL5TXV9MBN"
SLACK = "xoxb-2222222222-3333333333-" + "Zx" * 12
OPENAI = "sk-proj-" + "Hj5k" * 10
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJiZW5jaC1hZ2VudCJ9.Sfl" + "Kxw" * 10
DB_PASSWORD = "hunter2-db-pw"

ENV = {
    "GITHUB_PAT": GHP,
    "GH_AUTH": "gh-auth-plain-value",
    "HF_HUB_CREDENTIAL": HUGGING_FACE,
    "DATABASE_URL": f"postgresql://bench:{DB_PASSWORD}@db.internal:5432/history",
    "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
    "SLACK_BOT": SLACK,
    "OPENAI_API_KEY": OPENAI,
    "SESSION_JWT": JWT,
    "RELEASE_NOTES": f"published with {FINE_GRAINED}",
    "TRAINER_FLAGS": "--github-token flag-plain-value --wandb-token wandb-plain-value --lr 1e-6",
}
"""Names the first rules missed, shapes under ordinary names, and flags inside an ordinary variable's value."""
PLANTED = [GHP, FINE_GRAINED, HUGGING_FACE, AWS_KEY_ID, SLACK, OPENAI, JWT, DB_PASSWORD, "gh-auth-plain-value"]
PLANTED += ["flag-plain-value", "wandb-plain-value"]
SCANNER = re.compile(
    r"gh[a-z]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|hf_[A-Za-z0-9]{20,}|A[KS]IA[0-9A-Z]{16}|xox[a-z]-[\w-]{10,}"
    r"|sk-[\w-]{20,}|eyJ[\w-]{5,}\.[\w-]{5,}\.[\w-]{5,}|://[^\s/:@\"']+:(?!<redacted>)[^\s/@\"']+@"
)


def _found(text: str) -> list[str]:
    return [value for value in PLANTED if value in text] + SCANNER.findall(text)


def _scan(folder: Path) -> dict[str, list[str]]:
    hits = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        found = _found(path.read_bytes().decode("utf-8", errors="replace"))
        if found:
            hits[str(path.relative_to(folder))] = found
    return hits


def _run_py(*args: str, planted: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUN_PY), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(ENV if planted else {})})  # fmt: skip


def test_a_planned_and_executed_stand_in_run_folder_holds_no_secret(tmp_path):
    """The dry run and the run of a Miles/VERL pair with every planted secret in the environment; the stand-in
    trainers print their whole environment (so the cell's log carries each secret) and write the real sinks."""
    plan_dir, run_dir = tmp_path / "plan", tmp_path / "run"
    planned = _run_py("--preset", "smoke", "--backend", "fsdp", "--compare-verl", "--num-steps", "3",
                      "--output-dir", str(plan_dir), "--dry-run")  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    plan = json.loads((plan_dir / "plan.json").read_text())
    for cell in plan["cells"]:
        sink = cell["sink"]
        argv = [sys.executable, str(STANDINS / "standin_trainer.py"), "--format", sink["format"], "--sink"]
        argv += [sink["path"], "--steps", "3", "--step-s", "0.02", "--startup-s", "0.01", "--print-env"]
        cell["argv"], cell["launch_argv"] = argv, list(argv)
    (plan_dir / "plan.json").write_text(json.dumps(plan, indent=2))
    reprove(plan_dir)
    executed = _run_py("execute", str(plan_dir / "plan.json"), "--output-dir", str(run_dir), "--skip-prepare",
                       "--no-preflight", "--ray", "none", "--poll-interval-s", "0.05", "--repeats", "1")  # fmt: skip
    assert executed.returncode == 0, executed.stdout + executed.stderr
    log = (run_dir / "cells" / plan["cells"][1]["id"] / "rep-0" / "log.txt").read_text()
    assert "GITHUB_PAT=<redacted>" in log and "TRAINER_FLAGS=--github-token <redacted>" in log  # the cell saw them
    assert (run_dir / "report.md").is_file() and len(list(run_dir.rglob("*"))) > 20
    assert _scan(plan_dir) == {} and _scan(run_dir) == {}
    assert _found(planned.stdout + planned.stderr + executed.stdout + executed.stderr) == []


def test_a_secret_in_the_spec_or_the_flags_is_refused_before_anything_is_written(tmp_path):
    """Token shapes in spec fields, a run.py flag and a launch prefix, and secret flags in a plan's launch: exit 2
    naming each place, never the value, and no folder written; none of them is in the environment, so only their
    name or their shape can tell."""
    import yaml

    from scripts.benchmark.spec import load_preset

    raw = load_preset("smoke").model_dump()
    raw["name"] = f"smoke-{OPENAI}"
    raw["data"]["prompt_data"] = f"/data/{HUGGING_FACE}/dapo.jsonl"
    raw["model"]["hf_checkpoint"] = f"/models/{AWS_KEY_ID}"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(raw))
    refused = _run_py("--spec", str(spec), "--output-dir", str(tmp_path / "out"), "--dry-run",
                      "--miles-root", f"/opt/{GHP}/miles", planted=False)  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    for where in ("spec.name (an sk- API key)", "spec.data.prompt_data (a Hugging Face token)",
                  "spec.model.hf_checkpoint (an AWS access key id)", "(a GitHub token)"):  # fmt: skip
        assert where in refused.stderr, refused.stderr
    assert _found(refused.stdout + refused.stderr) == [] and not (tmp_path / "out").exists()

    cell = standin_cell("verl", steps=1)
    cell["launch_argv"] += ["--github-token", "flag-plain-value", "--wandb-token", "wandb-plain-value",
                            "--db-url", ENV["DATABASE_URL"], "--lr", GHP, "--ref", AWS_KEY_ID]  # fmt: skip
    plan = write_plan(tmp_path / "plan", [cell])
    refused = run_harness(str(plan), "--output-dir", str(tmp_path / "run"))
    assert refused.returncode == 2, refused.stderr
    for where in ("launch_argv: --github-token", "launch_argv: --wandb-token", "(a password in a URL)",
                  "(a GitHub token)", "(an AWS access key id)"):  # fmt: skip
        assert where in refused.stderr, refused.stderr
    assert _found(refused.stdout + refused.stderr) == [] and not (tmp_path / "run").exists()

    clean = write_plan(tmp_path / "clean", [standin_cell("verl", steps=1)])
    prefix = f"env HF_TOKEN={HUGGING_FACE}"
    refused = run_harness(str(clean), "--output-dir", str(tmp_path / "run"), "--verl-prefix", prefix)
    assert refused.returncode == 2 and "--side-prefix verl" in refused.stderr, refused.stderr
    assert _found(refused.stdout + refused.stderr) == [] and not (tmp_path / "run").exists()
