"""`run.py ingest` and `run.py flops` as a user runs them (real subprocesses), and the MFU peak resolution."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.benchmark.test_miles_reader import miles_log_calls, write_event_log
from tests.benchmark.test_verl_reader import load_file_logger_class, write_verl_run

from miles.utils.bench_flops import ModelArch, forward_flops
from miles.utils.bench_metrics import read_records

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_PY = REPO_ROOT / "scripts" / "benchmark" / "run.py"
MODEL_CONFIGS = REPO_ROOT / "scripts" / "benchmark" / "model_configs"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUN_PY), *args], capture_output=True, text=True, timeout=120)


class TestFlopsCommand:
    """`flops --json` prints, per length, the FLOPs of one sequence from the one model."""

    def test_json_output_per_sequence_length(self):
        result = run_cli("flops", "--model", "qwen3-4b", "--seq-lens", "1024,4096", "--json")
        assert result.returncode == 0, result.stderr
        rows = json.loads(result.stdout)["per_sequence"]
        arch = ModelArch.from_config_path(MODEL_CONFIGS / "qwen3-4b.json")
        assert [r["seq_len"] for r in rows] == [1024, 4096]
        for row in rows:
            assert row["forward_flops"] == forward_flops(arch, row["seq_len"])
            assert row["train_flops"] == 3 * row["forward_flops"]
            assert row["miles_over_ours"] < 1 < row["verl_over_ours"]

    def test_a_config_json_path_works_like_a_name(self):
        by_path = run_cli("flops", "--model", str(MODEL_CONFIGS / "qwen3-0.6b.json"), "--seq-lens", "512", "--json")
        by_name = run_cli("flops", "--model", "qwen3-0.6b", "--seq-lens", "512", "--json")
        assert json.loads(by_path.stdout)["per_sequence"] == json.loads(by_name.stdout)["per_sequence"]

    def test_markdown_table_lists_every_model_and_length(self):
        result = run_cli("flops", "--model", "qwen3-1.7b-base,qwen3-30b-a3b", "--seq-lens", "1024,4096", "--markdown")
        assert result.returncode == 0, result.stderr
        rows = [line for line in result.stdout.splitlines() if line.startswith("| qwen3")]
        assert [row.split(" | ")[:2] for row in rows] == [
            ["| qwen3-1.7b-base", "1024"],
            ["| qwen3-1.7b-base", "4096"],
            ["| qwen3-30b-a3b", "1024"],
            ["| qwen3-30b-a3b", "4096"],
        ]
        # Qwen3-1.7B has heads*head_dim == hidden and no router: Miles's formula equals ours there.
        assert rows[0].split(" | ")[3] == "1.000"

    def test_bad_inputs_are_named(self, tmp_path):
        result = run_cli("flops", "--model", "qwen3-4b", "--seq-lens", "1024,abc")
        assert result.returncode != 0 and "--seq-lens" in result.stderr
        result = run_cli("flops", "--model", "no-such-model", "--seq-lens", "1024")
        assert result.returncode != 0 and "no-such-model" in result.stderr
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
        result = run_cli("flops", "--model", str(config), "--seq-lens", "1024")
        assert result.returncode != 0 and "'llama'" in result.stderr


class TestIngestCommand:
    """`ingest` writes one schema-v1 record per step from a real-shaped sink."""

    def test_ingest_a_miles_event_log_folder(self, tmp_path):
        folder = write_event_log(tmp_path / "events", miles_log_calls(range(3)))
        out = tmp_path / "metrics.jsonl"
        result = run_cli(
            "ingest", "--framework", "miles", "--model", "qwen3-4b", "--gpus", "8", "--device", "NVIDIA H200",
            str(folder), "-o", str(out),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        records = read_records(out)
        assert [r.step for r in records] == [1, 2, 3]
        assert records[0].train_mfu is not None and records[0].rollout_tokens_per_gpu_s > 0
        assert "wrote 3 records" in result.stdout and "miles_shift:no_next_step" in result.stderr

    def test_rollout_gpus_divide_the_rollout_throughput(self, tmp_path):
        folder = write_event_log(tmp_path / "events", miles_log_calls(range(2)))
        outs = {}
        for rollout_gpus in ("4", "8"):
            outs[rollout_gpus] = tmp_path / f"m{rollout_gpus}.jsonl"
            result = run_cli(
                "ingest", "--framework", "miles", "--model", "qwen3-4b", "--gpus", "4", "--rollout-gpus", rollout_gpus,
                str(folder), "-o", str(outs[rollout_gpus]),
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
        four, eight = read_records(outs["4"])[0], read_records(outs["8"])[0]
        assert four.rollout_tokens_per_gpu_s == pytest.approx(2 * eight.rollout_tokens_per_gpu_s)
        assert four.train_tflops_per_gpu == eight.train_tflops_per_gpu
        assert four.train_mfu is None and any(f.startswith("mfu_unavailable:") for f in four.flags)

    def test_ingest_a_killed_verl_run_written_by_the_real_file_logger(self, verl_root, tmp_path, monkeypatch):
        file_logger_class = load_file_logger_class(verl_root)
        sink = tmp_path / "sink" / "verl.jsonl"
        sink.parent.mkdir()
        write_verl_run(file_logger_class, sink, monkeypatch, range(1, 6), kill_mid_last_line=True)
        out = tmp_path / "metrics.jsonl"
        result = run_cli(
            "ingest", "--framework", "verl", "--model", str(MODEL_CONFIGS / "qwen3-0.6b.json"), "--gpus", "8",
            "--peak-tflops", "900", str(sink.parent), "-o", str(out),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        records = read_records(out)
        assert [r.step for r in records] == [1, 2, 3, 4, 5]
        assert records[1].train_mfu == pytest.approx(records[1].train_tflops_per_gpu / 900)
        assert any(f.startswith("truncated_last_line:") for f in records[-1].flags)

    def test_a_missing_source_fails_before_writing(self, tmp_path):
        out = tmp_path / "metrics.jsonl"
        result = run_cli(
            "ingest", "--framework", "verl", "--model", "qwen3-4b", "--gpus", "8", str(tmp_path / "nope.jsonl"),
            "-o", str(out),
        )  # fmt: skip
        assert result.returncode == 2 and "nope.jsonl: no such file" in result.stderr and not out.exists()
