"""The plan command: the README's dry-run works for every preset x backend x layout, writes the shared plan.json
contract, runnable cell scripts and the parity table; without --dry-run it stops and says what is missing."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scripts.benchmark.preflight import check_can_execute
from scripts.benchmark.run import build_app
from scripts.benchmark.spec import LAYOUTS, load_preset, preset_names

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_PY = REPO_ROOT / "scripts" / "benchmark" / "run.py"
CELL_KEYS = {"id", "framework", "backend", "layout", "argv", "launch_argv", "env", "sink", "gpus", "num_steps"}
CELL_KEYS |= {"model_config", "script"}


def _invoke(*args: str):
    return CliRunner().invoke(build_app(), list(args))


class TestReadmeCommand:
    def test_dry_run_through_run_py_subprocess(self, tmp_path, verl_root):
        """The README's command, as a newcomer runs it (a real subprocess, a real VERL compose)."""
        out = tmp_path / "out"
        env = {**os.environ, "VERL_ISOLATED_DIR": str(verl_root), "WANDB_API_KEY": "very-secret-value"}
        argv = [sys.executable, str(RUN_PY), "--backend", "all", "--compare-verl", "--preset", "qwen3-1.7b-base"]
        result = subprocess.run(
            argv + ["--output-dir", str(out), "--dry-run"], capture_output=True, text=True, env=env
        )
        assert result.returncode == 0, result.stderr
        assert "VERL strict compose: ok for 2 cell(s)" in result.stdout and "0 mismatches" in result.stdout
        plan = json.loads((out / "plan.json").read_text())
        assert plan["schema_version"] == 1 and plan["preset"] == "qwen3-1.7b-base" and len(plan["spec_hash"]) == 12
        assert [c["id"] for c in plan["cells"]] == [
            "miles-fsdp-colocate",
            "verl-fsdp-colocate",
            "miles-megatron-colocate",
            "verl-megatron-colocate",
        ]
        for cell in plan["cells"]:
            assert CELL_KEYS <= set(cell) and cell["gpus"]["total"] == 8
        assert plan["prepare"][0]["name"] == "convert-data" and plan["prepare"][0]["skip_if_exists"] is True
        assert "very-secret-value" not in (out / "plan.json").read_text()
        assert "0 mismatches" in (out / "parity.md").read_text()
        assert json.loads((out / "parity.json").read_text())["spec_hash"] == plan["spec_hash"]

    def test_cell_scripts_are_valid_bash_and_define_the_cell_dir(self, tmp_path):
        result = _invoke("--compare-verl", "--preset", "smoke", "--output-dir", str(tmp_path), "--dry-run")
        assert result.exit_code == 0, result.output
        for script in (tmp_path / "cells").glob("*.sh"):
            text = script.read_text()
            assert os.access(script, os.X_OK) and "set -euo pipefail" in text and "BENCH_CELL_DIR=" in text
            assert "pkill" not in text
            assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0

    def test_help_stays_light(self):
        """Heavy imports happen inside command bodies."""
        code = "import sys; from scripts.benchmark.run import build_app; build_app(); "
        code += "print(sorted(m for m in ('hydra', 'pyarrow', 'torch', 'omegaconf') if m in sys.modules))"
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT)
        assert result.stdout.strip() == "[]", result.stderr


class TestEveryCell:
    @pytest.mark.parametrize("preset", preset_names())
    @pytest.mark.parametrize("layout", LAYOUTS)
    @pytest.mark.parametrize("backend,compare", [("all", True), ("fsdp", False), ("megatron", False)])
    def test_dry_run(self, tmp_path, monkeypatch, preset, layout, backend, compare):
        """Composition of every VERL cell is test_verl_launch's job; here it is switched off to keep CI fast."""
        monkeypatch.setenv("VERL_ISOLATED_DIR", str(tmp_path / "no-verl-here"))
        args = ["--backend", backend, "--preset", preset, "--layout", layout, "--output-dir", str(tmp_path)]
        result = _invoke(*args, "--dry-run", *(["--compare-verl"] if compare else []))
        assert result.exit_code == 0, result.output
        plan = json.loads((tmp_path / "plan.json").read_text())
        frameworks = {"miles", "verl"} if compare else {"miles"}
        assert {c["framework"] for c in plan["cells"]} == frameworks
        assert {c["layout"] for c in plan["cells"]} == {layout}
        assert bool(plan["prepare"]) == compare
        spec = load_preset(preset)
        expected_total = spec.total_gpus(layout)
        assert {c["gpus"]["total"] for c in plan["cells"]} == {expected_total}
        if compare:
            assert "VERL strict compose: skipped (no VERL 0.9.1 config found in" in result.output


class TestErrors:
    def test_without_dry_run_it_stops_and_names_what_is_missing(self, tmp_path):
        result = _invoke("--preset", "smoke", "--compare-verl", "--output-dir", str(tmp_path))
        assert result.exit_code == 4
        assert "cannot execute the plan on this machine" in result.output
        assert "nvidia-smi" in result.output and "train.py" in result.output
        assert (tmp_path / "plan.json").is_file()

    def test_preflight_lists_each_missing_piece(self, tmp_path):
        _invoke("--preset", "smoke", "--compare-verl", "--output-dir", str(tmp_path), "--dry-run")
        missing = check_can_execute(json.loads((tmp_path / "plan.json").read_text()))
        joined = "\n".join(missing)
        assert "nvidia-smi" in joined and "/root/miles/train.py" in joined and "verl is not importable" in joined
        assert "model.hf_checkpoint /root/models/Qwen3-0.6B does not exist" in joined

    def test_invalid_override_names_the_field_and_numbers(self, tmp_path):
        result = _invoke(
            "--preset", "qwen3-1.7b-base", "--gpus-per-node", "6", "--output-dir", str(tmp_path), "--dry-run"
        )
        assert result.exit_code == 2
        assert (
            "fsdp: batch.samples_per_optimizer_step=1024 is not divisible by the data-parallel size 6" in result.output
        )
        assert (
            "megatron: batch.samples_per_optimizer_step=1024 is not divisible by the data-parallel size 3"
            in result.output
        )
        assert "input_value" not in result.output

    def test_preset_and_spec_are_exclusive(self, tmp_path):
        result = _invoke("--preset", "smoke", "--spec", "x.yaml", "--output-dir", str(tmp_path), "--dry-run")
        assert result.exit_code == 2 and "exactly one of --preset" in result.output

    def test_a_spec_file(self, tmp_path):
        import yaml

        raw = load_preset("smoke").model_dump()
        raw["name"], raw["run"]["num_steps"] = "my-smoke", 3
        path = tmp_path / "mine.yaml"
        path.write_text(yaml.safe_dump(raw))
        result = _invoke("--spec", str(path), "--output-dir", str(tmp_path / "o"), "--dry-run")
        assert result.exit_code == 0, result.output
        plan = json.loads((tmp_path / "o" / "plan.json").read_text())
        assert plan["preset"] is None and plan["spec"]["name"] == "my-smoke" and plan["cells"][0]["num_steps"] == 3

    def test_output_dir_is_required(self):
        result = _invoke("--preset", "smoke", "--dry-run")
        assert result.exit_code == 2 and "--output-dir is required" in result.output
