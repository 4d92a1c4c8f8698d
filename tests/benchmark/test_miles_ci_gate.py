"""The nightly's headline series in Miles's merged-record form, judged by Miles's own gate code from the snapshot
(`evaluate_gate`, the SQLite store) against the declarations in tests/benchmark/miles_ci_gates.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from scripts.benchmark.history.ci_record import HEADLINE_FIELDS, merged_record, metric_key

from miles.utils.bench_metrics import StepRecord, write_records

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = Path(os.environ.get("MILES_BENCH_UPSTREAM", REPO_ROOT.parent / "shared" / "upstream"))
GATES = Path(__file__).with_name("miles_ci_gates.py")
CELL = "miles-megatron-colocate"
PRESET = "qwen3-4b"
NIGHTLY_PRESETS = ("qwen3-1.7b-base", "qwen3-4b", "qwen3-30b-a3b")

GATE_RUN = """
import json, sys
from tests.ci.ci_register import CIRegistry, HWBackend
from tests.ci.metric_history.gate import evaluate_gate
from tests.ci.metric_history.register import parse_ci_gate_specs
from tests.ci.metric_history.storage import MetricSample, RunIdentity, RunProvenance, SQLiteMetricHistoryStore
gates, record, baseline = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
store = SQLiteMetricHistoryStore(":memory:")
store.apply_schema()
identity = RunIdentity(test_path=gates, backend="cuda", suite="bench-nightly")
provenance = RunProvenance("0" * 40, None, None, None, "schedule", "main")
for spec in parse_ci_gate_specs(gates):
    values = [MetricSample(spec.metric_key, spec.steps_key, spec.constraint_key, step, value)
              for step, value in baseline[spec.metric_key]]
    for n in range(3):
        store.write_run(identity, provenance, f"2026-01-0{n + 1}T00:00:00Z", True, values)
registry = CIRegistry(backend=HWBackend.CUDA, filename=gates, est_time=1, suite="bench-nightly")
result = evaluate_gate(gates, record, store, registry=registry)
print(json.dumps([[m.metric_key, m.step, m.historical_status.name, m.baseline_n] for m in result.metrics]))
print(json.dumps(sorted(spec.metric_key for spec in parse_ci_gate_specs(gates))))
"""


@pytest.fixture(scope="module")
def miles_ci(tmp_path_factory) -> Path:
    """A copy of Miles's tests/ci: the tree's own inside a Miles checkout, else the snapshot's."""
    folder = tmp_path_factory.mktemp("miles-ci")
    if (REPO_ROOT / "tests" / "ci" / "metric_history").is_dir():  # applied onto Miles: its own gate code
        shutil.copytree(REPO_ROOT / "tests" / "ci", folder / "miles" / "tests" / "ci")
        (folder / "miles" / "tests" / "__init__.py").touch()
        return folder / "miles"
    archive_path = UPSTREAM / "miles-31f1ca9.tar.gz"
    if not archive_path.is_file():  # the gate code is standard library only: the snapshot is all it needs
        if os.environ.get("MILES_BENCH_REQUIRE_MILES_OVERLAY") == "1":
            pytest.fail(f"no Miles snapshot {archive_path} (MILES_BENCH_REQUIRE_MILES_OVERLAY=1)")
        pytest.skip(f"no Miles snapshot {archive_path}: Miles's gate code comes from it")
    with tarfile.open(archive_path) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith("miles/tests/ci/") and m.isfile()]
        archive.extractall(folder, members=members, filter="data")
    (folder / "miles" / "tests" / "__init__.py").touch()
    return folder / "miles"


def _metrics(path: Path, step_time: float) -> Path:
    records = [
        StepRecord(framework="miles", step=step, step_time_s=step_time,
                   train_tokens_per_s=1000.0 / step_time, rollout_tokens_per_gpu_s=500.0)
        for step in (1, 2, 3)
    ]  # fmt: skip
    write_records(path, records)
    return path


def _gate(miles_ci: Path, tmp_path: Path, step_time: float) -> dict[tuple[str, int], str]:
    record = tmp_path / f"record-{step_time}.jsonl"
    lines = merged_record(PRESET, {CELL: _metrics(tmp_path / f"metrics-{step_time}.jsonl", step_time)})
    record.write_text("".join(json.dumps(line) + "\n" for line in lines))
    base = {line["metric"].rsplit("/", 1)[1]: line["series"]
            for line in merged_record(PRESET, {CELL: _metrics(tmp_path / "base.jsonl", 10.0)})}  # fmt: skip
    baseline = {metric_key(p, CELL, f): base[f] for p in NIGHTLY_PRESETS for f in HEADLINE_FIELDS}
    gates = miles_ci / "tests" / "benchmark_gates.py"
    gates.write_text(GATES.read_text())
    run = subprocess.run([sys.executable, "-c", GATE_RUN, str(gates.relative_to(miles_ci)), str(record),
                          json.dumps(baseline)], capture_output=True, text=True, cwd=miles_ci, timeout=60)  # fmt: skip
    assert run.returncode == 0, run.stderr
    results, declared = (json.loads(line) for line in run.stdout.splitlines()[-2:])
    assert declared == sorted(metric_key(p, CELL, f) for p in NIGHTLY_PRESETS for f in HEADLINE_FIELDS)
    return {(key, step): status for key, step, status, n in results if n == 3}


def test_the_record_carries_every_headline_step(tmp_path):
    lines = merged_record(PRESET, {CELL: _metrics(tmp_path / "m.jsonl", 10.0)})
    assert {line["metric"] for line in lines} == {
        f"bench/{PRESET}/{CELL}/{f}" for f in ("step_time_s", "train_tokens_per_s", "rollout_tokens_per_gpu_s")
    }
    by_key = {line["metric"]: line["series"] for line in lines}
    assert by_key[metric_key(PRESET, CELL, "step_time_s")] == [[1, 10.0], [2, 10.0], [3, 10.0]]


def test_two_presets_never_share_a_series(tmp_path):
    """One cell id in two presets' nightlies: two series, so Miles's gate never bands one preset by the other."""
    metrics = _metrics(tmp_path / "m.jsonl", 10.0)
    small, large = (
        {line["metric"] for line in merged_record(p, {CELL: metrics})} for p in ("qwen3-4b", "qwen3-30b-a3b")
    )
    assert small and large and not small & large


def test_miles_gate_passes_a_steady_run_and_fails_a_slower_one(miles_ci, tmp_path):
    steady = _gate(miles_ci, tmp_path, 10.0)
    assert len(steady) == 9 and set(steady.values()) == {"PASS"}
    slower = _gate(miles_ci, tmp_path, 13.0)  # 30 % slower steps, 23 % less training throughput
    assert slower[(metric_key(PRESET, CELL, "step_time_s"), 2)] == "FAIL"
    assert slower[(metric_key(PRESET, CELL, "train_tokens_per_s"), 2)] == "FAIL"
    assert slower[(metric_key(PRESET, CELL, "rollout_tokens_per_gpu_s"), 2)] == "PASS"


def test_the_command_writes_a_run_folders_record_and_names_a_bad_folder(tmp_path):
    run_dir = tmp_path / "run"
    metrics = run_dir / "cells" / CELL / "rep-0" / "metrics.jsonl"
    metrics.parent.mkdir(parents=True)
    _metrics(metrics, 10.0)
    cells = [{"id": CELL, "state": "complete", "metrics": str(metrics.relative_to(run_dir))}]
    cells.append({"id": "verl-megatron-colocate", "state": "failed", "metrics": "missing.jsonl"})
    (run_dir / "manifest.json").write_text(json.dumps({"schema_version": 1, "cells": cells}))
    (run_dir / "plan.json").write_text(json.dumps({"preset": PRESET, "spec_hash": "ab" * 32}))
    run_py = [sys.executable, str(REPO_ROOT / "scripts" / "benchmark" / "run.py"), "ci-record"]
    done = subprocess.run([*run_py, str(run_dir)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (run_dir / "ci-record.jsonl").read_text().splitlines()]
    assert lines == merged_record(PRESET, {CELL: metrics})
    bad = subprocess.run([*run_py, str(tmp_path / "nowhere")], capture_output=True, text=True, cwd=REPO_ROOT)
    assert bad.returncode == 2 and "nowhere/manifest.json" in bad.stderr and "Traceback" not in bad.stderr


def test_a_spec_run_is_keyed_by_its_spec_hash_and_a_run_without_a_plan_is_named(tmp_path):
    from scripts.benchmark.history.ci_record import run_series

    (tmp_path / "plan.json").write_text(json.dumps({"preset": None, "spec_hash": "0123456789abcdef" * 4}))
    assert run_series(tmp_path) == "spec-0123456789ab"
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 1, "cells": []}))
    (tmp_path / "plan.json").unlink()
    run_py = [sys.executable, str(REPO_ROOT / "scripts" / "benchmark" / "run.py"), "ci-record", str(tmp_path)]
    done = subprocess.run(run_py, capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert done.returncode == 2 and f"{tmp_path}/plan.json" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "ci-record.jsonl").exists()
