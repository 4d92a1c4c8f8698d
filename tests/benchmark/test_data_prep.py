"""Miles jsonl -> VERL parquet: real parquet read back with pyarrow, Miles's row order, and the runnable CLI step."""

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from scripts.benchmark.frameworks.verl.data import (
    convert_jsonl_to_parquet,
    converted_paths,
    parse_converted_name,
    prepare_step,
)
from scripts.benchmark.spec import load_preset

REPO_ROOT = Path(__file__).resolve().parents[2]
ROWS = [
    {"prompt": "What is 1+1? Answer: $Answer", "label": "2"},
    {"prompt": "What is 2+3?", "label": 5},
    {"prompt": [{"role": "user", "content": "What is 3*3?"}], "label": "9", "metadata": {"rm_type": "math"}},
    {"prompt": "What is 10-4?", "label": "6"},
    {"prompt": "What is 7+7?", "label": "14"},
]


@pytest.fixture()
def jsonl(tmp_path) -> Path:
    path = tmp_path / "dapo-math-17k.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return path


class TestConversion:
    def test_rows_keep_miles_order_and_verl_schema(self, jsonl, tmp_path):
        report = convert_jsonl_to_parquet(
            source=jsonl,
            start=1,
            end=4,
            train_file=tmp_path / "t.parquet",
            val_file=tmp_path / "v.parquet",
            val_rows=2,
        )
        table = pq.read_table(tmp_path / "t.parquet")
        assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        rows = table.to_pylist()
        assert [r["extra_info"]["index"] for r in rows] == [1, 2, 3]
        assert rows[0]["prompt"] == [{"role": "user", "content": "What is 2+3?"}]
        assert rows[1]["prompt"] == [{"role": "user", "content": "What is 3*3?"}]
        assert [r["reward_model"]["ground_truth"] for r in rows] == ["5", "9", "6"]
        assert {r["data_source"] for r in rows} == {"math_dapo"}
        assert pq.read_table(tmp_path / "v.parquet").num_rows == 2
        assert (report.train_rows, report.val_rows, report.rows_with_rm_type) == (3, 2, 1)

    def test_a_slice_past_the_end_of_the_file_is_an_error(self, jsonl, tmp_path):
        with pytest.raises(ValueError, match=r"asked for rows \[2:9\) but the file has only 5 rows"):
            convert_jsonl_to_parquet(
                source=jsonl,
                start=2,
                end=9,
                train_file=tmp_path / "t.parquet",
                val_file=tmp_path / "v.parquet",
                val_rows=1,
            )

    def test_a_missing_label_is_an_error(self, jsonl, tmp_path):
        with pytest.raises(ValueError, match="row 0: missing 'prompt' or 'answer'"):
            convert_jsonl_to_parquet(
                source=jsonl,
                start=0,
                end=2,
                train_file=tmp_path / "t.parquet",
                val_file=tmp_path / "v.parquet",
                val_rows=1,
                label_key="answer",
            )

    def test_converted_name_carries_the_slice(self, tmp_path):
        train, val = converted_paths(load_preset("qwen3-1.7b-base"), tmp_path)
        assert Path(train).name == "dapo-math-17k.rows-0-3072.parquet" and val.endswith(".val.parquet")
        assert parse_converted_name(train) == ("dapo-math-17k.jsonl", 0, 3072)
        assert parse_converted_name(val) is None


class TestPrepareStep:
    def test_the_plan_prepare_argv_runs(self, jsonl, tmp_path):
        """The prepare step of a plan is a real command: run it as the runner would."""
        spec = load_preset("smoke").model_copy(
            update={"data": load_preset("smoke").data.model_copy(update={"prompt_data": str(jsonl), "end": 5})}
        )
        step = prepare_step(spec, tmp_path / "data", str(REPO_ROOT / "scripts" / "benchmark" / "run.py"))
        argv = [sys.executable] + step["argv"][1:]
        result = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "wrote 5 rows" in result.stdout and "1 rows carry metadata.rm_type" in result.stdout
        assert pq.read_table(step["creates"]).num_rows == 5 and step["skip_if_exists"] is True

    def test_cli_reports_a_bad_source_clearly(self, tmp_path):
        run_py = REPO_ROOT / "scripts" / "benchmark" / "run.py"
        argv = [sys.executable, str(run_py), "convert-data", "--source", str(tmp_path / "none.jsonl"), "--start", "0"]
        argv += ["--end", "2", "--train-file", str(tmp_path / "t.parquet"), "--val-file", str(tmp_path / "v.parquet")]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and "convert-data:" in result.stderr and "none.jsonl" in result.stderr
