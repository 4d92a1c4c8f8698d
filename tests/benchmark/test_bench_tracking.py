"""The benchmark tracking backend (miles/utils/bench_tracking.py) driven by Miles's own TrackingManager (inside a
Miles checkout its own; here the Miles snapshot's miles/utils/tracking_utils/base.py, which imports nothing of
Miles), with the log calls of a colocated sync run (driver, rollout manager, train rank); the Miles reader reads its
files into the same records as from Miles's event log of the same calls."""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import math
import os
import sys
import tarfile
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from scripts.benchmark.frameworks.sinks import build_step_records
from tests.benchmark.test_miles_reader import CTX, ROLLOUT_MANAGER, Rollout, miles_log_calls, write_event_log

from miles.utils.bench_tracking import BENCH_TRACKING_DIR_ENV, DEVICE_TENSOR, BenchTrackingBackend

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = Path(os.environ.get("MILES_BENCH_UPSTREAM", REPO_ROOT.parent / "shared" / "upstream"))
BASE_MEMBER = "miles/miles/utils/tracking_utils/base.py"


@pytest.fixture(scope="module")
def tracking_base(tmp_path_factory):
    """Miles's own tracking_utils/base.py: the checkout's inside Miles, else the snapshot's, as a module."""
    try:
        return importlib.import_module("miles.utils.tracking_utils.base")
    except ImportError:
        pass
    archive_path = UPSTREAM / "miles-31f1ca9.tar.gz"
    if not archive_path.is_file():
        pytest.skip(f"no Miles snapshot {archive_path}")
    folder = tmp_path_factory.mktemp("miles-tracking")
    with tarfile.open(archive_path) as archive:
        (folder / "base.py").write_bytes(archive.extractfile(BASE_MEMBER).read())
    spec = importlib.util.spec_from_file_location("snapshot_tracking_base", folder / "base.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Args:
    use_bench_tracking = True


def manager(tracking_base, **init_kwargs):
    """One process's TrackingManager with the benchmark backend registered, initialised as that process does."""
    tracking = tracking_base.TrackingManager({"bench": (BenchTrackingBackend, "use_bench_tracking")})
    tracking.init(Args(), **init_kwargs)
    return tracking


def log(tracking, metrics: dict, step_key: str) -> None:
    """What miles/utils/tracking_utils/tracking.py log() hands the manager."""
    tracking.log(metrics, step=metrics.get(step_key), step_key=step_key)


def run_processes(tracking_base, folder: Path, monkeypatch, calls) -> None:
    monkeypatch.setenv(BENCH_TRACKING_DIR_ENV, str(folder))
    driver = manager(tracking_base, primary=True)
    rollout_manager = manager(tracking_base, primary=False, router_addr="http://127.0.0.1:30000")
    train_rank = manager(tracking_base, primary=False)
    for identity, step_key, metrics in calls:
        log(rollout_manager if identity is ROLLOUT_MANAGER else train_rank, dict(metrics), step_key)
    log(driver, {"eval/step": 0, "eval/score": 0.5}, "eval/step")
    for tracking in (driver, rollout_manager, train_rank):
        tracking.finish()


def comparable(record) -> dict:
    data = asdict(record)
    data["flags"] = sorted(data["flags"])
    return data


class TestThroughMilesTrackingManager:
    def test_one_file_per_process_every_call_with_its_step_key(self, tracking_base, tmp_path, monkeypatch):
        calls = miles_log_calls(range(3))
        run_processes(tracking_base, tmp_path / "sink", monkeypatch, calls)
        files = sorted(tmp_path.joinpath("sink").glob("*.jsonl"))
        assert sorted(p.name.split("-")[0] for p in files) == ["main", "rollout_manager", "train"]
        lines = [json.loads(x) for p in files for x in p.read_text().splitlines()]
        assert len(lines) == len(calls) + 1
        train = [x for x in lines if x["process"]["role"] == "train"]
        assert [x["seq"] for x in train] == list(range(1, len(train) + 1))
        assert {x["step_key"] for x in train} == {"rollout/step", "train/step"}

    def test_the_reader_gets_the_same_records_as_from_the_event_log(self, tracking_base, tmp_path, monkeypatch):
        calls = miles_log_calls(range(4))
        run_processes(tracking_base, tmp_path / "sink", monkeypatch, calls)
        from_backend = build_step_records("miles", [tmp_path / "sink"], CTX)
        from_events = build_step_records("miles", [write_event_log(tmp_path / "events", calls)], CTX)
        assert [comparable(r) for r in from_backend] == [comparable(r) for r in from_events]
        for record in from_backend[:3]:
            assert record.step_time_s == pytest.approx(Rollout(record.step - 1).truth_step_time())

    def test_a_restarted_process_is_a_new_file_and_the_step_before_says_so(self, tracking_base, tmp_path, monkeypatch):
        run_processes(tracking_base, tmp_path / "sink", monkeypatch, miles_log_calls(range(3)))
        run_processes(tracking_base, tmp_path / "sink", monkeypatch, miles_log_calls(range(3, 5)))
        records = {r.step: r for r in build_step_records("miles", [tmp_path / "sink"], CTX)}
        assert sorted(records) == [1, 2, 3, 4, 5]
        assert "miles_shift:next_step_restarted" in records[3].flags and records[3].step_time_s is None
        assert records[4].step_time_s == pytest.approx(Rollout(3).truth_step_time())

    def test_nonfinite_values_are_kept_and_a_cut_last_line_is_flagged(self, tracking_base, tmp_path, monkeypatch):
        calls = miles_log_calls(range(3))
        next(m for i, _k, m in calls if i is ROLLOUT_MANAGER)["perf/rollout_time"] = math.inf
        run_processes(tracking_base, tmp_path / "sink", monkeypatch, calls)
        (train_file,) = tmp_path.joinpath("sink").glob("train-*.jsonl")
        text = train_file.read_text()
        train_file.write_text(text[: len(text) - 40])  # killed inside its last write
        records = build_step_records("miles", [tmp_path / "sink"], CTX)
        assert math.isinf(records[0].phases_s["generate"]) and "nonfinite:perf/rollout_time" in records[0].flags
        assert any(f.startswith(f"truncated_last_line:{train_file.name}:") for f in records[2].flags)


def slower(calls, seconds: float):
    """The same log calls from an attempt whose generation took `seconds` longer each rollout."""
    changed = []
    for identity, step_key, metrics in calls:
        metrics = dict(metrics)
        if "perf/rollout_time" in metrics:
            metrics["perf/rollout_time"] += seconds
        if "perf/train_wait_time" in metrics:
            metrics["perf/train_wait_time"] += seconds
        changed.append((identity, step_key, metrics))
    return changed


def without_flags(record, *kinds: str) -> dict:
    data = comparable(record)
    data["flags"] = [f for f in data["flags"] if not f.startswith(kinds)]
    return data


class TestAttemptsInOrder:
    """Which attempt of a step is kept follows what the folder proves (the order the processes claimed their
    creation sequence numbers in), not the clock each writer stamps."""

    def test_a_restart_whose_clock_is_behind_still_wins(self, tracking_base, tmp_path, monkeypatch):
        import miles.utils.bench_tracking as bench_tracking

        run_processes(tracking_base, tmp_path / "sink", monkeypatch, slower(miles_log_calls(range(4)), 5.0))
        clock = bench_tracking.time.time() - 3600.0  # the restarted node's clock is an hour behind
        monkeypatch.setattr(bench_tracking.time, "time", lambda: clock)
        run_processes(tracking_base, tmp_path / "sink", monkeypatch, miles_log_calls(range(4)))
        monkeypatch.undo()
        run_processes(tracking_base, tmp_path / "clean", monkeypatch, miles_log_calls(range(4)))
        records = build_step_records("miles", [tmp_path / "sink"], CTX)
        clean = build_step_records("miles", [tmp_path / "clean"], CTX)
        assert [without_flags(r, "duplicate_step") for r in records] == [without_flags(r) for r in clean]
        for record in records:
            assert "duplicate_step:rollout_manager:kept_attempt_2_of_2" in record.flags
            assert record.phases_s["generate"] == Rollout(record.step - 1).generate

    def test_a_second_run_into_the_same_folder_keeps_its_own_steps_and_flags_the_older_runs(
        self, tracking_base, tmp_path, monkeypatch
    ):
        """Miles's launcher mode re-used with the same run id: a new run from rollout 0 after an older, longer one."""
        run_processes(tracking_base, tmp_path / "sink", monkeypatch, slower(miles_log_calls(range(8)), 5.0))
        run_processes(tracking_base, tmp_path / "sink", monkeypatch, miles_log_calls(range(5)))
        records = {r.step: r for r in build_step_records("miles", [tmp_path / "sink"], CTX)}
        assert sorted(records) == list(range(1, 9))
        for step in range(1, 6):
            assert records[step].phases_s["generate"] == Rollout(step - 1).generate
        for step in range(1, 5):
            assert records[step].step_time_s == pytest.approx(Rollout(step - 1).truth_step_time())
        assert records[5].step_time_s is None and "miles_shift:next_step_superseded" in records[5].flags
        for step in range(6, 9):
            for source in ("rollout_manager", "train"):
                assert f"superseded_attempt:{source}:a later attempt restarted at step 0" in records[step].flags
        assert not any(f.startswith("superseded_attempt") for step in range(1, 6) for f in records[step].flags)

    def test_a_foreign_first_line_loses_only_that_line(self, tracking_base, tmp_path, monkeypatch):
        run_processes(tracking_base, tmp_path / "sink", monkeypatch, miles_log_calls(range(3)))
        clean = build_step_records("miles", [tmp_path / "sink"], CTX)
        for path in tmp_path.joinpath("sink").glob("train-*.jsonl"):
            path.write_text('{"written": "by something else"}\n' + path.read_text())
        records = build_step_records("miles", [tmp_path / "sink"], CTX)
        assert [without_flags(r, "foreign_line") for r in records] == [without_flags(r) for r in clean]
        assert any(f.startswith("foreign_line:train-") and f.endswith(":1") for f in records[0].flags)


class TestOnlyTheWrite:
    def test_a_log_call_opens_nothing_logs_nothing_and_reads_no_device_value(
        self, tracking_base, tmp_path, monkeypatch
    ):
        monkeypatch.setenv(BENCH_TRACKING_DIR_ENV, str(tmp_path))
        tracking = manager(tracking_base, primary=False)
        seen: list[str] = []
        watching = [False]
        sys.addaudithook(lambda event, args: seen.append(event) if watching[0] else None)
        records: list[logging.LogRecord] = []
        handler = logging.Handler(level=logging.DEBUG)
        handler.emit = records.append
        logging.getLogger().addHandler(handler)
        previous_level = logging.getLogger().level
        logging.getLogger().setLevel(logging.DEBUG)
        on_device = torch.ones((), device="meta")  # .item() on it raises: it would be a device sync on a GPU
        try:
            watching[0] = True
            log(tracking, {"rollout/step": 0, "perf/train_time": 1.5, "train/loss": on_device}, "rollout/step")
            watching[0] = False
        finally:
            watching[0] = False
            logging.getLogger().removeHandler(handler)
            logging.getLogger().setLevel(previous_level)
            tracking.finish()
        assert seen == [] and records == []
        (line,) = [json.loads(x) for p in tmp_path.glob("*.jsonl") for x in p.read_text().splitlines()]
        assert line["metrics"] == {"rollout/step": 0, "perf/train_time": 1.5, "train/loss": DEVICE_TENSOR}

    def test_a_value_of_several_elements_is_written_whole(self, tracking_base, tmp_path, monkeypatch):
        """Miles logs what its callers hand it: an array or a multi-element tensor must not stop the training loop."""
        import numpy as np

        monkeypatch.setenv(BENCH_TRACKING_DIR_ENV, str(tmp_path))
        tracking = manager(tracking_base, primary=False)
        metrics = {
            "rollout/step": np.int64(3),
            "perf/tensor": torch.tensor([1.5, float("nan")]),
            "perf/array": np.array([[1, 2], [3, 4]]),
            "perf/one": torch.tensor([[2.5]]),
            "perf/scalar": np.float32(0.5),
            "perf/list": [1, float("inf")],
            "perf/dict": {"a": torch.tensor(2.0)},
        }
        log(tracking, metrics, "rollout/step")
        tracking.finish()
        (text,) = [x for p in tmp_path.glob("*.jsonl") for x in p.read_text().splitlines()]
        line = json.loads(text, parse_constant=lambda name: pytest.fail(f"not strict JSON: {name}"))
        assert line["step"] == 3
        assert line["metrics"] == {
            "rollout/step": 3,
            "perf/tensor": [1.5, "NaN"],
            "perf/array": [[1, 2], [3, 4]],
            "perf/one": 2.5,
            "perf/scalar": 0.5,
            "perf/list": [1, "Infinity"],
            "perf/dict": {"a": 2.0},
        }

    def test_without_the_folder_the_backend_is_off(self, tracking_base, tmp_path, monkeypatch):
        monkeypatch.delenv(BENCH_TRACKING_DIR_ENV, raising=False)
        monkeypatch.chdir(tmp_path)
        tracking = manager(tracking_base, primary=True)
        log(tracking, {"rollout/step": 0, "perf/train_time": 1.5}, "rollout/step")
        tracking.finish()
        assert list(tmp_path.iterdir()) == []


def test_the_runner_follows_a_tracking_folder_as_the_cells_sink(tracking_base, tmp_path, monkeypatch):
    """A plan cell whose sink is `miles-tracking`: the runner's follower reads the folder into metrics.jsonl."""
    from scripts.benchmark.runner.sink_follower import SinkFollower

    from miles.utils.bench_metrics import read_records

    run_processes(tracking_base, tmp_path / "sink", monkeypatch, miles_log_calls(range(3)))
    context = {"cell": {"gpus": {"train": 8, "rollout": 8}}, "device_name": "NVIDIA H100 80GB HBM3"}
    metrics = tmp_path / "metrics.jsonl"
    follower = SinkFollower(format="miles-tracking", path=tmp_path / "sink", metrics_path=metrics, context=context)
    follower.poll(final=True)
    written = read_records(metrics)
    assert [r.step for r in written] == [1, 2, 3]
    assert written[1].step_time_s == pytest.approx(Rollout(1).truth_step_time())


class TestPreflightWantsTheBackend:
    """A target planned with the tracking sink, run on a checkout without the backend, is refused before any GPU
    time (not failed after its run on an empty sink); the checkout with the patch series passes."""

    MEMBERS = (
        "train.py",
        "miles/utils/tracking_utils/tracking.py",
        "miles/utils/arguments.py",
        "miles/backends/megatron_utils/actor.py",
    )

    @staticmethod
    def plan_cells(miles_root: Path, miles_version: str | None, tmp_path: Path) -> list[dict]:
        from scripts.benchmark.frameworks import registry
        from scripts.benchmark.frameworks.miles.launch import MilesPaths
        from scripts.benchmark.plan.build import PlanOptions, build_plan
        from scripts.benchmark.spec import load_preset

        options = PlanOptions(
            backends=("megatron",),
            layout="colocate",
            output_dir=tmp_path / "out",
            sides=registry.option_pair(compare_verl=False, miles_version=miles_version),
            settings={"miles": MilesPaths(miles_root=str(miles_root), megatron_root=str(tmp_path / "Megatron-LM"))},
        )
        return build_plan(load_preset("smoke"), "smoke", options).data["cells"]

    @pytest.fixture
    def pristine(self, tmp_path) -> Path:
        return self.snapshot_members(tmp_path)

    @classmethod
    def snapshot_members(cls, tmp_path: Path) -> Path:
        archive_path = UPSTREAM / "miles-31f1ca9.tar.gz"
        if not archive_path.is_file():
            pytest.skip(f"no Miles snapshot {archive_path}")
        root = tmp_path / "miles"
        with tarfile.open(archive_path) as archive:
            for member in cls.MEMBERS:
                (root / member).parent.mkdir(parents=True, exist_ok=True)
                (root / member).write_bytes(archive.extractfile(f"miles/{member}").read())
        return root

    def test_a_checkout_without_the_patch_series_is_refused_by_name(self, pristine, tmp_path):
        from scripts.benchmark.frameworks import registry

        cells = self.plan_cells(pristine, None, tmp_path)
        assert {c["sink"]["format"] for c in cells} == {"miles-tracking"}
        problems = [p for p in registry.get("miles").preflight(cells) if "tracking backend" in p]
        assert len(problems) == 1, problems
        assert f"Miles at {pristine} lacks the benchmark tracking backend" in problems[0]
        assert "no miles/utils/bench_tracking.py" in problems[0]
        assert "tracking.py does not name BenchTrackingBackend" in problems[0]
        assert "arguments.py does not name use_bench_tracking" in problems[0]
        assert 'actor.py does not name timer("weight_backup")' in problems[0]
        assert "--miles-version 0.0.2" in problems[0]

    @pytest.fixture
    def patched(self, tmp_path) -> Path:
        """A checkout carrying the patch series: inside Miles, this checkout itself; here, the snapshot's members
        with the project's patches applied (upstream/ is not part of Miles)."""
        if (REPO_ROOT / "train.py").is_file():
            return REPO_ROOT
        import shutil
        import subprocess

        pristine = self.snapshot_members(tmp_path)
        shutil.copy2(REPO_ROOT / "miles" / "utils" / "bench_tracking.py", pristine / "miles" / "utils")
        for name in ("0002-tracking-bench-backend.patch", "0004-megatron-weight-backup-timer.patch"):
            patch = REPO_ROOT / "upstream" / "miles" / name
            applied = subprocess.run(
                ["git", "apply", "--include", "miles/*", str(patch)], cwd=pristine, capture_output=True, text=True
            )
            assert applied.returncode == 0, applied.stderr
        return pristine

    def test_a_stdout_target_is_not_asked_for_the_backend(self, pristine, tmp_path):
        from scripts.benchmark.frameworks import registry

        released = self.plan_cells(pristine, "0.0.2", tmp_path)
        assert not [p for p in registry.get("miles").preflight(released) if "tracking backend" in p]

    def test_the_patch_series_applied_passes(self, patched, tmp_path):
        from scripts.benchmark.frameworks import registry

        cells = self.plan_cells(patched, None, tmp_path)
        assert not [p for p in registry.get("miles").preflight(cells) if "tracking backend" in p]
