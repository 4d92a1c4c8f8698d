"""The Miles stdout reader on the job logs that broke it: a restart appended to the same log (or given as a second
file), Megatron PP>1 (Timer lines from global rank 0, the perf line from the last pipeline stage), a perf line cut by a
crash. The logs are written through `logging` with Miles's own format (test_miles_reader.MilesJobLog)."""

from __future__ import annotations

import os

import pytest
from scripts.benchmark.frameworks.sinks import build_step_records

from tests.benchmark.test_miles_reader import CTX, Rollout, megatron_colocate_job_log

POST_TRAIN = {k: 2.0 + k / 4 for k in range(8)}
RESTARTED_AT = 4_000.0  # seconds after the first attempt's start: the second attempt's clock


INITIAL_SYNC = {"perf/update_weights_time": 4.0, "perf/sleep_time": 1.5}


def _resumed_first_record(k: int, perf: dict) -> None:
    """The first record of a process started at rollout k (resumed with --load): its wait holds the process's own
    start and initial weight sync, not the previous process's update, offload and weight backup."""
    previous = Rollout(k - 1)
    perf["perf/train_wait_time"] -= previous.update_weights + previous.sleep + POST_TRAIN[k - 1]
    perf["perf/train_wait_time"] += sum(INITIAL_SYNC.values())
    perf.update(INITIAL_SYNC)


def two_attempts() -> tuple[str, str]:
    """Rollouts 0-3, then a restart that resumes at rollout 1 and runs to rollout 5."""
    first = megatron_colocate_job_log(range(4), POST_TRAIN)
    second = megatron_colocate_job_log(
        range(1, 6),
        POST_TRAIN,
        clock=1_796_000_000.0 + RESTARTED_AT,
        edit_perf=lambda k, perf: _resumed_first_record(k, perf) if k == 1 else None,
    )
    return first, second


class TestARestartedJob:
    @pytest.fixture(params=["appended to one log", "given as two files"])
    def records(self, request, tmp_path):
        first, second = two_attempts()
        if request.param == "appended to one log":
            (tmp_path / "log.txt").write_text(first + second)
            paths = [tmp_path / "log.txt"]
        else:
            paths = [tmp_path / "attempt-1.txt", tmp_path / "attempt-2.txt"]
            for path, text, mtime in zip(paths, (first, second), (1_700_000_000, 1_700_000_600), strict=True):
                path.write_text(text)
                os.utime(path, (mtime, mtime))
            paths.reverse()  # the reader orders attempts by the data, not by the order given
        return {r.step: r for r in build_step_records("miles", paths, CTX)}

    def test_every_rerun_step_but_the_last_keeps_its_step_time(self, records):
        assert sorted(records) == [1, 2, 3, 4, 5, 6]
        for step in (2, 3, 4, 5):  # rollouts 1-4, re-run by the second attempt
            k = step - 1
            record = records[step]
            assert "miles_shift:next_step_restarted" not in record.flags, record.flags
            assert record.step_time_s == pytest.approx(Rollout(k).truth_step_time() + POST_TRAIN[k], abs=2e-3)
            assert record.phases_s["weight_sync"] == pytest.approx(Rollout(k).update_weights)
            assert record.phases_s["other"] is not None and record.wait_ratio is not None

    def test_the_step_before_the_restart_point_says_why_it_has_no_time(self, records):
        assert "miles_shift:next_step_restarted" in records[1].flags and records[1].step_time_s is None

    def test_only_the_rerun_steps_are_flagged_duplicate(self, records):
        duplicated = sorted(s for s, r in records.items() if any(f.startswith("duplicate_step") for f in r.flags))
        assert duplicated == [2, 3, 4]


class TestPipelineParallel:
    """PP=2: `Timer train end` from actor_cell0_rank0, the `perf N:` line from the last stage actor_cell0_rank1."""

    @pytest.fixture
    def records(self, tmp_path):
        log = tmp_path / "log.txt"
        log.write_text(megatron_colocate_job_log(range(4), POST_TRAIN, perf_process="actor_cell0_rank1"))
        return build_step_records("miles", [log], CTX)

    def test_the_post_train_time_is_timed_across_ranks(self, records):
        for record in records[:3]:
            k = record.step - 1
            assert "miles_shift:post_train_untimed" not in record.flags
            assert record.raw["stdout/post_train_time"] == pytest.approx(POST_TRAIN[k], abs=1e-3)
            assert record.step_time_s == pytest.approx(Rollout(k).truth_step_time() + POST_TRAIN[k], abs=2e-3)

    def test_the_weight_backup_stays_out_of_the_next_steps_wait(self, records):
        r = Rollout(2)
        assert records[2].phases_s["rollout_wait"] == pytest.approx(r.generate + r.rm_overhead + r.wake_up, abs=2e-3)


def _cut_perf_line(text: str, rollout: int, glue_next: bool) -> tuple[str, int]:
    """The train rank's `perf <rollout>:` line cut in its dict (a crash), its newline kept or the next line glued."""
    lines = text.split("\n")
    index = next(i for i, line in enumerate(lines) if f"perf {rollout}: {{'perf/train_wait_time'" in line)
    lines[index] = lines[index][: lines[index].index("perf/train_time") + 8]
    if glue_next:
        lines[index] += lines.pop(index + 1)
    return "\n".join(lines), index + 1


class TestACutPerfLine:
    def test_a_perf_line_cut_by_a_crash_is_flagged_on_its_step(self, tmp_path):
        text, line_number = _cut_perf_line(megatron_colocate_job_log(range(4), POST_TRAIN), 2, glue_next=False)
        (tmp_path / "log.txt").write_text(text)
        records = {r.step: r for r in build_step_records("miles", [tmp_path / "log.txt"], CTX)}
        assert f"truncated_line:log.txt:{line_number}" in records[3].flags
        assert records[3].phases_s["train"] is None
        assert not any(f.startswith("truncated_line") for s, r in records.items() if s != 3 for f in r.flags)

    def test_the_line_glued_to_a_cut_one_is_still_read(self, tmp_path):
        text, line_number = _cut_perf_line(megatron_colocate_job_log(range(4), POST_TRAIN), 2, glue_next=True)
        (tmp_path / "log.txt").write_text(text)
        records = {r.step: r for r in build_step_records("miles", [tmp_path / "log.txt"], CTX)}
        assert f"truncated_line:log.txt:{line_number}" in records[3].flags
        assert records[4].phases_s["generate"] == pytest.approx(Rollout(3).generate)  # the glued rollout_manager line
        assert not any(f.startswith("corrupt_line") for r in records.values() for f in r.flags)


class TestAResumedJob:
    """Rollouts 0-2, then a new process resumed with --load at rollout 3 appended to the same log: no step goes back
    and no key is logged twice; only the train actor's init (`Timer train_wait start` with no train before it)."""

    @pytest.fixture
    def records(self, tmp_path):
        first = megatron_colocate_job_log(range(3), POST_TRAIN)
        resumed = megatron_colocate_job_log(
            range(3, 5),
            POST_TRAIN,
            clock=1_796_000_000.0 + RESTARTED_AT,
            edit_perf=lambda k, perf: _resumed_first_record(k, perf) if k == 3 else None,
        )
        (tmp_path / "log.txt").write_text(first + resumed)
        return {r.step: r for r in build_step_records("miles", [tmp_path / "log.txt"], CTX)}

    def test_the_new_processs_initial_sync_is_in_no_step(self, records):
        assert sorted(records) == [1, 2, 3, 4, 5]
        assert records[3].step_time_s is None and records[3].phases_s["weight_sync"] is None
        assert "miles_shift:next_step_restarted" in records[3].flags

    def test_the_steps_around_the_resume_are_exact(self, records):
        for step in (1, 2, 4):
            k = step - 1
            assert records[step].step_time_s == pytest.approx(Rollout(k).truth_step_time() + POST_TRAIN[k], abs=2e-3)
        r = Rollout(3)
        assert records[4].phases_s["rollout_wait"] == pytest.approx(r.generate + r.rm_overhead + r.wake_up, abs=2e-3)

    def test_an_uninterrupted_job_has_no_restart(self, tmp_path):
        (tmp_path / "log.txt").write_text(megatron_colocate_job_log(range(4), POST_TRAIN))
        records = build_step_records("miles", [tmp_path / "log.txt"], CTX)
        assert not any(f.startswith(("miles_shift:next_step", "duplicate_step")) for r in records for f in r.flags)
        assert [r.step_time_s is not None for r in records] == [True, True, True, False]
