"""One metric registry: every field a step record declares or derives reaches report.json and the history record,
or is registered as deliberately not shown, with its reason; overlap_s shows in report.md."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from scripts.benchmark.analysis.document import analyse_run_folder
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.analysis.step_columns import read_step_columns
from scripts.benchmark.analysis.verdict import ReportSpec
from scripts.benchmark.contracts.report import validate_report_file
from scripts.benchmark.history.check import DEFAULT_GATES
from scripts.benchmark.history.learning_check import LEARNING_PREFIX
from scripts.benchmark.history.report_input import read_report_runs
from scripts.benchmark.report.write import write_report
from tests.benchmark.synthetic_runs import SyntheticCell, build_records, write_run_folder

from miles.utils.bench_flops import ModelArch
from miles.utils.bench_metrics import (
    LEARNING_SIGNALS,
    METRICS,
    NOT_METRICS,
    PHASES,
    REPORT_METRICS,
    STEP_TIME_FAMILY,
    MetricSpec,
    RunContext,
    StepRecord,
    derive_step_fields,
    write_records,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
ARCH = ModelArch.from_config_path(REPO_ROOT / "scripts" / "benchmark" / "model_configs" / "qwen3-1.7b-base.json")


def raw_record() -> StepRecord:
    """A sink's record: phases, tokens, samples and learning signals, nothing derived yet."""
    return StepRecord(
        framework="toy",
        step=3,
        step_time_s=100.0,
        phases_s={"generate": 70.0, "rollout_wait": 55.0, "old_logprob": 8.0, "ref_logprob": 2.0, "train": 30.0}
        | {"weight_sync": 3.0, "other": 2.0},
        tokens={"prompt": 51_200, "response": 768_000},
        samples=256,
        learning={name: 0.5 for name in LEARNING_SIGNALS},
    )


def derived_record() -> StepRecord:
    ctx = RunContext.build(arch=ARCH, num_train_gpus=8, num_rollout_gpus=8, peak_tflops=989.0)
    return derive_step_fields(raw_record(), ctx)


def field_names(record: StepRecord) -> set[str]:
    """Every field of a record, introspected: dict fields as `<field>.<key>` (raw is one opaque field)."""
    names = set()
    for f in dataclasses.fields(StepRecord):
        value = getattr(record, f.name)
        if isinstance(value, dict) and f.name != "raw":
            names |= {f"{f.name}.{key}" for key in value}
        else:
            names.add(f.name)
    return names


def test_every_record_field_is_declared_once():
    record = derived_record()
    names = field_names(record)
    assert {f"phases_s.{p}" for p in PHASES} <= names
    learning = {n for n in names if n.startswith("learning.")}
    assert learning == {f"learning.{s}" for s in LEARNING_SIGNALS}
    undeclared = names - set(METRICS) - set(NOT_METRICS) - learning
    assert not undeclared, f"fields neither in METRICS nor in NOT_METRICS: {sorted(undeclared)}"
    recorded = {n for n, m in METRICS.items() if m.source != "columns"}
    assert recorded <= names, f"registry metrics no record carries: {sorted(recorded - names)}"
    assert set(NOT_METRICS) <= {f.name for f in dataclasses.fields(StepRecord)}
    assert all(reason.strip() for reason in NOT_METRICS.values())


def test_what_derive_step_fields_fills_is_declared_as_derived():
    before, after = raw_record(), derived_record()
    filled = {f.name for f in dataclasses.fields(StepRecord) if getattr(before, f.name) != getattr(after, f.name)}
    filled -= {"flags"}
    assert filled == {n for n, m in METRICS.items() if m.source == "derived"}
    assert all(getattr(after, name) is not None for name in filled)


def test_hidden_metrics_say_why_and_shown_ones_are_the_report_metrics():
    for name, spec in METRICS.items():
        assert spec.shown == (name in REPORT_METRICS)
        assert spec.shown or spec.hidden_reason, name
    assert list(REPORT_METRICS)[:2] == ["step_time_s", "phases_s.generate"]
    with pytest.raises(ValueError, match="hidden_reason"):
        MetricSpec(name="x", unit="s", direction="lower", description="", family="step", source="record", shown=False)


def test_the_check_gates_the_registry_gated_metrics_in_their_test_order():
    assert list(DEFAULT_GATES) == list(STEP_TIME_FAMILY)
    assert set(STEP_TIME_FAMILY) == {n for n, m in METRICS.items() if m.gated}
    assert {n: g.threshold for n, g in DEFAULT_GATES.items()} == {n: METRICS[n].gate_threshold for n in DEFAULT_GATES}
    assert [n for n, g in DEFAULT_GATES.items() if g.required] == ["step_time_s"]
    assert ReportSpec(metric_thresholds=dict.fromkeys(REPORT_METRICS, 0.05)).threshold("overlap_s") == 0.05


def test_the_column_reader_reads_every_registry_metric(tmp_path):
    path = tmp_path / "metrics.jsonl"
    write_records(path, [derived_record()])
    columns = read_step_columns(path, {})
    missing = set(METRICS) - set(columns.values)
    assert not missing, f"the column reader never reads {sorted(missing)}"
    assert columns.values["overlap_s"][0] == pytest.approx(15.0)


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """A two-side run whose records carry every field (learning signals included), reported and read back."""
    cells = [
        SyntheticCell(framework="miles", num_steps=40, seed=1),
        SyntheticCell(framework="verl", num_steps=40, seed=2),
    ]
    run_dir = write_run_folder(tmp_path_factory.mktemp("registry"), cells)
    for cell in cells:
        records = build_records(cell, 0)
        for record in records:
            record.learning = {name: 0.5 + 0.01 * record.step for name in LEARNING_SIGNALS}
            record.phases_s["generate"] *= 1.2  # part of generation hidden behind training: overlap_s > 0
            record.overlap_s = record.phases_s["generate"] - record.phases_s["rollout_wait"]
        write_records(run_dir / f"cells/{cell.id}/rep-0/metrics.jsonl", records)
    doc = analyse_run_folder(run_dir, AnalysisSettings(reps=200))
    write_report(doc, run_dir)
    return run_dir, validate_report_file(run_dir / "report.json"), read_report_runs(run_dir)


def test_every_shown_metric_reaches_report_json_and_the_history(reported):
    _, report, runs = reported
    for cell in report.cells:
        assert list(cell.summaries) == list(REPORT_METRICS)
        for name in REPORT_METRICS:
            assert cell.summaries[name].median is not None, (cell.id, name)
            assert cell.summaries[name].unit == METRICS[name].unit
            assert cell.samples[name] and cell.samples[name][0], (cell.id, name)
        hidden = {n for n, m in METRICS.items() if not m.shown}
        assert not hidden & set(cell.summaries)
    assert {c.metric for c in report.comparisons} == set(REPORT_METRICS)
    for run in runs:
        values = {v.metric: v for v in run.values}
        for name in REPORT_METRICS:
            assert values[name].value is not None, (run.cell_id, name)
            assert (values[name].unit, values[name].direction) == (METRICS[name].unit, METRICS[name].direction)


def test_every_learning_signal_reaches_report_json_and_the_history(reported):
    _, report, runs = reported
    for cell in report.cells:
        assert set(cell.learning) == set(LEARNING_SIGNALS)
        assert all(value.value is not None for value in cell.learning.values())
    for run in runs:
        values = {v.metric: v for v in run.values}
        assert all(values[LEARNING_PREFIX + name].value is not None for name in LEARNING_SIGNALS)
    assert {row.signal for row in report.learning[0].signals} == set(LEARNING_SIGNALS)


def test_the_framework_field_is_kept_as_data(reported):
    _, report, runs = reported
    assert {c.framework for c in report.cells} == {"miles", "verl"}
    assert {run.series.framework for run in runs} == {"miles", "verl"}


def test_overlap_shows_in_the_report(reported):
    run_dir, report, _ = reported
    assert all(c.summaries["overlap_s"].median > 0 for c in report.cells)
    text = (run_dir / "report.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `overlap_s` |")]
    assert len(rows) == 2  # the comparison table and the per-cell summaries
    assert all("not reported" not in row and "| n/a | n/a |" not in row for row in rows)
    generation = text.split("### Generation, trainer wait and overlap", 1)[1].split("\n#", 1)[0]
    cell_rows = [line for line in generation.splitlines() if line.startswith("| `")]
    assert len(cell_rows) == 2 and all(not row.endswith("| n/a |") for row in cell_rows)
