"""The Miles readers (event log, stdout fallback) and the one-step shift normalisation.

The sinks are built here call by call, as a colocated Miles FSDP job makes them: per
rollout, the RolloutManager logs its rollout perf, then the train rank logs the rollout data, the train/step series
and its timers. The train rank's record k carries in train_wait the trainer offload (sleep) and weight update that
followed training k-1; rollout 0 carries the initial ones.
"""

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from scripts.benchmark.frameworks.sinks import build_step_records

from miles.utils.bench_flops import ModelArch, batch_train_flops
from miles.utils.bench_metrics import RunContext

REPO_ROOT = Path(__file__).resolve().parents[2]
ARCH = ModelArch.from_config_path(REPO_ROOT / "scripts" / "benchmark" / "model_configs" / "qwen3-4b.json")
CTX = RunContext.build(arch=ARCH, num_train_gpus=8, device_name="NVIDIA H100 80GB HBM3")
SAMPLES, PROMPT_MEAN = 256, 200.0  # rollout_batch_size 32 x n_samples_per_prompt 8
INITIAL_UPDATE_WEIGHTS, INITIAL_SLEEP = 4.0, 1.5
ROLLOUT_MANAGER = {"component": "rollout_manager"}
TRAIN_RANK = {"component": "actor", "cell_index": 0, "rank_within_cell": 0}


@dataclass(frozen=True)
class Rollout:
    """Wall time of each piece of work around one rollout k (what really happened, in seconds)."""

    k: int

    @property
    def generate(self) -> float:
        return 40.0 + self.k

    rm_overhead = 0.5  # conversion to train data and object-store put: in train_wait, outside rollout_time
    wake_up = 0.75
    log_probs = 6.25
    train_overhead = 0.875  # data fetch, advantages, metric gather: in the train block, outside actor_train

    @property
    def actor_train(self) -> float:
        return 20.0 + self.k / 2

    sleep = 1.25  # trainer offload after training k

    @property
    def update_weights(self) -> float:  # weight push after training k
        return 3.5 + self.k / 8

    @property
    def response_mean(self) -> float:
        return 1500.0 + 10 * self.k

    def truth_step_time(self) -> float:
        """The step as VERL books it: generation through the weight update that follows training k."""
        return (
            self.generate
            + self.rm_overhead
            + self.wake_up
            + self.log_probs
            + self.actor_train
            + self.train_overhead
            + self.sleep
            + self.update_weights
        )


def miles_log_calls(rollout_ids: range) -> list[tuple[dict, str, dict]]:
    """(process identity, step_key, metrics) of every tracking.log call, in a sync colocated run's order."""
    calls = []
    for k in rollout_ids:
        r = Rollout(k)
        previous_sleep = INITIAL_SLEEP if k == 0 else Rollout(k - 1).sleep
        previous_update = INITIAL_UPDATE_WEIGHTS if k == 0 else Rollout(k - 1).update_weights
        response_total = SAMPLES * r.response_mean
        calls.append(
            (
                ROLLOUT_MANAGER,
                "rollout/step",
                {
                    "rollout/step": k,
                    "perf/rollout_time": r.generate,
                    "perf/tokens_per_gpu_per_sec": response_total / r.generate / 8,
                    "perf/effective_tokens_per_gpu_per_sec": response_total / r.generate / 8,
                    "perf/longest_sample_tokens_per_sec": 8192 / r.generate,
                    "rollout/response_len/mean": r.response_mean,
                    "rollout/response_len/median": r.response_mean - 120,
                    "rollout/response_len/max": 8192.0,
                    "rollout/response_len/min": 311.0,
                    "rollout/truncated_ratio": 0.03125,
                },
            )
        )
        calls.append(
            (
                TRAIN_RANK,
                "rollout/step",
                {
                    "rollout/step": k,
                    "rollout/raw_reward": 0.4375,
                    "rollout/response_lengths": r.response_mean,
                    "rollout/total_lengths": PROMPT_MEAN + r.response_mean,
                    "rollout/log_probs": -0.312,
                },
            )
        )
        calls.append((TRAIN_RANK, "train/step", {"train/step": k, "train/loss": 0.0125, "train/grad_norm": 0.91}))
        train_wait = previous_sleep + previous_update + r.generate + r.rm_overhead + r.wake_up
        train_block = r.log_probs + r.actor_train + r.train_overhead
        trained_tokens = SAMPLES * (PROMPT_MEAN + r.response_mean)
        calls.append(
            (
                TRAIN_RANK,
                "rollout/step",
                {
                    "rollout/step": k,
                    "perf/train_wait_time": train_wait,
                    "perf/train_time": train_block,
                    "perf/actor_train_time": r.actor_train,
                    "perf/log_probs_time": r.log_probs,
                    "perf/update_weights_time": previous_update,
                    "perf/sleep_time": previous_sleep,
                    "perf/wake_up_time": r.wake_up,
                    "perf/step_time": train_wait + train_block,
                    "perf/wait_time_ratio": train_wait / (train_wait + train_block),
                    "perf/actor_train_tok_per_s": trained_tokens / r.actor_train,
                    "perf/actor_train_tflops": 301.5,
                    "perf/mfu_peak_tflops": 989.0,
                    "perf/actor_train_mfu": 301.5 / 989.0,
                },
            )
        )
    return calls


def event_line(identity: dict, metrics: dict, second: int) -> str:
    """A MetricEvent as pydantic's model_dump_json writes it (compact; NaN/Inf become null)."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}
    event = {
        "timestamp": f"2026-12-02T10:{second // 60:02d}:{second % 60:02d}.250000Z",
        "source": identity,
        "type": "metric",
        "rollout_id": None,
        "attempt": None,
        "metrics": clean,
    }
    return json.dumps(event, separators=(",", ":"))


def process_file_name(identity: dict) -> str:
    if identity["component"] == "rollout_manager":
        return "rollout_manager.jsonl"
    return f"{identity['component']}_cell{identity['cell_index']}_rank{identity['rank_within_cell']}.jsonl"


def write_event_log(folder: Path, calls: list[tuple[dict, str, dict]]) -> Path:
    """Append each call to its process's file, as the event logger does (one line per tracking.log call)."""
    folder.mkdir(parents=True, exist_ok=True)
    for second, (identity, _step_key, metrics) in enumerate(calls):
        with open(folder / process_file_name(identity), "a", encoding="utf-8") as f:
            f.write(event_line(identity, metrics, second) + "\n")
    return folder


def stdout_text(calls: list[tuple[dict, str, dict]]) -> str:
    """The `perf N:` / `rollout N:` lines the same calls print (Python dict repr), among other job output."""
    lines = ["Job submission server address: http://127.0.0.1:8265", "(pid=4242) INFO: sglang engines ready"]
    for second, (identity, step_key, metrics) in enumerate(calls):
        process = "rollout_manager" if identity["component"] == "rollout_manager" else "actor_cell0_rank0"
        prefix = f"[2026-12-02 10:00:{second:02d} {process}]"
        if step_key == "train/step":
            lines.append(f"{prefix} actor.py:301 - step {metrics['train/step']}: {metrics!r}")
            continue
        kind = "perf" if any(k.startswith("perf/") for k in metrics) else "rollout"
        body = {k: v for k, v in metrics.items() if k != "rollout/step"}
        lines.append(f"{prefix} train_metric_utils.py:88 - {kind} {metrics['rollout/step']}: {body!r}")
    return "\n".join(lines) + "\n"


class TestMilesEventLog:
    """A clean 4-rollout run: processes merged, the step shift undone, tokens and derived fields."""

    @pytest.fixture
    def records(self, tmp_path):
        folder = write_event_log(tmp_path / "events", miles_log_calls(range(4)))
        return build_step_records("miles", [folder], CTX)

    def test_rollout_ids_become_steps_counted_from_one(self, records):
        assert [r.step for r in records] == [1, 2, 3, 4]
        assert all(r.framework == "miles" for r in records)

    def test_the_rollout_manager_and_train_rank_records_are_merged(self, records):
        step2 = records[1]
        assert step2.phases_s["generate"] == Rollout(1).generate  # RolloutManager
        assert step2.phases_s["train"] == Rollout(1).actor_train  # train rank
        assert step2.raw["rollout/truncated_ratio"] == 0.03125 and step2.raw["rollout/raw_reward"] == 0.4375

    def test_weight_update_and_offload_land_in_the_step_that_caused_them(self, records):
        for record in records[:3]:
            rollout = Rollout(record.step - 1)
            assert record.step_time_s == pytest.approx(rollout.truth_step_time())
            assert record.phases_s["weight_sync"] == rollout.update_weights

    def test_the_initial_weight_sync_is_in_no_step(self, records):
        assert records[0].step_time_s == pytest.approx(Rollout(0).truth_step_time())
        assert records[0].raw["perf/update_weights_time"] == INITIAL_UPDATE_WEIGHTS  # raw stays verbatim

    def test_the_last_step_has_no_following_record_and_says_so(self, records):
        last = records[-1]
        assert last.step_time_s is None and last.phases_s["weight_sync"] is None
        assert "miles_shift:no_next_step" in last.flags
        assert last.train_tflops_per_gpu is not None  # the train phase is still known

    def test_other_is_what_no_phase_covers(self, records):
        r = Rollout(1)
        assert records[1].phases_s["other"] == pytest.approx(r.train_overhead + r.sleep)
        assert records[1].phases_s["ref_logprob"] is None  # no reference model: not reported, not 0

    def test_rollout_wait_is_the_trainer_side_and_generate_the_rollout_side(self, records):
        """The trainer waited for generation plus the hand-over; generation alone comes from the RolloutManager."""
        r = Rollout(1)
        assert records[1].phases_s["rollout_wait"] == pytest.approx(r.generate + r.rm_overhead + r.wake_up)
        assert records[1].phases_s["generate"] == r.generate
        assert records[1].overlap_s == 0.0  # colocated: nothing hidden behind training
        assert "miles_shift:post_train_untimed" in records[1].flags  # the event log has no train-end time

    def test_tokens_and_derived_fields(self, records):
        step2, r = records[1], Rollout(1)
        assert step2.samples == SAMPLES
        assert step2.tokens == {"prompt": SAMPLES * PROMPT_MEAN, "response": SAMPLES * r.response_mean}
        seq_lens = [PROMPT_MEAN + r.response_mean] * SAMPLES
        tflops = batch_train_flops(ARCH, seq_lens) / r.actor_train / 8 / 1e12
        assert step2.train_tflops_per_gpu == pytest.approx(tflops)
        assert step2.train_mfu == pytest.approx(tflops / 989.0)
        assert step2.rollout_tokens_per_gpu_s == pytest.approx(SAMPLES * r.response_mean / r.generate / 8)
        assert step2.wait_ratio == pytest.approx(1 - (r.log_probs + r.actor_train) / r.truth_step_time())


class TestMilesRealRunDefects:
    """Killed runs, restarts, NaN and missing keys in the event log."""

    def test_a_killed_train_rank_leaves_a_truncated_line_and_an_incomplete_step(self, tmp_path):
        calls = miles_log_calls(range(4))
        folder = write_event_log(tmp_path / "events", calls[:-1])  # the train rank's perf of rollout 3 ...
        identity, _, metrics = calls[-1]
        with open(folder / process_file_name(identity), "a", encoding="utf-8") as f:
            f.write(event_line(identity, metrics, 99)[:150])  # ... died mid-write
        records = build_step_records("miles", [folder], CTX)
        assert [r.step for r in records] == [1, 2, 3, 4]
        assert any(f.startswith("truncated_last_line:actor_cell0_rank0.jsonl:") for f in records[3].flags)
        assert "incomplete:actor_cell0_rank0" in records[3].flags
        assert "missing:perf/actor_train_time" in records[3].flags and records[3].phases_s["train"] is None
        # Step 3 cannot be closed without rollout 3's train-rank record: null, not a wrong number.
        assert records[2].step_time_s is None and "miles_shift:no_next_step" in records[2].flags
        assert records[1].step_time_s == pytest.approx(Rollout(1).truth_step_time())

    def test_a_restart_relogs_steps_and_the_last_complete_attempt_wins(self, tmp_path):
        """Attempt 1 logs rollouts 0-2 and dies inside 2; the resumed job logs 2-3 again into the same files."""
        first = miles_log_calls(range(3))[:-1]  # rollout 2's train-rank perf never written
        resumed = miles_log_calls(range(2, 4))
        folder = write_event_log(tmp_path / "events", first)
        identity = TRAIN_RANK
        with open(folder / process_file_name(identity), "a", encoding="utf-8") as f:
            f.write('{"timestamp":"2026-12-02T10:05:00.0Z","source":{"component":"actor","cel')  # killed mid-line
        write_event_log(folder, resumed)  # the resumed logger appends: its first line is glued to the fragment
        records = build_step_records("miles", [folder], CTX)
        assert [r.step for r in records] == [1, 2, 3, 4]
        step3 = records[2]
        assert "duplicate_step:rollout_manager:kept_attempt_2_of_2" in step3.flags
        assert "duplicate_step:actor_cell0_rank0:kept_attempt_2_of_2" in step3.flags
        assert any(f.startswith("recovered_line:actor_cell0_rank0.jsonl:") for f in step3.flags)
        assert step3.phases_s["train"] == Rollout(2).actor_train

    def test_an_incomplete_later_attempt_does_not_replace_a_complete_one(self, tmp_path):
        calls = miles_log_calls(range(3))
        rerun_partial = [c for c in miles_log_calls(range(1, 2)) if c[0] is TRAIN_RANK][:1]  # data, no perf
        records = build_step_records("miles", [write_event_log(tmp_path / "e", calls + rerun_partial)], CTX)
        assert records[1].phases_s["train"] == Rollout(1).actor_train
        assert "duplicate_step:actor_cell0_rank0:kept_attempt_1_of_2" in records[1].flags

    def test_nan_is_kept_and_flagged_and_a_missing_timer_is_null(self, tmp_path):
        calls = miles_log_calls(range(3))
        perf_of_rollout_1 = calls[7][2]
        perf_of_rollout_1["perf/actor_train_mfu"] = math.nan  # written as null by pydantic
        del perf_of_rollout_1["perf/log_probs_time"]
        records = build_step_records("miles", [write_event_log(tmp_path / "e", calls)], CTX)
        assert records[1].raw["perf/actor_train_mfu"] is None and "null:perf/actor_train_mfu" in records[1].flags
        assert records[1].phases_s["old_logprob"] is None and "missing:perf/log_probs_time" in records[1].flags

    def test_other_audit_events_and_other_step_keys_are_ignored(self, tmp_path):
        folder = write_event_log(tmp_path / "e", miles_log_calls(range(2)))
        with open(folder / "actor_cell0_rank0.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"type": "train_group_step_end", "rollout_id": 1, "cell_outcomes": {}}) + "\n")
        with open(folder / "rollout_manager.jsonl", "a", encoding="utf-8") as f:
            f.write(event_line(ROLLOUT_MANAGER, {"eval/step": 1, "eval/aime": 0.3}, 200) + "\n")
        assert [r.step for r in build_step_records("miles", [folder], CTX)] == [1, 2]


class TestMilesStdoutFallback:
    """The `perf N: {...}` lines give the same records as the event log."""

    def test_stdout_and_event_log_agree(self, tmp_path):
        calls = miles_log_calls(range(3))
        log = tmp_path / "log.txt"
        log.write_text(stdout_text(calls))
        from_stdout = build_step_records("miles", [log], CTX)
        from_events = build_step_records("miles", [write_event_log(tmp_path / "e", calls)], CTX)
        assert [r.phases_s for r in from_stdout] == [r.phases_s for r in from_events]
        assert [r.step_time_s for r in from_stdout] == [r.step_time_s for r in from_events]
        assert [r.tokens for r in from_stdout] == [r.tokens for r in from_events]

    def test_nan_and_numpy_reprs_parse(self, tmp_path):
        calls = miles_log_calls(range(2))
        calls[3][2]["perf/actor_train_mfu"] = math.nan
        text = stdout_text(calls).replace(
            "'perf/actor_train_tflops': 301.5", "'perf/actor_train_tflops': np.float64(301.5)"
        )
        log = tmp_path / "log.txt"
        log.write_text(text)
        records = build_step_records("miles", [log], CTX)
        assert (
            math.isnan(records[0].raw["perf/actor_train_mfu"]) and "nonfinite:perf/actor_train_mfu" in records[0].flags
        )
        assert records[0].raw["perf/actor_train_tflops"] == 301.5


class TestMilesProcessIdentity:
    """Processes are told apart by the event's `source` identity, not by the file that holds the line."""

    def test_a_restarted_process_writing_a_new_file_is_still_one_process(self, tmp_path):
        calls = miles_log_calls(range(4))
        folder = tmp_path / "events"
        folder.mkdir()
        for second, (identity, _key, metrics) in enumerate(calls):
            restarted = second >= 8 and identity is TRAIN_RANK  # rollouts 2-3 of the train rank in a second file
            name = "attempt2-" + process_file_name(identity) if restarted else process_file_name(identity)
            with open(folder / name, "a", encoding="utf-8") as f:
                f.write(event_line(identity, metrics, second) + "\n")
        # The first attempt had also logged rollout 2's data before dying.
        with open(folder / process_file_name(TRAIN_RANK), "a", encoding="utf-8") as f:
            f.write(event_line(TRAIN_RANK, calls[9][2], 60) + "\n")
        records = build_step_records("miles", [folder], CTX)  # files in name order: the first attempt comes first
        assert [r.step for r in records] == [1, 2, 3, 4]
        assert "duplicate_step:actor_cell0_rank0:kept_attempt_2_of_2" in records[2].flags
        assert records[0].step_time_s == pytest.approx(Rollout(0).truth_step_time())
        # Rollout 2's record comes from the restarted process: its train_wait holds that process's initial weight
        # sync, not the update that followed training 1, so step 2 (rollout 1) gets no step time, and says why.
        assert records[1].step_time_s is None and "miles_shift:next_step_restarted" in records[1].flags
        assert not any(f.startswith("conflict:") for r in records for f in r.flags)


MILES_LOG_FORMAT = "[%(asctime)s.%(msecs)03d {name}] %(filename)s:%(lineno)d - %(message)s"
"""miles/utils/logging_utils.py configure_logger_raw: the format and datefmt every Miles process logs with."""
MILES_DATEFMT = "%Y-%m-%d %H:%M:%S"


class MilesJobLog:
    """A Miles job's stdout written through `logging` with Miles's own format, at chosen clock times."""

    def __init__(self):
        self.lines: list[str] = []

    def log(self, process: str, filename: str, lineno: int, message: str, at: float) -> None:
        import logging

        formatter = logging.Formatter(MILES_LOG_FORMAT.format(name=process), datefmt=MILES_DATEFMT)
        formatter.converter = __import__("time").gmtime
        record = logging.LogRecord("miles", logging.INFO, filename, lineno, message, None, None)
        record.created, record.msecs = at, (at % 1) * 1000
        self.lines.append(formatter.format(record))

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def megatron_colocate_job_log(
    rollouts: range,
    post_train: dict[int, float],
    perf_process: str = "actor_cell0_rank0",
    clock: float = 1_796_000_000.0,
    edit_perf: Callable[[int, dict], None] = lambda k, perf: None,
    clock_back: dict[int, float] | None = None,
) -> str:
    """One process life: the train actor's init starts its `train_wait` timer (timer.py, global rank 0); per
    rollout: RolloutManager perf (ray/rollout/metrics.py), the train rank's rollout dict (log_utils.py),
    `Timer train end` and `Timer train_wait start` (inverse_timer), then after the CPU weight backup its perf dict
    (train_metric_utils.py, from `perf_process`: the last pipeline stage). The backup after training k is inside
    record k+1's train_wait, as Miles's inverse_timer books it; `clock_back` steps the wall clock back after k."""
    log = MilesJobLog()
    log.log("actor_cell0_rank0", "timer.py", 30, "Timer train_wait start", clock)
    for k in rollouts:
        r = Rollout(k)
        calls = [c for c in miles_log_calls(range(k, k + 1)) if "rollout/step" in c[2]]
        (_, _, rm), (_, _, data), (_, _, perf) = calls[0], calls[1], calls[2]
        if k > 0:
            perf["perf/train_wait_time"] += post_train[k - 1]
        clock += r.generate
        log.log(
            "rollout_manager",
            "metrics.py",
            89,
            f"perf {k}: { {x: v for x, v in rm.items() if x != 'rollout/step'} }",
            clock,
        )
        clock += r.rm_overhead + r.wake_up + r.log_probs + r.actor_train + r.train_overhead
        log.log(
            perf_process,
            "log_utils.py",
            123,
            f"rollout {k}: { {x: v for x, v in data.items() if x != 'rollout/step'} }",
            clock,
        )
        log.log("actor_cell0_rank0", "timer.py", 42, "Timer train end (elapsed: 27.1s)", clock)
        log.log("actor_cell0_rank0", "timer.py", 30, "Timer train_wait start", clock)
        edit_perf(k, perf)
        clock += post_train[k] - (clock_back or {}).get(k, 0.0)  # NTP stepping the wall clock back, say
        log.log(
            perf_process,
            "train_metric_utils.py",
            56,
            f"perf {k}: { {x: v for x, v in perf.items() if x != 'rollout/step'} }",
            clock,
        )
        clock += r.sleep + r.update_weights
    return log.text()


class TestMilesStdoutSink:
    """The harness's Miles sink: the job's stdout, with the post-train time booked into its own step."""

    POST_TRAIN = {0: 2.5, 1: 2.25, 2: 2.75, 3: 2.0}

    @pytest.fixture
    def records(self, tmp_path):
        log = tmp_path / "log.txt"
        log.write_text(megatron_colocate_job_log(range(4), self.POST_TRAIN))
        return build_step_records("miles", [log], CTX)

    def test_post_train_work_is_measured_and_booked_into_its_own_step(self, records):
        for record in records[:3]:
            k = record.step - 1
            assert record.raw["stdout/post_train_time"] == pytest.approx(self.POST_TRAIN[k], abs=1e-3)
            truth = Rollout(k).truth_step_time() + self.POST_TRAIN[k]
            assert record.step_time_s == pytest.approx(truth, abs=2e-3)
            assert record.phases_s["other"] == pytest.approx(
                Rollout(k).train_overhead + Rollout(k).sleep + self.POST_TRAIN[k], abs=2e-3
            )

    def test_the_next_steps_wait_no_longer_holds_the_backup(self, records):
        r = Rollout(2)
        assert records[2].phases_s["rollout_wait"] == pytest.approx(r.generate + r.rm_overhead + r.wake_up, abs=2e-3)
        assert not any(f.startswith("miles_shift:post_train_untimed") for f in records[2].flags)

    def test_a_clock_stepped_back_after_train_end_leaves_both_steps_flagged_and_none_negative(self, tmp_path):
        """The post-train time of rollout 1 reads -4.9 s: it is not a duration; both steps it enters are flagged."""
        log = tmp_path / "log.txt"
        log.write_text(megatron_colocate_job_log(range(4), self.POST_TRAIN, clock_back={1: 5.0}))
        records = build_step_records("miles", [log], CTX)
        for record in records[1:3]:
            assert "miles_shift:post_train_clock_stepped_back" in record.flags, record.step
            assert record.step_time_s > 0
        assert "miles_shift:post_train_clock_stepped_back" not in records[0].flags + records[3].flags

    def test_a_line_still_being_written_is_left_for_the_next_read(self, tmp_path):
        text = megatron_colocate_job_log(range(3), self.POST_TRAIN)
        log = tmp_path / "log.txt"
        log.write_text(text[: text.rindex("perf 2:") + 40])  # the last perf line has no end yet
        records = build_step_records("miles", [log], CTX)
        assert not any(f.startswith("corrupt_line") for r in records for f in r.flags)
        assert records[2].phases_s["train"] is None and "missing:perf/actor_train_time" in records[2].flags
