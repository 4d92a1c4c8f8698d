"""The VERL reader against files written by the real FileLogger of the VERL 0.9.1 wheel."""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scripts.benchmark.frameworks.sinks import build_step_records

from miles.utils.bench_flops import ModelArch, batch_train_flops
from miles.utils.bench_metrics import RunContext, read_records, write_records

REPO_ROOT = Path(__file__).resolve().parents[2]
ARCH = ModelArch.from_config_path(REPO_ROOT / "scripts" / "benchmark" / "model_configs" / "qwen3-0.6b.json")
CTX = RunContext.build(arch=ARCH, num_train_gpus=8, device_name="NVIDIA H200", layout="colocate")
ASYNC_CTX = RunContext.build(
    arch=ARCH, num_train_gpus=4, num_rollout_gpus=4, device_name="NVIDIA H200", layout="disaggregated"
)
SAMPLES = 64  # train_batch_size 16 x rollout.n 4


def load_file_logger_class(verl_root: Path):
    """verl/utils/tracking.py loaded by file path (it imports only the stdlib, orjson and packaging, not verl)."""
    path = verl_root / "verl" / "utils" / "tracking.py"
    spec = importlib.util.spec_from_file_location("_bench_verl_0_9_1_tracking", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "verl" not in sys.modules, "loading tracking.py must not import the verl package"
    return module.FileLogger


@pytest.fixture(scope="module")
def file_logger_class(verl_root):
    return load_file_logger_class(verl_root)


def verl_step_metrics(step: int, *, gen: float, update_actor: float, prompt_mean: float, response_mean: float) -> dict:
    """One step's dict as VERL V1's fit() logs it (timing_s/*, perf/*, length stats, actor/*), numpy values too."""
    timing = {
        "gen": gen,
        "old_log_prob": 6.25,
        "ref": 5.5,
        "adv": 0.125,
        "update_actor": update_actor,
        "update_weights": 3.75,
    }
    timing["step"] = sum(timing.values()) + 0.625  # prepare_step, balancing: only in the step timer
    total_tokens = SAMPLES * (prompt_mean + response_mean)
    return {
        "training/global_step": step,
        "training/epoch": 0,
        **{f"timing_s/{k}": np.float64(v) for k, v in timing.items()},
        "timing_per_token_ms/gen": 1000 * gen / (SAMPLES * response_mean),
        "perf/total_num_tokens": int(total_tokens),
        "perf/time_per_step": timing["step"],
        "perf/throughput": total_tokens / (timing["step"] * 8),
        "perf/mfu/actor": np.float32(0.31),
        "actor/perf/max_memory_allocated_gb": 61.2,
        "response_length/mean": response_mean,
        "response_length/max": 4096.0,
        "response_length/min": 212.0,
        "response_length/clip_ratio": 0.0625,
        "prompt_length/mean": prompt_mean,
        "prompt_length/max": 402.0,
        "prompt_length/min": 97.0,
        "critic/score/mean": 0.40625,
        "actor/pg_loss": -0.0123,
        "actor/grad_norm": np.float64(0.87),
        "actor/entropy": 0.52,
    }


def write_verl_run(file_logger_class, path: Path, monkeypatch, steps: range, *, kill_mid_last_line: bool = False):
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = file_logger_class("bench", "verl-fsdp-colocate")
    if steps.start == 1:
        logger.log(data={"val-core/math_dapo/acc/mean@1": 0.21875}, step=0)  # val_before_train
    for step in steps:
        data = verl_step_metrics(
            step, gen=40.0 + step, update_actor=20.0 + step / 2, prompt_mean=180.5, response_mean=1450.25
        )
        if step == 3:
            data["actor/grad_norm"] = np.float64("nan")  # orjson writes NaN as null
            data["timing_s/ref"] = float("inf")
        if step == 4:
            del data["timing_s/update_weights"]
        logger.log(data=data, step=step)
    if kill_mid_last_line:
        import orjson

        line = orjson.dumps(
            {
                "step": steps.stop,
                "data": verl_step_metrics(steps.stop, gen=1, update_actor=1, prompt_mean=1, response_mean=1),
            },
            option=orjson.OPT_SERIALIZE_NUMPY,
        )
        logger.fp.write(line[: len(line) // 2])  # the process died inside this write
    logger.finish()


class TestVerlSeparateAsync:
    """Disaggregated (separate_async): timing_s/gen is the trainer's wait; VERL logs no rollout-side time."""

    @pytest.fixture
    def records(self, file_logger_class, tmp_path, monkeypatch):
        path = tmp_path / "verl.jsonl"
        write_verl_run(file_logger_class, path, monkeypatch, range(1, 4))
        return build_step_records("verl", [path], ASYNC_CTX)

    def test_the_wait_is_its_own_field_and_generate_is_null_with_the_reason(self, records):
        step2 = records[1]
        assert step2.phases_s["rollout_wait"] == 42.0 and step2.phases_s["generate"] is None
        assert "generate:not_recorded:verl_separate_async_logs_no_rollout_time" in step2.flags
        assert step2.rollout_tokens_per_gpu_s is None and step2.overlap_s is None

    def test_other_is_the_step_minus_the_trainer_side_phases(self, records):
        assert records[1].phases_s["other"] == pytest.approx(0.125 + 0.625)

    def test_an_unknown_layout_never_calls_the_wait_generation(self, file_logger_class, tmp_path, monkeypatch):
        path = tmp_path / "verl.jsonl"
        write_verl_run(file_logger_class, path, monkeypatch, range(1, 3))
        unknown = RunContext.build(arch=ARCH, num_train_gpus=8)
        record = build_step_records("verl", [path], unknown)[0]
        assert record.phases_s["generate"] is None and "generate:not_recorded:verl_layout_unknown" in record.flags


class TestVerlFileLoggerReader:
    """Records from a real FileLogger file: mapping, tokens, derived fields and the defects of a killed run."""

    @pytest.fixture
    def records(self, file_logger_class, tmp_path, monkeypatch):
        path = tmp_path / "verl.jsonl"
        write_verl_run(file_logger_class, path, monkeypatch, range(1, 6), kill_mid_last_line=True)
        return build_step_records("verl", [path], CTX)

    def test_validation_line_is_skipped_and_steps_start_at_one(self, records):
        assert [r.step for r in records] == [1, 2, 3, 4, 5]
        assert all(r.framework == "verl" for r in records)

    def test_phases_map_from_timing_keys_and_other_is_the_remainder(self, records):
        step2 = records[1]
        assert step2.step_time_s == pytest.approx(40 + 2 + 6.25 + 5.5 + 0.125 + 21 + 3.75 + 0.625)
        assert step2.phases_s["generate"] == 42.0 and step2.phases_s["rollout_wait"] == 42.0  # sync: the same wait
        assert step2.overlap_s == 0.0
        assert step2.phases_s["old_logprob"] == 6.25 and step2.phases_s["ref_logprob"] == 5.5
        assert step2.phases_s["train"] == 21.0 and step2.phases_s["weight_sync"] == 3.75
        assert step2.phases_s["other"] == pytest.approx(0.125 + 0.625)
        assert step2.raw["timing_s/gen"] == 42.0 and step2.raw["actor/pg_loss"] == -0.0123

    def test_tokens_and_samples_come_from_totals_and_means(self, records):
        step2 = records[1]
        assert step2.samples == SAMPLES
        assert step2.tokens == {
            "prompt": round(180.5 * SAMPLES),
            "response": int(SAMPLES * 1630.75) - round(180.5 * SAMPLES),
        }
        assert "tokens:from_means" in step2.flags and "seq_lens:uniform_mean" in step2.flags

    def test_derived_fields_follow_the_documented_formulas(self, records):
        step2 = records[1]
        seq_lens = [1630.75] * SAMPLES
        tflops = batch_train_flops(ARCH, seq_lens) / 21.0 / 8 / 1e12
        assert step2.train_tflops_per_gpu == pytest.approx(tflops)
        assert step2.train_mfu == pytest.approx(tflops / 989.0)
        assert step2.train_tokens_per_s == pytest.approx(SAMPLES * 1630.75 / 21.0)
        assert step2.rollout_tokens_per_gpu_s == pytest.approx(step2.tokens["response"] / 42.0 / 8)
        assert step2.wait_ratio == pytest.approx(1 - (6.25 + 5.5 + 21.0) / step2.step_time_s)

    def test_nan_and_inf_are_kept_and_flagged(self, records):
        step3 = records[2]
        assert step3.raw["actor/grad_norm"] is None and "null:actor/grad_norm" in step3.flags
        assert math.isnan(step3.phases_s["ref_logprob"]) and "null:timing_s/ref" in step3.flags
        assert step3.wait_ratio is None and step3.phases_s["other"] is None
        assert step3.train_tflops_per_gpu is not None  # the train phase itself is fine

    def test_missing_key_gives_none_and_a_flag(self, records):
        step4 = records[3]
        assert step4.phases_s["weight_sync"] is None and "missing:timing_s/update_weights" in step4.flags

    def test_truncated_last_line_is_flagged_on_the_last_complete_step(self, records):
        assert any(f.startswith("truncated_last_line:verl.jsonl:") for f in records[4].flags)
        assert not any(f.startswith("truncated_last_line") for r in records[:4] for f in r.flags)

    def test_records_round_trip_through_metrics_jsonl(self, records, tmp_path):
        write_records(tmp_path / "metrics.jsonl", records)
        again = read_records(tmp_path / "metrics.jsonl")
        assert [r.step for r in again] == [1, 2, 3, 4, 5]
        assert math.isnan(again[2].phases_s["ref_logprob"]) and again[1] == records[1]

    def test_restart_with_a_new_file_keeps_the_last_complete_step(self, file_logger_class, tmp_path, monkeypatch):
        """A resumed run re-logs steps 3-4; given both files in order, the re-run's values win and are flagged."""
        first, second = tmp_path / "attempt1.jsonl", tmp_path / "attempt2.jsonl"
        write_verl_run(file_logger_class, first, monkeypatch, range(1, 5))
        write_verl_run(file_logger_class, second, monkeypatch, range(3, 7))
        records = build_step_records("verl", [first, second], CTX)
        assert [r.step for r in records] == [1, 2, 3, 4, 5, 6]
        assert "duplicate_step:verl-driver:kept_attempt_2_of_2" in records[2].flags
        assert not any(f.startswith("duplicate_step") for f in records[1].flags)

    def test_unknown_device_leaves_mfu_null_with_the_reason(self, file_logger_class, tmp_path, monkeypatch):
        path = tmp_path / "verl.jsonl"
        write_verl_run(file_logger_class, path, monkeypatch, range(1, 3))
        ctx = RunContext.build(arch=ARCH, num_train_gpus=8, device_name="NVIDIA GeForce RTX 4090")
        record = build_step_records("verl", [path], ctx)[0]
        assert record.train_tflops_per_gpu is not None and record.train_mfu is None
        assert "mfu_unavailable:unavailable: device 'NVIDIA GeForce RTX 4090' is not in the peak table" in record.flags

    def test_a_file_that_is_not_a_file_logger_is_rejected_by_line(self, tmp_path):
        path = tmp_path / "other.jsonl"
        path.write_text('{"metric": "x", "series": [[1, 2.0]]}\n')
        with pytest.raises(ValueError, match="other.jsonl:1: not a VERL FileLogger line"):
            build_step_records("verl", [path], CTX)
