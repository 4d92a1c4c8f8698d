"""The readers' edges around restarts and half-written lines, from the real writers' formats: VERL 0.9.1's own
FileLogger (loaded from the wheel), Miles's MetricEvent / InferenceEngineWeightChecksumEvent lines."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from scripts.benchmark.frameworks.sinks import build_step_records
from scripts.benchmark.runner import sink_follower
from scripts.benchmark.runner.sink_follower import SinkFollower
from scripts.benchmark.runner.write_errors import RunFolderWriteError
from tests.benchmark.test_miles_reader import CTX as MILES_CTX
from tests.benchmark.test_miles_reader import (
    INITIAL_SLEEP,
    INITIAL_UPDATE_WEIGHTS,
    TRAIN_RANK,
    Rollout,
    event_line,
    miles_log_calls,
    process_file_name,
    write_event_log,
)
from tests.benchmark.test_verl_reader import CTX as VERL_CTX
from tests.benchmark.test_verl_reader import load_file_logger_class, verl_step_metrics

from miles.utils.bench_metrics import read_records


@pytest.fixture(scope="module")
def file_logger_class(verl_root):
    return load_file_logger_class(verl_root)


def _verl_attempt(file_logger_class, path: Path, monkeypatch, steps: range, gen_offset: float) -> None:
    """One VERL run (or resumed run) logging through the real FileLogger; gen_offset tells attempts apart."""
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = file_logger_class("bench", "verl")
    for step in steps:
        logger.log(
            data=verl_step_metrics(
                step, gen=40.0 + gen_offset, update_actor=20.0, prompt_mean=180.5, response_mean=1450.0
            ),
            step=step,
        )
    logger.finish()


class TestVerlAttemptFiles:
    @pytest.mark.parametrize("given", ["oldest first", "newest first"])
    def test_the_newer_file_wins_whatever_order_the_files_are_named_in(
        self, file_logger_class, tmp_path, monkeypatch, given
    ):
        """VERL lines carry no time: attempts are ordered by the files' modification times."""
        old, new = tmp_path / "b-attempt1.jsonl", tmp_path / "a-attempt2.jsonl"
        _verl_attempt(file_logger_class, old, monkeypatch, range(1, 6), gen_offset=0.0)
        _verl_attempt(file_logger_class, new, monkeypatch, range(4, 8), gen_offset=100.0)
        os.utime(old, (1_700_000_000, 1_700_000_000))
        os.utime(new, (1_700_000_600, 1_700_000_600))
        sources = [old, new] if given == "oldest first" else [new, old]
        records = {r.step: r for r in build_step_records("verl", sources, VERL_CTX)}
        assert sorted(records) == [1, 2, 3, 4, 5, 6, 7]
        for step in (4, 5):
            assert records[step].phases_s["generate"] == 140.0
            assert "duplicate_step:verl-driver:kept_attempt_2_of_2" in records[step].flags
        assert records[3].phases_s["generate"] == 40.0 and not any("duplicate" in f for f in records[3].flags)

    def test_a_json_line_that_is_not_a_file_logger_line_is_skipped_and_flagged(
        self, file_logger_class, tmp_path, monkeypatch
    ):
        path = tmp_path / "verl.jsonl"
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
        logger = file_logger_class("bench", "verl")
        for step in (1, 2, 3):
            logger.log(
                data=verl_step_metrics(step, gen=40, update_actor=20, prompt_mean=180, response_mean=1450), step=step
            )
            if step == 2:
                logger.fp.write(b'{"event": "checkpoint saved", "path": "global_step_2"}\n')  # another writer
        logger.finish()
        records = build_step_records("verl", [path], VERL_CTX)
        assert [r.step for r in records] == [1, 2, 3]
        assert "foreign_line:verl.jsonl:3" in records[1].flags
        assert not any(f.startswith("foreign_line") for f in records[0].flags + records[2].flags)


def _follower(sink: Path, metrics: Path, framework_format: str = "verl-file-logger") -> SinkFollower:
    context = {"cell": {"gpus": {"train": 8, "rollout": 8}}, "device_name": "NVIDIA H200"}
    return SinkFollower(format=framework_format, path=sink, metrics_path=metrics, context=context)


class TestLinesWrittenInTwoHalves:
    def test_a_half_written_last_line_leaves_no_flag_once_it_is_complete(
        self, file_logger_class, tmp_path, monkeypatch
    ):
        """The runner reads while the writer is inside a line: no `truncated_last_line` reaches metrics.jsonl."""
        scratch, sink, metrics = tmp_path / "scratch.jsonl", tmp_path / "verl.jsonl", tmp_path / "metrics.jsonl"
        _verl_attempt(file_logger_class, scratch, monkeypatch, range(1, 4), gen_offset=0.0)
        lines = scratch.read_bytes().splitlines(keepends=True)
        follower = _follower(sink, metrics)
        sink.write_bytes(lines[0] + lines[1] + lines[2][:100])  # the runner reads while step 3 is half written
        assert [r.step for r in follower.poll()] == [1, 2]
        with open(sink, "ab") as handle:
            handle.write(lines[2][100:-1])  # the object, then its newline in a separate write
        follower.poll()
        with open(sink, "ab") as handle:
            handle.write(b"\n")
        follower.poll()
        follower.poll(final=True)
        written = read_records(metrics)
        assert [r.step for r in written] == [1, 2, 3]
        assert not any(f.startswith(("truncated_last_line", "corrupt_line")) for r in written for f in r.flags)

    def test_a_line_cut_by_a_kill_is_still_flagged_at_the_final_read(self, file_logger_class, tmp_path, monkeypatch):
        scratch, sink, metrics = tmp_path / "scratch.jsonl", tmp_path / "verl.jsonl", tmp_path / "metrics.jsonl"
        _verl_attempt(file_logger_class, scratch, monkeypatch, range(1, 4), gen_offset=0.0)
        lines = scratch.read_bytes().splitlines(keepends=True)
        sink.write_bytes(lines[0] + lines[1] + lines[2][:100])
        follower = _follower(sink, metrics)
        follower.poll()
        follower.poll(final=True)
        written = read_records(metrics)
        assert [r.step for r in written] == [1, 2]
        assert "truncated_last_line:verl.jsonl:3" in written[1].flags


class TestMilesRestarts:
    def test_a_recovered_line_is_flagged_on_the_step_of_the_event_it_recovered(self, tmp_path):
        """The process was killed inside its first write of rollout 1; the restarted process appends rollout 1's
        data line to the fragment (Miles reopens the file in append mode): the flag goes on rollout 1, not 0."""
        calls = miles_log_calls(range(3))
        folder = tmp_path / "events"
        folder.mkdir()
        train_file = folder / process_file_name(TRAIN_RANK)
        for second, (identity, _key, metrics) in enumerate(calls):
            line = event_line(identity, metrics, second)
            with open(folder / process_file_name(identity), "a", encoding="utf-8") as f:
                if identity is TRAIN_RANK and metrics.get("rollout/step") == 1 and "rollout/total_lengths" in metrics:
                    f.write(line[: len(line) // 2])  # killed inside this write, no newline
                f.write(line + "\n")
        records = build_step_records("miles", [folder], MILES_CTX)
        (flagged,) = [r for r in records if any(f.startswith("recovered_line:") for f in r.flags)]
        assert flagged.step == 2  # rollout 1, the recovered event's own rollout
        assert f"recovered_line:{train_file.name}:" in " ".join(flagged.flags)

    def test_a_resume_with_load_does_not_book_the_new_processs_initial_sync_into_the_step_before(self, tmp_path):
        """Rollouts 0-2 restored from the checkpoint's event snapshot; the new process logs its initial weight sync
        (an inference_engine_weight_checksum event with rollout_id null), then rollouts 3-4."""
        first = miles_log_calls(range(3))
        resumed = miles_log_calls(range(3, 5))
        timers = next(m for i, _k, m in resumed if i is TRAIN_RANK and "perf/train_wait_time" in m)
        carried = timers["perf/update_weights_time"] + timers["perf/sleep_time"]
        timers["perf/update_weights_time"], timers["perf/sleep_time"] = INITIAL_UPDATE_WEIGHTS, INITIAL_SLEEP
        timers["perf/train_wait_time"] += INITIAL_UPDATE_WEIGHTS + INITIAL_SLEEP - carried
        folder = write_event_log(tmp_path / "events", first)
        sync = {
            "timestamp": "2026-12-02T10:49:00.000000Z",
            "source": {"component": "main"},
            "type": "inference_engine_weight_checksum",
            "rollout_id": None,
            "engine_checksums": [{"model.embed_tokens.weight": "9f3a"}],
        }
        (folder / "main.jsonl").write_text(json.dumps(sync, separators=(",", ":")) + "\n")
        for second, (identity, _key, metrics) in enumerate(resumed, start=3000):
            with open(folder / process_file_name(identity), "a", encoding="utf-8") as f:
                f.write(event_line(identity, metrics, second) + "\n")
        records = {r.step: r for r in build_step_records("miles", [folder], MILES_CTX)}
        assert sorted(records) == [1, 2, 3, 4, 5]
        assert records[3].step_time_s is None and records[3].phases_s["weight_sync"] is None
        assert "miles_shift:next_step_restarted" in records[3].flags
        assert records[2].step_time_s == pytest.approx(Rollout(1).truth_step_time())
        assert records[4].step_time_s == pytest.approx(Rollout(3).truth_step_time())  # initial sync left out
        assert not any(f.startswith("duplicate_step") for r in records.values() for f in r.flags)

    def test_rollout_step_on_the_train_step_axis_is_refused(self, tmp_path):
        """--wandb-always-use-train-step: rollout/step = rollout_id x optimizer steps per rollout (here 2)."""
        calls = miles_log_calls(range(3))
        for _identity, _key, metrics in calls:
            if "rollout/step" in metrics:
                metrics["rollout/step"] *= 2
        folder = write_event_log(tmp_path / "events", calls)
        with pytest.raises(ValueError, match="advances by 2 per rollout.*--wandb-always-use-train-step"):
            build_step_records("miles", [folder], MILES_CTX)


def test_a_write_error_leaves_metrics_jsonl_whole(file_logger_class, tmp_path, monkeypatch):
    """ENOSPC injected at fsync of the second line (no small disk needed): the first line stays, the second is cut
    off, and the follower raises RunFolderWriteError for the runner to end the cell with."""
    sink, metrics = tmp_path / "verl.jsonl", tmp_path / "metrics.jsonl"
    _verl_attempt(file_logger_class, sink, monkeypatch, range(1, 3), gen_offset=0.0)
    calls = []

    def failing_fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sink_follower.os, "fsync", failing_fsync)
    follower = _follower(sink, metrics)
    with pytest.raises(RunFolderWriteError, match="No space left on device"):
        follower.poll(final=True)
    assert [r.step for r in read_records(metrics)] == [1] and follower.steps_written == 1
    assert metrics.read_text().count("\n") == 1
