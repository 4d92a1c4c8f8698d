"""The README's main command, as a newcomer runs it, then `execute` with stand-in frameworks, ends with report.md.

What the README installs is read from its main-command block: every optional module of an extra it does not install
is made unimportable in the subprocesses (tests/benchmark/standins/blocker), as on a fresh machine with only those
extras. The stand-ins replace the framework commands of the plan and nothing else.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from scripts.benchmark.errors import MODULE_EXTRAS
from tests.benchmark.standins.plans import REPO_ROOT, STANDINS, reprove

README = REPO_ROOT / "README.md"


def _main_command() -> str:
    text = README.read_text()
    block = text.split("<!-- main-command:start -->", 1)[1].split("<!-- main-command:end -->", 1)[0]
    return "\n".join(line for line in block.splitlines() if line.strip() and not line.startswith("```"))


def _installed_extras(command: str) -> set[str]:
    match = re.search(r'pip install -q -e "\.\[([a-z,]+)\]"', command)
    assert match, f"the README main command installs no extras: {command}"
    return set(match.group(1).split(","))


def _run_py_argv(command: str, output_dir: Path) -> list[str]:
    """The run.py part of the README command, with its --output-dir moved into the test folder."""
    words = shlex.split(command.split("&&")[-1])
    assert words[0] == ".venv/bin/python" and words[1] == "scripts/benchmark/run.py", words
    at = words.index("--output-dir")
    words[at + 1] = str(output_dir)
    return [sys.executable, str(REPO_ROOT / words[1]), *words[2:]]


def test_the_readme_install_brings_what_a_run_needs_to_end_with_its_report(tmp_path: Path):
    command = _main_command()
    extras = _installed_extras(command)
    assert "analysis" in extras, "a real run ends with its report, which needs the analysis extra"
    blocked = sorted(module for module, extra in MODULE_EXTRAS.items() if extra not in extras)
    env = {**os.environ, "PYTHONPATH": str(STANDINS / "blocker"), "BENCH_TEST_BLOCK_MODULES": ",".join(blocked)}

    out = tmp_path / "bench-out"
    planned = subprocess.run(_run_py_argv(command, out), capture_output=True, text=True, env=env, cwd=tmp_path,
                             timeout=300)  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert "--dry-run" in command and "dry run: nothing executed" in planned.stdout

    plan = json.loads((out / "plan.json").read_text())
    for cell in plan["cells"]:
        argv = [sys.executable, str(STANDINS / "standin_trainer.py"), "--format", cell["sink"]["format"]]
        argv += ["--sink", cell["sink"]["path"], "--steps", "6", "--step-s", "0.02", "--startup-s", "0"]
        cell["argv"], cell["launch_argv"], cell["num_steps"] = argv, list(argv), 6
    plan["cells"] = [c for c in plan["cells"] if c["backend"] == "fsdp"]
    (out / "plan.json").write_text(json.dumps(plan))
    reprove(out)

    run_dir = tmp_path / "run"
    execute = [sys.executable, str(REPO_ROOT / "scripts/benchmark/run.py"), "execute", str(out / "plan.json")]
    execute += ["--output-dir", str(run_dir), "--skip-prepare", "--no-preflight", "--ray", "none"]
    ran = subprocess.run([*execute, "--poll-interval-s", "0.05"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "report: not written" not in ran.stdout + ran.stderr
    report = (run_dir / "report.md").read_text()
    assert "## Miles vs VERL: fsdp / colocate" in report
