"""A plan carries what its dry run printed: `run.py --dry-run` then `run.py execute plan.json` runs the repeats the
dry run announced, and a plan executes only with the proof it was made with (its spec hash, its parity table).

Every step is the real `run.py` in a subprocess; only the framework commands of the plan are replaced by the stand-in
trainer (tests/benchmark/standins/standin_trainer.py).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from tests.benchmark.test_end_to_end import _run_py, _substitute_standins


def _plan(folder: Path, *extra: str) -> str:
    planned = _run_py("--preset", "smoke", "--backend", "fsdp", "--num-steps", "2", "--output-dir", str(folder),
                      "--dry-run", *extra)  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    _substitute_standins(folder / "plan.json")
    return planned.stdout


def _execute(plan: Path, run: Path, *extra: str):
    return _run_py("execute", str(plan), "--output-dir", str(run), "--skip-prepare", "--no-preflight",
                   "--poll-interval-s", "0.05", *extra)  # fmt: skip


def _repeats_run(run: Path) -> Counter:
    manifest = json.loads((run / "manifest.json").read_text())
    assert {c["state"] for c in manifest["cells"]} == {"complete"}
    return Counter(c["id"] for c in manifest["cells"])


def test_dry_run_then_execute_runs_the_repeats_the_dry_run_printed(tmp_path: Path):
    printed = _plan(tmp_path / "D", "--compare-verl")
    announced = int(re.search(r"repeats: (\d+) interleaved per cell", printed).group(1))
    assert announced == 3
    executed = _execute(tmp_path / "D" / "plan.json", tmp_path / "R")
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert _repeats_run(tmp_path / "R") == {"miles-fsdp-colocate": 3, "verl-fsdp-colocate": 3}


def test_a_repeats_option_of_the_dry_run_travels_and_execute_can_still_override_it(tmp_path: Path):
    printed = _plan(tmp_path / "D", "--repeats", "2")
    assert "repeats: 2 interleaved per cell" in printed
    assert json.loads((tmp_path / "D" / "plan.json").read_text())["repeats"] == 2
    assert _execute(tmp_path / "D" / "plan.json", tmp_path / "R2").returncode == 0
    assert _repeats_run(tmp_path / "R2") == {"miles-fsdp-colocate": 2}
    assert _execute(tmp_path / "D" / "plan.json", tmp_path / "R1", "--repeats", "1").returncode == 0
    assert _repeats_run(tmp_path / "R1") == {"miles-fsdp-colocate": 1}
