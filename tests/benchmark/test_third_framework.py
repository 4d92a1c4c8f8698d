"""A third framework defined only in the tests (tests/benchmark/toy_framework/: its launch, a stand-in trainer with
its own sink format, its reader and learning keys) plus one registry entry made by a fixture: it plans, runs, is
read, reported, recorded and checked through the real `run.py` commands with no edit to any harness module.

The commands run in-process (typer's CliRunner) so that the fixture's registry entry is the one they see; the
trainer itself is a real child process that the real runner starts, watches and reads.

Two sides of the toy framework are compared (targets `a` and `b`: the reference side is `toy-base`), and the toy is
also planned against VERL (the union of both adapters' declared differences must cover every knob that differs).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.adapter import AdapterDefaults
from scripts.benchmark.frameworks.miles.adapter import MilesAdapter
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


class Incomplete(AdapterDefaults):
    """An adapter that forgot its sink reader and got three members wrong."""

    name, label, sink_formats, recording_codec = "incomplete", 3, ["incomplete-log"], "verl"

    def build_launch(self, spec, backend, layout, ctx):
        raise AssertionError("never planned")

    def parity_knobs(self, argv):
        return {}


def test_an_adapter_that_misses_or_mistypes_a_member_is_refused_when_it_registers():
    """Refused at register, naming every member at fault, instead of a traceback in the first command that needs
    the member (`ingest` of its sink)."""
    with pytest.raises(TypeError, match="framework adapter 'incomplete' does not implement FrameworkAdapter") as no:
        registry.register(Incomplete())
    assert "incomplete" not in registry.names()
    for member in (
        "label is int, not str",
        "sink_formats is list, not tuple[str, ...]",
        "recording_codec is str, not RecordingCodec | None",
        "parity_knobs(argv) cannot be called with (argv, backend, prepare_argv, target)",
        "read_sink() is missing",
    ):
        assert member in str(no.value)


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


def test_each_side_gets_its_own_launch_prefix_by_side_name(toy_registered, tmp_path):
    """--side-prefix NAME=CMD: a side of the plan (the toy's reference side, `toy-base`) runs in its own container
    while the other runs bare; a framework's name would apply to both of its sides."""
    plan_dir, run_dir = tmp_path / "D", tmp_path / "R"
    assert _plan(plan_dir, "--candidate", "toy@a", "--reference", "toy@b")[0].exit_code == 0
    execute = ["execute", str(plan_dir / "plan.json"), "--skip-prepare", "--no-preflight", "--ray", "none"]
    execute += ["--poll-interval-s", "0.05", "--repeats", "1"]
    result, output = _run(*execute, "--output-dir", str(run_dir), "--side-prefix", "toy-base=env BENCH_SIDE=base")
    assert result.exit_code == 0, output
    base, candidate = (
        run_dir / "cells" / f"{cell}-fsdp-colocate" / "rep-0" / "command.sh" for cell in ("toy-base", "toy")
    )
    assert "env BENCH_SIDE=base" in base.read_text() and "BENCH_SIDE" not in candidate.read_text()
    for words, named in (
        (["--side-python", "toy-bse=/usr/bin/python3"], "--side-python toy-bse: the plan has no side or framework"),
        (["--side-python", "/usr/bin/python3"], "--side-python '/usr/bin/python3': expected NAME=VALUE"),
    ):
        result, output = _run(*execute, "--output-dir", str(tmp_path / "bad"), *words)
        assert result.exit_code == 2 and named in output and not (tmp_path / "bad").exists(), output


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


def test_toy_against_verl_is_refused_for_every_knob_the_toy_never_read(toy_registered, tmp_path):
    """Against another framework every knob the toy does not read back is a MISMATCH, even one the other adapter
    declares a difference for (VERL's completion_wait): a table cannot pass what one side never read. The plan is
    refused (exit 3) and the table says which knobs."""
    result, output = _plan(tmp_path / "V", "--candidate", "toy", "--reference", "verl")
    assert result.exit_code == 3, output
    parity = json.loads((tmp_path / "V" / "parity.json").read_text())
    (pair,) = parity["pairs"]
    assert (pair["candidate_cell"], pair["reference_cell"]) == ("toy-fsdp-colocate", "verl-fsdp-colocate")
    rows = {row["knob"]: row for row in pair["rows"]}
    assert rows["steps"]["status"] == "matched"
    for knob in ("completion_wait", "lr"):
        assert (rows[knob]["status"], rows[knob]["candidate"]) == ("MISMATCH", "<absent>"), rows[knob]
        assert f"{knob}: absent from Toy's launches: its parser does not read it" in output


def test_a_knob_the_toy_declares_it_cannot_have_is_a_declared_asymmetry(toy_registered, tmp_path, monkeypatch):
    why = "the toy trainer generates nothing, so no generation ends late"
    monkeypatch.setattr(TOY, "absent_knobs", lambda backend, layout: {"completion_wait": why})
    result, output = _plan(tmp_path / "V", "--candidate", "toy", "--reference", "verl")
    rows = {row["knob"]: row for row in json.loads((tmp_path / "V" / "parity.json").read_text())["pairs"][0]["rows"]}
    assert (rows["completion_wait"]["status"], rows["completion_wait"]["note"]) == (
        "asymmetry",
        f"absent from Toy's launches: {why}",
    )
    assert "completion_wait" not in output and "lr: absent from Toy's launches" in output


@pytest.mark.parametrize("layout", ["colocate", "disaggregated"])
@pytest.mark.parametrize("other,foreign", [("verl", "Miles"), ("miles", "VERL")])
@pytest.mark.parametrize("toy_is", ["candidate", "reference"])
def test_no_note_names_a_framework_outside_the_pair(toy_registered, tmp_path, layout, other, foreign, toy_is):
    """A note is keyed by the pair of frameworks that makes it true: a table of the toy against VERL says nothing
    of Miles, nor one against Miles anything of VERL, whichever side each is on (parity.md and the report's phases)."""
    sides = ("toy", other) if toy_is == "candidate" else (other, "toy")
    result, output = _plan(tmp_path / "P", "--candidate", sides[0], "--reference", sides[1], "--layout", layout)
    assert result.exit_code == 3, output  # the toy reads few knobs: refused, and the table is written for review
    text = (tmp_path / "P" / "parity.md").read_text()
    assert "Toy" in text
    assert foreign not in text, [line for line in text.splitlines() if foreign in line]
    assert not [why for why in registry.incomparable_phases(*sides, layout).values() if foreign in why]


def test_a_plan_of_the_toy_alone_names_no_other_framework(toy_registered, tmp_path):
    result, output = _plan(tmp_path / "T", "--candidate", "toy")
    assert result.exit_code == 0, output
    text = (tmp_path / "T" / "parity.md").read_text()
    assert "No reference side planned" in text and "VERL" not in text and "Miles" not in text


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


class DriftAdapter(MilesAdapter):
    """A framework added from the tests whose parser drifted from the knob model: Miles's launch and parser under
    another name, with one knob misspelled (`prefill_cuda_graphs` 'of' for 'off') and one never read
    (`sampling_seed`). Both are knobs Miles declares a difference for against any framework, so a table that takes
    a declared knob as leave to differ, or to be absent, would pass them."""

    name, label, sink_formats = "drift", "Drift", ("drift-log",)

    def build_launch(self, spec, backend, layout, ctx):
        launch = super().build_launch(spec, backend, layout, ctx)
        return dataclasses.replace(launch, framework=self.name, sink={**launch.sink, "format": "drift-log"})

    def metric_sink(self, sink_format):
        return super().metric_sink("miles-tracking")

    def parity_knobs(self, argv, backend, prepare_argv, target=None):
        knobs = super().parity_knobs(argv, backend, prepare_argv, target)
        del knobs["sampling_seed"]
        return {**knobs, "prefill_cuda_graphs": "of"}


def test_a_drifted_parser_is_refused_for_its_misspelled_and_its_absent_knob(tmp_path):
    drift = DriftAdapter()
    registry.register(drift)
    try:
        result, output = _plan(tmp_path / "D", "--candidate", "drift", "--reference", "miles")
    finally:
        registry.unregister(drift.name)
    assert result.exit_code == 3, output
    assert "prefill_cuda_graphs: Drift's parity parser returned 'of': not one of 'off'" in output
    assert "sampling_seed: absent from Drift's launches: its parser does not read it" in output
    rows = json.loads((tmp_path / "D" / "parity.json").read_text())["pairs"][0]["rows"]
    assert {row["knob"] for row in rows if row["status"] == "MISMATCH"} == {"prefill_cuda_graphs", "sampling_seed"}
