"""VERL's policy lag as its own trainer computes it: the V1 trainer's metric method (`_compute_metrics`, whose
off-policy block turns the weight versions a trajectory was generated with into trajectory_staleness_worst) runs on
trajectories stored in a real TransferQueue (private local Ray) in the VERL check interpreter, its FileLogger writes
the steps, and the reader takes them into StepRecord.policy_lag. Skipped without that interpreter, unless
MILES_BENCH_REQUIRE_VERL_CHECKS=1."""

import json

import pytest
from scripts.benchmark.frameworks.sinks import build_step_records
from tests.benchmark.verl_child import verl_child_sink

from miles.utils.bench_metrics import RunContext

VERSIONS = {1: [[0, 0], [0, 0]], 2: [[0, 1], [1, 1], [0, 1], [1, 1]], 3: [[1, 2], [2, 2], [0, 2]]}
"""Step -> per trajectory (oldest, newest) weight version it was generated with (VERL tags min/max_global_steps);
the trainer at global step s trains policy version s - 1."""


@pytest.fixture(scope="module")
def sink(tmp_path_factory):
    return verl_child_sink(tmp_path_factory.mktemp("verl"), "staleness_steps.py", json.dumps(VERSIONS))


def test_verls_own_staleness_reaches_the_policy_lag(sink):
    ctx = RunContext.build(arch=None, num_train_gpus=4, num_rollout_gpus=4, layout="disaggregated")
    records = build_step_records("verl", [sink], ctx)
    assert [r.step for r in records] == sorted(VERSIONS)
    for record in records:
        worst = [(record.step - 1) - oldest for oldest, _ in VERSIONS[record.step]]
        assert record.policy_lag == pytest.approx({"mean": sum(worst) / len(worst), "max": max(worst)})
    assert [r.policy_lag["max"] for r in records] == [0, 1, 2]


def test_the_reader_takes_the_worst_case_not_the_lower_bound(sink):
    """VERL logs both; the bound of its replay buffer applies to the oldest version (the `_worst` metric)."""
    data = [json.loads(line)["data"] for line in sink.read_text().splitlines()]
    assert data[1]["training/off_policy/trajectory_staleness/max"] == 0
    assert data[1]["training/off_policy/trajectory_staleness_worst/max"] == 1
