"""A third framework defined only in the tests (tests/benchmark/toy_framework/: its launch, a stand-in trainer with
its own sink format, its reader and learning keys) plus one registry entry made by a fixture: it plans, runs, is
read, reported, recorded and checked through the real `run.py` commands with no edit to any harness module.

The commands run in-process (typer's CliRunner) so that the fixture's registry entry is the one they see; the
trainer itself is a real child process that the real runner starts, watches and reads.

Two sides of the toy framework are compared (targets `a` and `b`: the reference side is `toy-base`), and the toy is
also planned against VERL (the union of both adapters' declared differences must cover every knob that differs).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scripts.benchmark.frameworks import registry
from scripts.benchmark.run import build_app
from scripts.benchmark.runner.sink_follower import read_sink
from tests.benchmark.toy_framework import ADAPTER as TOY
from tests.benchmark.toy_framework.adapter import TRAINER
from typer.testing import CliRunner


@pytest.fixture
def toy_registered():
    registry.register(TOY)
    try:
        yield TOY
    finally:
        registry.unregister(TOY.name)


def _run(*argv: str):
    result = CliRunner().invoke(build_app(), list(argv))
    return result, result.output + (result.stderr if result.stderr_bytes else "")


def _plan(out: Path, *sides: str):
    return _run("--preset", "smoke", "--backend", "fsdp", "--output-dir", str(out), "--dry-run", *sides)


def test_the_registry_knows_the_toy_only_while_registered(toy_registered, tmp_path):
    assert "toy" in registry.names() and registry.label_of("toy") == "Toy"
    assert registry.by_sink_format("toy-jsonl") is TOY
    sink = tmp_path / "toy.jsonl"
    subprocess.run([sys.executable, str(TRAINER), "--sink", str(sink), "--steps", "3", "--step-s", "0"], check=True)
    context = {"cell": {"model_config": "qwen3-0.6b", "gpus": {"train": 1, "rollout": 1}}, "final": True}
    assert [r.step for r in read_sink("toy-jsonl", sink, context)] == [1, 2, 3]
    result, output = _run("ingest", str(sink), "--framework", "toy", "--model", "qwen3-0.6b", "--gpus", "1",
                          "-o", str(tmp_path / "m.jsonl"))  # fmt: skip
    assert result.exit_code == 0 and "wrote 3 records" in output, output
    registry.unregister("toy")
    for unknown in (lambda: registry.by_sink_format("toy-jsonl"), lambda: read_sink("toy-jsonl", sink, context)):
        with pytest.raises(ValueError, match="sink.format 'toy-jsonl' is not one of"):
            unknown()  # never read by another framework's reader
    result, output = _run("ingest", str(sink), "--framework", "toy", "--model", "qwen3-0.6b", "--gpus", "1",
                          "-o", str(tmp_path / "m.jsonl"))  # fmt: skip
    assert result.exit_code == 2 and "--framework must be miles or verl, got 'toy'" in output
    registry.register(TOY)


def test_toy_against_toy_plans_runs_reports_records_and_checks(toy_registered, tmp_path):
    plan_dir, run_dir, store = tmp_path / "D", tmp_path / "R", f"sqlite:///{tmp_path / 'history.db'}"
    result, output = _plan(plan_dir, "--candidate", "toy@a", "--reference", "toy@b")
    assert result.exit_code == 0, output
    plan = json.loads((plan_dir / "plan.json").read_text())
    assert [(s["role"], s["name"], s["target"]) for s in plan["sides"]] == [
        ("candidate", "toy", "a"),
        ("reference", "toy-base", "b"),
    ]
    assert [(c["id"], c["side"], c["framework"]) for c in plan["cells"]] == [
        ("toy-fsdp-colocate", "toy", "toy"),
        ("toy-base-fsdp-colocate", "toy-base", "toy"),
    ]
    parity = json.loads((plan_dir / "parity.json").read_text())
    (pair,) = parity["pairs"]
    rows = {row["knob"]: row for row in pair["rows"]}
    assert rows["target"]["status"] == "asymmetry" and (rows["target"]["candidate"], rows["target"]["reference"]) == (
        "a",
        "b",
    )
    assert {row["status"] for knob, row in rows.items() if knob != "target"} == {"matched"}
    assert "| group | knob | Toy a | Toy b | status |" in (plan_dir / "parity.md").read_text()

    result, output = _run(
        "execute", str(plan_dir / "plan.json"), "--output-dir", str(run_dir), "--skip-prepare", "--no-preflight",
        "--poll-interval-s", "0.05", "--ray", "none", "--repeats", "1",
    )  # fmt: skip
    assert result.exit_code == 0, output
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [s["name"] for s in manifest["sides"]] == ["toy", "toy-base"]
    steps = plan["spec"]["run"]["num_steps"]
    assert [(c["id"], c["side"], c["state"], c["steps_completed"]) for c in manifest["cells"]] == [
        ("toy-fsdp-colocate", "toy", "complete", steps),
        ("toy-base-fsdp-colocate", "toy-base", "complete", steps),
    ]
    for cell in manifest["cells"]:
        records = [json.loads(line) for line in (run_dir / cell["metrics"]).read_text().splitlines()]
        assert [r["step"] for r in records] == list(range(1, steps + 1))
        assert {r["framework"] for r in records} == {"toy"}
        assert all(r["learning"]["reward_mean"] is not None and r["train_tokens_per_s"] for r in records)

    result, output = _run("report", str(run_dir))
    assert result.exit_code == 0, output
    _assert_report(json.loads((run_dir / "report.json").read_text()), steps)

    result, output = _run("check", str(run_dir), "--store", store, "--create")
    assert result.exit_code == 0, output
    result, output = _run("record", str(run_dir), "--store", store)
    assert result.exit_code == 0, output
    assert "recorded run" in output
    result, output = _run("check", str(run_dir), "--store", store)
    assert result.exit_code == 0, output


def _assert_report(report: dict, steps: int) -> None:
    """report.json schema v2 (contracts/report.py): the sides, cells by side, comparisons candidate / reference.
    These assertions hold once the analysis pairs cells by side (the report's own change, merged separately)."""
    assert report["schema_version"] == 2
    assert [(s["role"], s["name"], s["label"]) for s in report["sides"]] == [
        ("candidate", "toy", "Toy a"),
        ("reference", "toy-base", "Toy b"),
    ]
    cells = {cell["side"]: cell for cell in report["cells"]}
    assert set(cells) == {"toy", "toy-base"} and {cell["framework"] for cell in cells.values()} == {"toy"}
    assert all(len(cell["samples"]["step_time_s"][0]) == steps for cell in cells.values())
    step = next(c for c in report["comparisons"] if c["metric"] == "step_time_s")
    assert (step["candidate_cell"], step["reference_cell"]) == ("toy-fsdp-colocate", "toy-base-fsdp-colocate")
    assert 0 < step["ratio"] < 1  # target b sleeps 25% longer per step: the candidate takes less time


def test_toy_against_verl_declares_what_differs_or_is_refused(toy_registered, tmp_path):
    """Against another framework the parity table applies: every knob the toy does not read back is a MISMATCH
    unless an adapter declares it, so the plan is refused (exit 3) and the table says which knobs."""
    result, output = _plan(tmp_path / "V", "--candidate", "toy", "--reference", "verl")
    assert result.exit_code == 3, output
    parity = json.loads((tmp_path / "V" / "parity.json").read_text())
    (pair,) = parity["pairs"]
    assert (pair["candidate_cell"], pair["reference_cell"]) == ("toy-fsdp-colocate", "verl-fsdp-colocate")
    rows = {row["knob"]: row for row in pair["rows"]}
    assert rows["steps"]["status"] == "matched"
    assert rows["completion_wait"]["status"] == "asymmetry"  # declared by VERL's adapter against any other
    assert rows["lr"]["status"] == "MISMATCH" and rows["lr"]["candidate"] == "<absent>"


def _parser_returning(extra: dict):
    """The toy's parser with `extra` knobs added to what it reads."""
    read = type(TOY).parity_knobs
    return lambda argv, backend, prepare_argv, target=None: {**read(TOY, argv, backend, prepare_argv, target), **extra}


@pytest.mark.parametrize(
    "extra,named",
    [
        ({"layout": "colocate"}, "layout: Toy's parity parser returned 'colocate': not one of 'colocated'"),
        ({"lr": "1e-6"}, "lr: Toy's parity parser returned '1e-6': not a number"),
        ({"samples_per_step": 16}, "samples_per_step: Toy's parity parser returns a knob that frameworks/knobs.py"),
    ],
)
def test_a_value_outside_its_knobs_type_is_refused_even_where_both_sides_agree(
    toy_registered, tmp_path, monkeypatch, extra, named
):
    """Both sides read by one parser agree on a misspelling (or on a knob no one declared): the plan is refused all
    the same, naming the knob and the parser, before a matched row could hide it."""
    monkeypatch.setattr(TOY, "parity_knobs", _parser_returning(extra))
    result, output = _plan(tmp_path / "D", "--candidate", "toy@a", "--reference", "toy@b")
    assert result.exit_code == 3, output
    assert named in output
