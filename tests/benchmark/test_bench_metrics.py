"""Schema v1 derivations: the MFU peak resolution and the derived fields of a record."""

import math
import threading
from pathlib import Path

import pytest

from miles.utils.bench_flops import ModelArch, batch_train_flops
from miles.utils.bench_metrics import RunContext, StepRecord, derive_step_fields, write_bytes_atomic, write_text_atomic

REPO_ROOT = Path(__file__).resolve().parents[2]
ARCH = ModelArch.from_config_path(REPO_ROOT / "scripts" / "benchmark" / "model_configs" / "qwen3-30b-a3b.json")


def make_record(**phases) -> StepRecord:
    return StepRecord(
        framework="verl",
        step=7,
        step_time_s=100.0,
        phases_s={"generate": 50.0, "old_logprob": 8.0, "ref_logprob": None, "train": 30.0, "weight_sync": 4.0,
                  "other": 8.0, **phases},
        tokens={"prompt": 4 * 300, "response": 1000 + 3000 + 5000 + 7000},
        samples=4,
    )  # fmt: skip


class TestDeriveStepFields:
    """The derived fields are the documented formulas of phases, tokens and the run context."""

    def test_exact_sequence_lengths_replace_the_mean_approximation(self):
        ctx = RunContext.build(arch=ARCH, num_train_gpus=16, num_rollout_gpus=8, device_name="NVIDIA B200")
        seq_lens = [1300, 3300, 5300, 7300]
        exact = derive_step_fields(make_record(), ctx, seq_lens=seq_lens)
        approx = derive_step_fields(make_record(), ctx)
        assert exact.train_tflops_per_gpu == pytest.approx(batch_train_flops(ARCH, seq_lens) / 30.0 / 16 / 1e12)
        assert exact.train_mfu == pytest.approx(exact.train_tflops_per_gpu / 2250.0)
        assert "seq_lens:uniform_mean" in approx.flags and "seq_lens:uniform_mean" not in exact.flags
        # Equal-length sequences underestimate sum(s^2), so the approximation is below the exact count.
        assert approx.train_tflops_per_gpu < exact.train_tflops_per_gpu

    def test_throughputs_and_wait_ratio(self):
        ctx = RunContext.build(arch=ARCH, num_train_gpus=16, num_rollout_gpus=8, peak_tflops=1000.0)
        record = derive_step_fields(make_record(), ctx)
        assert record.train_tokens_per_s == pytest.approx((1200 + 16000) / 30.0)
        assert record.rollout_tokens_per_gpu_s == pytest.approx(16000 / 50.0 / 8)
        assert record.wait_ratio == pytest.approx(1 - (8.0 + 30.0) / 100.0)  # ref not run: counts as 0

    def test_nonfinite_or_zero_inputs_give_null_never_inf(self):
        ctx = RunContext.build(arch=ARCH, num_train_gpus=16, peak_tflops=1000.0)
        record = derive_step_fields(make_record(train=0.0, generate=math.nan), ctx)
        assert record.train_tflops_per_gpu is None and record.train_mfu is None and record.train_tokens_per_s is None
        assert record.rollout_tokens_per_gpu_s is None
        assert "nonpositive_denominator:phases_s.train" in record.flags

    def test_without_an_architecture_tflops_are_null_and_say_why(self):
        record = derive_step_fields(make_record(), RunContext.build(arch=None, num_train_gpus=16))
        assert record.train_tflops_per_gpu is None and "tflops_unavailable:no model architecture" in record.flags
        assert record.train_tokens_per_s is not None


class TestRunContextPeak:
    """The MFU peak: an override wins, then a measured peak, then the table; unknown devices give None + reason."""

    def test_resolution_order(self):
        table = RunContext.build(arch=None, num_train_gpus=8, device_name="NVIDIA H20")
        assert (table.peak_tflops, table.peak_source) == (148.0, "table:H20")
        measured = RunContext.build(arch=None, num_train_gpus=8, device_name="NVIDIA H20", measured_peak_tflops=131.0)
        assert (measured.peak_tflops, measured.peak_source) == (131.0, "measured")
        override = RunContext.build(
            arch=None, num_train_gpus=8, device_name="NVIDIA H20", measured_peak_tflops=131.0, peak_tflops=150.0
        )
        assert (override.peak_tflops, override.peak_source) == (150.0, "override")

    def test_unknown_device_is_none_with_a_reason(self):
        ctx = RunContext.build(arch=None, num_train_gpus=8, device_name="Ascend 910B")
        assert ctx.peak_tflops is None and "'Ascend 910B' is not in the peak table" in ctx.peak_source
        assert ctx.num_rollout_gpus == 8  # colocated by default

    def test_invalid_numbers_are_rejected_with_the_field(self):
        with pytest.raises(ValueError, match="peak_tflops must be a finite number > 0, got inf"):
            RunContext.build(arch=None, num_train_gpus=8, peak_tflops=math.inf)
        with pytest.raises(ValueError, match="num_train_gpus must be > 0, got 0"):
            RunContext.build(arch=None, num_train_gpus=0)


class TestAtomicWrite:
    def test_concurrent_writers_of_one_file_never_tear_it_nor_collide(self, tmp_path: Path):
        """Two writers replacing one file (two harness threads saving one manifest) each get a tmp file of their own:
        no FileNotFoundError from a tmp the other renamed away, and the file always holds one whole text."""
        path, texts, errors = tmp_path / "manifest.json", ["a" * 200_000, "b" * 300_000], []

        def write_many(text: str) -> None:
            try:
                for _ in range(150):
                    write_text_atomic(path, text)
            except OSError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write_many, args=(text,)) for text in texts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert path.read_text() in texts
        assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no tmp file left behind

    def test_a_failed_write_leaves_the_old_file_and_no_tmp(self, tmp_path: Path):
        path = tmp_path / "report.json"
        path.write_text("whole")
        with pytest.raises(TypeError):
            write_bytes_atomic(path, None)  # type: ignore[arg-type]  # fails half-way, after the tmp file exists
        assert path.read_text() == "whole"
        assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
