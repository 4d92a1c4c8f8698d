"""The VERL reader against steps written by VERL 0.9.1's own writer code: its timers, metric functions and
FileLogger, run in the VERL check interpreter (skipped without it, unless MILES_BENCH_REQUIRE_VERL_CHECKS=1)."""

import json

import pytest
from scripts.benchmark.frameworks.sinks import build_step_records
from tests.benchmark.verl_child import verl_child_sink

from miles.utils.bench_metrics import RunContext


@pytest.fixture(scope="module")
def sink(tmp_path_factory):
    return verl_child_sink(tmp_path_factory.mktemp("verl"), "write_steps.py", "8")


def _ctx(layout):
    return RunContext.build(arch=None, num_train_gpus=4, num_rollout_gpus=4, layout=layout)


def test_separate_async_gives_the_wait_and_no_generation(sink):
    lines = [json.loads(line) for line in sink.read_text().splitlines()]
    records = build_step_records("verl", [sink], _ctx("disaggregated"))
    assert [r.step for r in records] == [1, 2, 3]
    for line, record in zip(lines, records, strict=True):
        data = line["data"]
        assert record.phases_s["rollout_wait"] == data["timing_s/gen"] and record.phases_s["generate"] is None
        assert "generate:not_recorded:verl_separate_async_logs_no_rollout_time" in record.flags
        assert record.rollout_tokens_per_gpu_s is None and record.overlap_s is None
        assert (
            record.step_time_s == data["timing_s/step"] and record.phases_s["train"] == data["timing_s/update_actor"]
        )
        assert not any(f.startswith("missing:") for f in record.flags), record.flags


def test_colocated_sync_gives_generation_from_the_same_timer(sink):
    records = build_step_records("verl", [sink], _ctx("colocate"))
    for record in records:
        assert record.phases_s["generate"] == record.phases_s["rollout_wait"] == record.raw["timing_s/gen"]
        assert record.overlap_s == 0.0 and record.rollout_tokens_per_gpu_s > 0
        assert record.samples == 8 and record.tokens["prompt"] == 8 * 16
