"""The runner's time budget and a sequential pair's rounds (runner/rounds.py): unit tests on a clock the test moves,
then a sequential head/base run through `run.py` with the stand-in trainer, decided and judged again by `run.py ab`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.benchmark.contracts.manifest import NOT_NEEDED, SKIPPED, Manifest, new_cell_run
from scripts.benchmark.runner.executor import interleaved_order
from scripts.benchmark.runner.rounds import Rounds
from tests.benchmark.standins.plans import STANDINS, reprove, run_py

CELLS = [
    {"id": "miles-fsdp-colocate", "framework": "miles", "side": "miles", "backend": "fsdp", "layout": "colocate"},
    {"id": "miles-base-fsdp-colocate", "framework": "miles", "side": "miles-base", "backend": "fsdp",
     "layout": "colocate"},
]  # fmt: skip


class FakeLooks:
    """A PairLooks that decides at a given round and records what it was asked."""

    def __init__(self, decide_at: int | None = None):
        self.decide_at = decide_at
        self.asked: list[tuple[int, bool]] = []

    def decided_round(self) -> int | None:
        return None

    def look(self, round_number: int, last_round: bool) -> tuple[bool, str]:
        self.asked.append((round_number, last_round))
        stops = last_round or round_number == self.decide_at
        return stops, f"round {round_number}"


def _rounds(tmp_path: Path, *, max_rounds: int, budget_s: float | None, launch_s: float, looks: FakeLooks):
    from scripts.benchmark.contracts.sides import Side, SidePair

    sides = SidePair(
        candidate=Side(role="candidate", name="miles", framework="miles", label="head"),
        reference=Side(role="reference", name="miles-base", framework="miles", label="base"),
    )
    runs = [new_cell_run(cell, rep) for cell, rep in interleaved_order(CELLS, max_rounds, sides)]
    manifest = Manifest(path=tmp_path / "manifest.json", cells=runs)
    cost = {"cells": {c["id"]: {"launch_s": {"typical": launch_s, "upper": 2 * launch_s}} for c in CELLS}}
    plan = {"cells": CELLS, "cost": cost, "sequential": {"min_rounds": 3, "max_rounds": max_rounds}}
    return Rounds(plan, manifest, budget_s, lambda _dir: looks, now=0.0), manifest


def _drive(rounds: Rounds, manifest: Manifest, took_s: float) -> list[str]:
    """Run every launch the rounds allow, each `took_s` seconds on the test's clock; the states in order."""
    clock = 0.0
    for cell_run in manifest.cells:
        skip = rounds.skip(cell_run, now=clock)
        if skip is not None:
            manifest.set_state(cell_run, skip[0], reason=skip[1])
            continue
        rounds.started(cell_run, now=clock)
        manifest.set_state(cell_run, "running")
        clock += took_s
        manifest.set_state(cell_run, "complete")
        rounds.finished(cell_run, now=clock)
    return [c.state for c in manifest.cells]


def test_a_decided_look_ends_the_run_and_the_rest_is_not_needed(tmp_path):
    looks = FakeLooks(decide_at=3)
    rounds, manifest = _rounds(tmp_path, max_rounds=6, budget_s=None, launch_s=10.0, looks=looks)
    states = _drive(rounds, manifest, took_s=10.0)
    assert states == ["complete"] * 6 + [NOT_NEEDED] * 6
    assert looks.asked == [(1, False), (2, False), (3, False)]
    assert "decided after round 3" in manifest.cells[-1].reason


def test_the_budget_ends_the_rounds_and_makes_the_last_one_final(tmp_path):
    """Launches of 100 s (the plan said 60) in a 1000 s budget (reserve 50 s): the fourth round would end at 800 s,
    the fifth at 1000 s > 950 s: four rounds run, the fourth look is the final one, the rest skipped for the budget."""
    looks = FakeLooks()
    rounds, manifest = _rounds(tmp_path, max_rounds=6, budget_s=1000.0, launch_s=60.0, looks=looks)
    states = _drive(rounds, manifest, took_s=100.0)
    assert states == ["complete"] * 8 + [SKIPPED] * 4
    assert looks.asked == [(1, False), (2, False), (3, False), (4, True)]


def test_a_round_the_plan_already_says_does_not_fit_never_starts(tmp_path):
    rounds, manifest = _rounds(tmp_path, max_rounds=6, budget_s=100.0, launch_s=60.0, looks=FakeLooks())
    states = _drive(rounds, manifest, took_s=60.0)
    assert states == [SKIPPED] * 12
    assert "this round takes about 120 s" in manifest.cells[0].reason


def test_without_a_budget_or_a_decision_every_round_runs_and_the_last_look_is_final(tmp_path):
    looks = FakeLooks()
    rounds, manifest = _rounds(tmp_path, max_rounds=4, budget_s=None, launch_s=60.0, looks=looks)
    assert _drive(rounds, manifest, took_s=60.0) == ["complete"] * 8
    assert looks.asked[-1] == (4, True)


def test_a_non_sequential_plan_skips_only_the_launches_that_do_not_fit(tmp_path):
    rounds, manifest = _rounds(tmp_path, max_rounds=3, budget_s=500.0, launch_s=60.0, looks=FakeLooks())
    rounds.max_rounds, rounds.looks = None, None  # the same launches, planned without --sequential
    assert _drive(rounds, manifest, took_s=100.0) == ["complete"] * 4 + [SKIPPED] * 2


# -- a sequential head/base run through run.py, the stand-in trainer in place of each checkout's train.py --------


def _sequential_run(
    root: Path, step_s: dict[str, float], startup_s: float = 0.1
) -> tuple[Path, subprocess.CompletedProcess]:
    sides = ["--candidate", "miles", "--candidate-root", "/ci/miles-head"]
    sides += ["--reference", "miles", "--reference-root", "/ci/miles-base"]
    plan_dir, run_dir = root / "D", root / "R"
    planned = run_py("--preset", "smoke", "--backend", "fsdp", "--pr-workload", "--sequential", "--output-dir",
                      str(plan_dir), "--dry-run", *sides)  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    assert "sequential: rounds of one launch a side until the paired check decides, from 3 to 6" in planned.stdout
    plan = json.loads((plan_dir / "plan.json").read_text())
    for cell in plan["cells"]:
        argv = [sys.executable, str(STANDINS / "standin_trainer.py"), "--format", cell["sink"]["format"]]
        argv += ["--sink", cell["sink"]["path"], "--steps", str(cell["num_steps"]), "--step-s"]
        cell["argv"] = cell["launch_argv"] = argv + [str(step_s[cell["side"]]), "--startup-s", str(startup_s)]
    (plan_dir / "plan.json").write_text(json.dumps(plan, indent=2))
    reprove(plan_dir)
    executed = run_py("execute", str(plan_dir / "plan.json"), "--output-dir", str(run_dir), "--skip-prepare",
                       "--no-preflight", "--ray", "none", "--poll-interval-s", "0.05")  # fmt: skip
    return run_dir, executed


@pytest.mark.parametrize(
    "step_s, decision, code",
    [
        ({"miles": 0.025, "miles-base": 0.02}, "REGRESSED", 1),
        ({"miles": 0.02, "miles-base": 0.02}, "NO_DIFFERENCE", 0),
    ],
)
def test_a_sequential_pair_stops_when_the_check_decides_and_ab_judges_it_again(tmp_path, step_s, decision, code):
    """A head 25% slower (or equal) with no noise: the look after round 3 decides, rounds 4-6 are not run, the run
    exits 0, the report lists nothing missing, and `run.py ab` gives the same decision from looks.json."""
    run_dir, executed = _sequential_run(tmp_path, step_s)
    assert executed.returncode == 0, executed.stdout + executed.stderr
    assert "cost of 6 repeat(s) (the plan's estimate): node wall time" in executed.stdout + executed.stderr
    looks = json.loads((run_dir / "looks.json").read_text())["looks"]
    assert [x["decision"] for x in looks] == ["CONTINUE", "CONTINUE", decision]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [c["state"] for c in manifest["cells"]] == ["complete"] * 6 + [NOT_NEEDED] * 6
    assert json.loads((run_dir / "report.json").read_text())["incomplete"] == []
    judged = run_py("ab", str(run_dir))
    assert judged.returncode == code, judged.stdout + judged.stderr
    assert f"3 round(s), the last look's one-sided alpha {looks[-1]['alpha']:.2%}" in judged.stdout


def test_a_recorded_run_gives_the_next_plan_its_measured_launch_times(tmp_path):
    """The run's launches (report.json `launch`), recorded into a history store, are what the next plan of the same
    spec reads back with --cost-store: each cell's start-up and step time measured, in place of the model."""
    run_dir, executed = _sequential_run(tmp_path, {"miles": 0.025, "miles-base": 0.02}, startup_s=1.0)
    assert executed.returncode == 0, executed.stdout + executed.stderr
    report = json.loads((run_dir / "report.json").read_text())
    launch = {c["id"]: c["launch"] for c in report["cells"]}
    assert all(len(x["repeats"]) == 3 and 0.5 < x["startup_s"] < x["wall_s"] for x in launch.values()), launch
    store = f"sqlite:///{tmp_path / 'history.db'}"
    recorded = run_py("record", str(run_dir), "--store", store, "--create", "--untrusted", "--trigger", "pull_request")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    sides = ["--candidate", "miles", "--candidate-root", "/ci/miles-head"]
    sides += ["--reference", "miles", "--reference-root", "/ci/miles-base"]
    planned = run_py("--preset", "smoke", "--backend", "fsdp", "--pr-workload", "--sequential", "--output-dir",
                      str(tmp_path / "next"), "--dry-run", "--cost-store", store, *sides)  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    cost = json.loads((tmp_path / "next" / "plan.json").read_text())["cost"]["cells"]
    for cell_id, measured in launch.items():
        startup = cost[cell_id]["startup_s"]
        assert startup["source"] == "measured (1 recorded run(s))", startup
        assert startup["typical"] == pytest.approx(measured["startup_s"])
        assert cost[cell_id]["launch_s"]["typical"] == pytest.approx(measured["wall_s"])
    assert "(measured (1 recorded run(s)))" in planned.stdout
