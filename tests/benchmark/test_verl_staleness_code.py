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


def _replay_stamps(verl_root) -> list[str]:
    """The staleness tags VERL's replay loader (RolloutTqSkip, utils/skip/rollout_skip.py) gives every injected
    trajectory, as assignments in its source."""
    import ast

    tree = ast.parse((verl_root / "verl" / "utils" / "skip" / "rollout_skip.py").read_text(encoding="utf-8"))
    return [
        ast.unparse(node)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and "_global_steps" in ast.unparse(node.targets[0])
    ]


def test_verls_replay_logs_a_lag_of_minus_one_which_the_reader_does_not_take(verl_root, tmp_path):
    """In a train-only cell VERL's loader stamps every trajectory with the current step as its oldest and newest
    version, so its own metric method logs (step - 1) - step = -1: a replay has no staleness to read."""
    stamps = _replay_stamps(verl_root)
    assert "tag['min_global_steps'] = global_steps" in stamps and "tag['max_global_steps'] = global_steps" in stamps
    replayed = {step: [[step, step]] * 2 for step in (1, 2, 3)}
    sink = verl_child_sink(tmp_path, "staleness_steps.py", json.dumps(replayed))
    logged = [json.loads(line)["data"] for line in sink.read_text().splitlines()]
    assert {d["training/off_policy/trajectory_staleness_worst/max"] for d in logged} == {-1}
    ctx = RunContext.build(arch=None, num_train_gpus=4, num_rollout_gpus=4, layout="colocate", replay=True)
    assert [r.policy_lag for r in build_step_records("verl", [sink], ctx)] == [{}, {}, {}]
    full_loop = RunContext.build(arch=None, num_train_gpus=4, num_rollout_gpus=4, layout="colocate")
    assert {r.policy_lag["max"] for r in build_step_records("verl", [sink], full_loop)} == {-1}
