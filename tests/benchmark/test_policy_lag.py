"""Staleness read from the runs: each reader takes the framework's own staleness records into
StepRecord.policy_lag (VERL: the trajectory_staleness_worst metrics its V1 trainer logs every step, written by VERL
0.9.1's real FileLogger; Miles: the fully-async data buffer's avg/max staleness on the RolloutManager's `perf N:`
line), and the report compares the two sides and flags a lag above the launch's bound or differing between sides."""

import importlib
import importlib.util
import json
import sys
import tarfile
from types import SimpleNamespace

import numpy as np
import pytest
from scripts.benchmark.analysis.document import analyse_run_folder
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.contracts.parity import ParityPair, parity_text
from scripts.benchmark.frameworks.sinks import build_step_records
from scripts.benchmark.frameworks.verl.sink import VERL_LAG_KEYS
from scripts.benchmark.plan.parity import parity_file
from scripts.benchmark.report.render import render_markdown
from scripts.benchmark.report.sections import build_blocks
from tests.benchmark.synthetic_runs import gap_pair, write_run_folder
from tests.benchmark.test_bench_tracking import UPSTREAM
from tests.benchmark.test_miles_reader import CTX as MILES_CTX
from tests.benchmark.test_miles_reader import ROLLOUT_MANAGER, miles_log_calls, stdout_text
from tests.benchmark.test_schedule_parity import _rows
from tests.benchmark.test_verl_reader import ASYNC_CTX, load_file_logger_class, verl_step_metrics

from miles.utils.bench_metrics import read_records, write_records

VERL_LAGS = {1: (0.0, 0), 2: (0.75, 1), 3: (0.5, 1)}
"""Step -> (mean, max) of (global_steps - 1) - min_global_steps, as trainer_base.py computes them (numpy scalars)."""


def test_verl_staleness_from_a_real_file_logger(verl_root, tmp_path, monkeypatch):
    path = tmp_path / "verl.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = load_file_logger_class(verl_root)("bench", "verl-fsdp-disaggregated")
    for step, (mean, top) in VERL_LAGS.items():
        data = verl_step_metrics(step, gen=30.0, update_actor=20.0, prompt_mean=180.5, response_mean=1450.25)
        data |= {VERL_LAG_KEYS[0]: np.float64(mean), VERL_LAG_KEYS[1]: np.int64(top)}
        logger.log(data=data, step=step)
    logger.finish()
    records = build_step_records("verl", [path], ASYNC_CTX)
    assert {r.step: r.policy_lag for r in records} == {s: {"mean": m, "max": x} for s, (m, x) in VERL_LAGS.items()}
    write_records(tmp_path / "metrics.jsonl", records)
    assert [r.policy_lag for r in read_records(tmp_path / "metrics.jsonl")] == [r.policy_lag for r in records]


def test_the_fully_async_buffers_own_staleness_is_not_taken_for_the_lag(tmp_path):
    """--fully-async logs its data buffer's staleness against the engines' version at the drain, one update before
    the batch trains: it stays in raw, and the lag is read from the samples' weight versions as in every loop."""
    calls = miles_log_calls(range(3))
    for identity, _, metrics in calls:
        if identity is ROLLOUT_MANAGER:
            k = metrics["rollout/step"]
            metrics |= {"rollout/fully_async/avg_staleness": 0.0, "rollout/fully_async/max_staleness": 0}
            metrics |= {"rollout/weight_version/mean": float(k), "rollout/weight_version/min": float(k)}
    log = tmp_path / "log.txt"
    log.write_text(stdout_text(calls))
    records = build_step_records("miles", [log], MILES_CTX)
    assert [r.policy_lag for r in records] == [{"mean": 1.0, "max": 1.0}] * 3
    assert all(r.raw["rollout/fully_async/max_staleness"] == 0 for r in records)


def test_the_continuous_pairs_lag_bound_holds_in_miles_own_data_buffer():
    """Miles's own DefaultDataBuffer (inside a Miles checkout) with the continuous Miles cell's settings, drained as
    train_async.py drains it: batch k+1 is drained while the engines still serve version k+1, one update before the
    policy of version k+2 trains it; a group is stamped with the version it finished under. Every group the buffer
    hands to training is at most the parity row's bound behind the training policy, and the reader's lag from the
    trained samples' weight versions says the same."""
    buffers = pytest.importorskip(
        "miles.rollout.fully_async_data_buffer",
        reason="Miles's data buffer is not importable: this test runs inside a Miles checkout (the overlay test)",
    )
    import asyncio
    from argparse import Namespace

    from scripts.benchmark.analysis.staleness import bound_versions
    from scripts.benchmark.frameworks.miles.flags import flag_default, load_inventory
    from scripts.benchmark.frameworks.miles.sink import _miles_policy_lag
    from tests.benchmark.test_schedule_parity import _continuous_rows

    from miles.utils import metric_utils
    from miles.utils.types import Sample

    miles, _, rows = _continuous_rows("qwen3-4b", "megatron")
    value = lambda flag: miles[miles.index(flag) + 1]  # noqa: E731
    args = Namespace(
        max_weight_staleness=int(value("--max-weight-staleness")),
        async_data_buffer_capacity_factor=flag_default(
            load_inventory(), "megatron", "--async-data-buffer-capacity-factor"
        ),
        rollout_batch_size=4,
        dynamic_sampling_filter_path=None,
    )
    bound = bound_versions(rows["max_policy_lag"].candidate)

    def group(finished_under: int) -> list:
        samples = []
        for _ in range(2):
            sample = Sample(status=Sample.Status.COMPLETED)
            sample.update_from_meta_info(
                Namespace(sglang_speculative_algorithm=None),
                {"weight_version": str(finished_under), "finish_reason": {"type": "stop"}},
            )
            samples.append(sample)
        return samples

    async def drain(engine_version: int, finished: list[int]) -> list[list]:
        dropped: list = []
        buffer = buffers.DefaultDataBuffer(
            buffers.DataBufferConstructorInput(args=args, unused_handler_fn=dropped.append)
        )
        for version in finished:
            await buffer.put(buffers.DataBufferInput(prompt_group=[], group=group(version)))
        return [(await buffer.get(current_version=engine_version)).group for _ in range(args.rollout_batch_size)]

    # the engines serve version 5 while batch 5 drains: groups finished under 4 (before the last update) and 5
    trained = asyncio.run(drain(5, [4, 5, 4, 5, 5, 5, 5, 4]))
    training_policy = 5 + 1
    lags = [training_policy - min(s.oldest_weight_version for s in g) for g in trained]
    assert max(lags) <= bound == 1
    oldest = [s.oldest_weight_version for g in trained for s in g]  # what log_rollout_data summarises
    logged = metric_utils.dict_add_prefix(metric_utils.compute_statistics(oldest), "rollout/weight_version/")
    assert _miles_policy_lag(logged, rollout_id=5)["max"] == max(lags)


@pytest.fixture(scope="module")
def miles_sample_code(tmp_path_factory):
    """Miles's Sample (miles/utils/types.py) and metric helpers (miles/utils/metric_utils.py), which import nothing of
    Miles: the checkout's inside Miles, else the snapshot's."""
    try:
        return importlib.import_module("miles.utils.types"), importlib.import_module("miles.utils.metric_utils")
    except ImportError:
        pass
    archive_path = UPSTREAM / "miles-31f1ca9.tar.gz"
    if not archive_path.is_file():
        pytest.skip(f"no Miles snapshot {archive_path}")
    folder, modules = tmp_path_factory.mktemp("miles-samples"), []
    with tarfile.open(archive_path) as archive:
        for name in ("types", "metric_utils"):
            (folder / f"{name}.py").write_bytes(archive.extractfile(f"miles/miles/utils/{name}.py").read())
            spec = importlib.util.spec_from_file_location(f"snapshot_miles_{name}", folder / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
            modules.append(module)
    return tuple(modules)


def _weight_version_metrics(miles_sample_code, versions_per_sample: list[list[str]]) -> dict:
    """The weight-version block of Miles's log_rollout_data (miles/ray/rollout/metrics.py) on Samples filled by
    Sample.update_from_meta_info from SGLang's meta_info, one call per generation turn."""
    types, metric_utils = miles_sample_code
    args = SimpleNamespace(sglang_speculative_algorithm=None)
    samples = []
    for versions in versions_per_sample:
        sample = types.Sample()
        for version in versions:
            sample.update_from_meta_info(args, {"weight_version": version, "finish_reason": {"type": "stop"}})
        samples.append(sample)
    oldest = [s.oldest_weight_version for s in samples if s.oldest_weight_version is not None]
    stats = metric_utils.dict_add_prefix(metric_utils.compute_statistics(oldest), "weight_version/")
    return metric_utils.dict_add_prefix(stats, "rollout/")


def test_miles_drain_loop_lag_from_the_samples_weight_versions(tmp_path, miles_sample_code):
    """train_async.py: the first sync makes the engines' version 1; rollout 0 and 1 generate with it (1 starts
    before training 0), each later rollout k with version k; rollout k trains policy version k + 1."""
    calls = miles_log_calls(range(4))
    generated_with = {0: ["1"] * 4, 1: ["1"] * 4, 2: ["2"] * 3 + ["1"], 3: ["3"] * 4}
    for identity, _, metrics in calls:
        if identity is ROLLOUT_MANAGER:
            k = metrics["rollout/step"]
            metrics |= _weight_version_metrics(miles_sample_code, [[v] for v in generated_with[k]])
    log = tmp_path / "log.txt"
    log.write_text(stdout_text(calls))
    lags = [r.policy_lag for r in build_step_records("miles", [log], MILES_CTX)]
    assert lags == [
        {"mean": 0.0, "max": 0.0},
        {"mean": 1.0, "max": 1.0},
        {"mean": 1.25, "max": 2.0},
        {"mean": 1.0, "max": 1.0},
    ]


def test_a_sample_generated_across_an_update_counts_by_its_oldest_version(miles_sample_code):
    metrics = _weight_version_metrics(miles_sample_code, [["1", "2"], ["2"]])
    assert metrics["rollout/weight_version/min"] == 1 and metrics["rollout/weight_version/mean"] == 1.5


def test_a_perf_line_without_weight_versions_gives_no_lag(tmp_path):
    """Engines that report no numeric weight version: Miles logs no weight_version statistics, the lag stays empty."""
    log = tmp_path / "log.txt"
    log.write_text(stdout_text(miles_log_calls(range(3))))
    assert [r.policy_lag for r in build_step_records("miles", [log], MILES_CTX)] == [{}, {}, {}]


def _run_with_lags(tmp_path, lags: dict[str, tuple[float, float] | None]):
    cells = gap_pair({}, layout="disaggregated", num_steps=30)
    pair = ParityPair(
        backend="fsdp",
        layout="disaggregated",
        candidate_cell="miles-fsdp-disaggregated",
        reference_cell="verl-fsdp-disaggregated",
        rows=list(_rows("smoke", "fsdp", "disaggregated").values()),
    )
    parity = json.loads(parity_text(parity_file("0123456789ab", [pair])))
    run_dir = write_run_folder(tmp_path, cells, parity=parity)
    for cell in cells:
        path = run_dir / "cells" / cell.id / "rep-0" / "metrics.jsonl"
        records = read_records(path)
        for record in records:
            lag = lags[cell.framework]
            record.policy_lag = {} if lag is None else {"mean": lag[0], "max": lag[1]}
        write_records(path, records)
    return analyse_run_folder(run_dir, AnalysisSettings(reps=100))


def test_equal_lags_within_the_bound_are_not_flagged(tmp_path):
    doc = _run_with_lags(tmp_path, {"miles": (0.5, 1), "verl": (0.5, 1)})
    (row,) = doc.policy_lag
    assert row.bound == {"miles": 1, "verl": 1} and row.flags == []
    assert row.observed["miles"] == {"mean": 0.5, "max": 1.0, "steps": 30}


def test_a_lag_above_the_bound_and_a_differing_lag_are_flagged_in_the_report(tmp_path):
    doc = _run_with_lags(tmp_path, {"miles": (1.5, 2), "verl": (0.75, 1)})
    (row,) = doc.policy_lag
    assert row.flags == ["miles:exceeds_bound", "observed_lag_differs"]
    text = render_markdown(build_blocks(doc, {}))
    assert "## Policy lag" in text and "exceeds_bound" in text and "observed_lag_differs" in text
    assert json.loads(doc.model_dump_json())["policy_lag"][0]["flags"] == row.flags


def test_a_side_that_logs_no_staleness_is_named(tmp_path):
    doc = _run_with_lags(tmp_path, {"miles": None, "verl": (0.5, 1)})
    (row,) = doc.policy_lag
    assert row.observed["miles"] is None and row.flags == ["miles:not_logged"]


def test_runs_without_staleness_records_say_so_on_both_sides(tmp_path):
    run_dir = write_run_folder(tmp_path, gap_pair({}, layout="colocate", num_steps=20))
    doc = analyse_run_folder(run_dir, AnalysisSettings(reps=100))
    assert all(cell.model_extra.get("policy_lag") is None for cell in doc.cells)
    assert [row.flags for row in doc.policy_lag] == [["miles:not_logged", "verl:not_logged"]]
