"""The plan command: the README's dry-run works for every preset x backend x layout, writes the shared plan.json
contract, runnable cell scripts and the parity table; without --dry-run it stops and says what is missing."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from scripts.benchmark.run import build_app
from scripts.benchmark.runner.preflight import check_can_execute
from scripts.benchmark.spec import LAYOUTS, load_preset, preset_names
from typer.testing import CliRunner

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
        assert [step["name"] for step in plan["prepare"]] == ["download-model", "download-dataset", "convert-data"]
        assert all(step["skip_if_exists"] is True for step in plan["prepare"])
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


@pytest.fixture(scope="module")
def verl_beside(tmp_path_factory, verl_root) -> Path:
    """A venv whose site-packages path holds the real VERL 0.9.1 wheel, then the test venv's packages: VERL's wheel
    installs top-level `scripts` and `tests` packages, as on a GPU node where VERL is installed in python3."""
    venv = tmp_path_factory.mktemp("verl-beside") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"

    def ask(interpreter, code: str) -> str:
        return subprocess.run([interpreter, "-c", code], capture_output=True, text=True, cwd="/").stdout.strip()

    site = Path(ask(python, "import site; print(site.getsitepackages()[0])"))
    (site / "aa_verl.pth").write_text(f"{verl_root}\n")
    ours = [p for p in sys.path if p.endswith("site-packages")]  # this interpreter's, layered venvs included
    (site / "zz_test_venv.pth").write_text("".join(f"{p}\n" for p in ours))
    assert ask(python, "import scripts; print(scripts.__file__)") == str(verl_root / "scripts" / "__init__.py")
    return python


class TestVerlInstalledBeside:
    """The harness starts in a Python where VERL is installed: its regular `scripts` package would otherwise hide
    this checkout's namespace package `scripts`."""

    def test_the_main_command_plans(self, verl_beside, tmp_path, verl_root):
        out = tmp_path / "out"
        argv = [verl_beside, RUN_PY, "--backend", "fsdp", "--compare-verl", "--preset", "smoke", "--output-dir", out]
        env = {**os.environ, "VERL_ISOLATED_DIR": str(verl_root)}
        result = subprocess.run([*argv, "--dry-run"], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        assert "VERL strict compose: ok" in result.stdout and (out / "plan.json").is_file()

    def test_a_cell_scripts_prepare_line_and_calibrate_start(self, verl_beside, tmp_path):
        """convert-data is the prepare line a VERL cell script runs with the node's python3."""
        argv = [verl_beside, RUN_PY, "convert-data", "--source", tmp_path / "none.jsonl", "--start", "0", "--end", "2"]
        argv += ["--train-file", tmp_path / "t.parquet", "--val-file", tmp_path / "v.parquet"]
        result = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 2 and "none.jsonl" in result.stderr and "Traceback" not in result.stderr
        calibrate = RUN_PY.parent / "calibrate.py"
        result = subprocess.run([verl_beside, calibrate, "--help"], capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 0 and "--output-dir" in result.stdout, result.stderr


class TestWandb:
    def test_wandb_switch_turns_on_tracking_in_both_launches_without_the_key(self, tmp_path, verl_root):
        """--wandb: Miles gets the wandb flags (no --wandb-key), VERL the wandb logger; parity matches; sinks stay."""
        env = {**os.environ, "VERL_ISOLATED_DIR": str(verl_root), "WANDB_API_KEY": "wandb-secret-value-42"}
        base = [sys.executable, str(RUN_PY), "--backend", "all", "--compare-verl", "--preset", "qwen3-1.7b-base"]
        plans = {}
        for name, extra in (("off", []), ("on", ["--wandb"])):
            argv = base + ["--output-dir", str(tmp_path / name), "--dry-run", *extra]
            result = subprocess.run(argv, capture_output=True, text=True, env=env)
            assert result.returncode == 0, result.stderr
            assert "VERL strict compose: ok for 2 cell(s)" in result.stdout and "0 mismatches" in result.stdout
            plans[name] = json.loads((tmp_path / name / "plan.json").read_text())
        on, off = plans["on"], plans["off"]
        assert on["spec"]["tracking"] == {"wandb": True, "wandb_project": "miles-bench"}
        assert off["spec"]["tracking"]["wandb"] is False and on["spec_hash"] != off["spec_hash"]
        for cell_on, cell_off in zip(on["cells"], off["cells"], strict=True):
            added = cell_on["argv"][len(cell_off["argv"]) :]
            if cell_on["framework"] == "miles":
                assert cell_on["argv"][: len(cell_off["argv"])] == cell_off["argv"]
                assert added == [
                    "--use-wandb", "--wandb-project", "miles-bench", "--wandb-group", cell_on["id"],
                    "--disable-wandb-random-suffix",
                ]  # fmt: skip
                assert not any("--wandb-key" in word for word in cell_on["launch_argv"])
            else:
                words = [
                    {w.replace(str(tmp_path / n), "DIR") for w in c["argv"]}
                    for n, c in (("on", cell_on), ("off", cell_off))
                ]
                changed = sorted(words[0] ^ words[1])
                assert changed == ["trainer.logger=[console,file,wandb]", "trainer.logger=[console,file]"]
                assert f"trainer.experiment_name={cell_on['id']}" in cell_on["argv"]
                assert "trainer.project_name=miles-bench" in cell_on["argv"]
            assert cell_on["sink"] == cell_off["sink"] and cell_on["env"] == cell_off["env"]
        for name, expected in (("on", "wandb (project miles-bench)"), ("off", "off")):
            for pair in json.loads((tmp_path / name / "parity.json").read_text())["pairs"]:
                row = next(r for r in pair["rows"] if r["knob"] == "tracking")
                assert (row["candidate"], row["reference"], row["status"]) == (expected, expected, "matched")
                assert ("network logger" in row["note"]) == (name == "on")
        assert "wandb-secret-value-42" not in (tmp_path / "on" / "plan.json").read_text()


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
        names = ["download-model", "download-dataset"] + (["convert-data"] if compare else [])
        assert [step["name"] for step in plan["prepare"]] == names
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

    def test_preflight_lists_each_missing_piece(self, tmp_path, monkeypatch):
        _invoke("--preset", "smoke", "--compare-verl", "--output-dir", str(tmp_path), "--dry-run")
        plan = json.loads((tmp_path / "plan.json").read_text())
        monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
        joined = "\n".join(check_can_execute(plan))
        assert "nvidia-smi" in joined and "/root/miles/train.py" in joined and "verl is not importable" in joined
        assert "model.hf_checkpoint /root/models/Qwen3-0.6B does not exist and 'hf'" in joined
        assert "data.prompt_data /root/datasets/dapo-math-17k/dapo-math-17k.jsonl does not exist and 'hf'" in joined
        without_downloads = {**plan, "prepare": [s for s in plan["prepare"] if s["name"] == "convert-data"]}
        joined = "\n".join(check_can_execute(without_downloads))
        assert "model.hf_checkpoint /root/models/Qwen3-0.6B does not exist (and the spec names no hf_repo" in joined

    def test_preflight_accepts_a_missing_model_the_plan_downloads(self, tmp_path, monkeypatch):
        """With the hf CLI on PATH, a missing checkpoint or dataset is the download step's job, not an error."""
        _invoke("--preset", "smoke", "--output-dir", str(tmp_path), "--dry-run")
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "hf").write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "hf").chmod(0o755)
        monkeypatch.setenv("PATH", str(bin_dir))
        joined = "\n".join(check_can_execute(json.loads((tmp_path / "plan.json").read_text())))
        assert "nvidia-smi" in joined and "hf_checkpoint" not in joined and "prompt_data" not in joined

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

    def test_a_spec_holding_a_secret_variables_value_is_refused_and_nothing_written(self, tmp_path):
        """A dry run refuses what execute would refuse: the value of $HF_TOKEN in the spec never reaches plan.json."""
        import yaml

        raw = load_preset("smoke").model_dump()
        raw["name"] = "hf_sekrit_value_0123"
        path = tmp_path / "mine.yaml"
        path.write_text(yaml.safe_dump(raw))
        env = {**os.environ, "HF_TOKEN": "hf_sekrit_value_0123"}
        argv = [sys.executable, str(RUN_PY), "--spec", str(path), "--output-dir", str(tmp_path / "o"), "--dry-run"]
        result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "Traceback" not in result.stderr and "hf_sekrit_value_0123" not in result.stdout + result.stderr
        assert "spec.name (the value of a secret environment variable)" in result.stderr
        assert not (tmp_path / "o" / "plan.json").exists()

    def test_output_dir_is_required(self):
        result = _invoke("--preset", "smoke", "--dry-run")
        assert result.exit_code == 2 and "--output-dir is required" in result.output


class TestPrepareSteps:
    def _plan(self, tmp_path, *extra):
        result = _invoke("--preset", "smoke", "--backend", "fsdp", "--output-dir", str(tmp_path), "--dry-run", *extra)
        assert result.exit_code == 0, result.output
        return json.loads((tmp_path / "plan.json").read_text())

    def test_downloads_then_conversion_each_skippable(self, tmp_path, monkeypatch):
        monkeypatch.setenv("VERL_ISOLATED_DIR", str(tmp_path / "no-verl-here"))
        model, data, convert = self._plan(tmp_path, "--compare-verl")["prepare"]
        assert model["argv"] == ["hf", "download", "Qwen/Qwen3-0.6B", "--local-dir", "/root/models/Qwen3-0.6B"]
        assert model["creates"] == "/root/models/Qwen3-0.6B/config.json"
        assert data["argv"] == [
            "hf",
            "download",
            "--repo-type",
            "dataset",
            "zhuzilin/dapo-math-17k",
            "--local-dir",
            "/root/datasets/dapo-math-17k",
        ]
        assert data["creates"] == "/root/datasets/dapo-math-17k/dapo-math-17k.jsonl"
        assert convert["argv"][convert["argv"].index("--source") + 1] == data["creates"]
        assert [s["needed_by"] for s in (model, data, convert)] == [["miles", "verl"], ["miles", "verl"], ["verl"]]
        assert all(s["skip_if_exists"] is True for s in (model, data, convert))

    def test_miles_only_plans_download_but_do_not_convert(self, tmp_path):
        plan = self._plan(tmp_path)
        assert [s["name"] for s in plan["prepare"]] == ["download-model", "download-dataset"]
        script = (tmp_path / "cells" / "miles-fsdp-colocate.sh").read_text()
        assert "hf download Qwen/Qwen3-0.6B" in script and "convert-data" not in script

    def test_each_cell_script_runs_the_steps_its_framework_needs_in_plan_order(self, tmp_path, monkeypatch):
        monkeypatch.setenv("VERL_ISOLATED_DIR", str(tmp_path / "no-verl-here"))
        plan = self._plan(tmp_path, "--compare-verl")
        for cell in plan["cells"]:
            script = (tmp_path / cell["script"]).read_text()
            guarded = [s for s in plan["prepare"] if f"if [ ! -e {shlex.quote(s['creates'])} ]" in script]
            expected = [s for s in plan["prepare"] if cell["framework"] in s["needed_by"]]
            assert guarded == expected
            positions = [script.index(shlex.join(s["argv"][:3])) for s in expected]
            environment = script.index(f"export {sorted(cell['env'])[0]}=")  # the cell's env, then its launch
            assert positions == sorted(positions) and positions[-1] < environment


def test_preflight_counts_gpus_as_the_environment_record_does(tmp_path, monkeypatch):
    """With the nvidia-smi stand-in (two H200s) on PATH: enough for smoke, not for an 8-GPU preset."""
    monkeypatch.setenv("PATH", f"{REPO_ROOT / 'tests' / 'benchmark' / 'standins'}:{os.environ['PATH']}")
    for preset, expected in (
        ("smoke", None),
        ("qwen3-1.7b-base", "the plan needs 8 GPUs per cell, nvidia-smi lists 2"),
    ):
        result = _invoke("--preset", preset, "--output-dir", str(tmp_path / preset), "--dry-run")
        assert result.exit_code == 0, result.output
        missing = check_can_execute(json.loads((tmp_path / preset / "plan.json").read_text()))
        gpu_lines = [line for line in missing if "GPU" in line or "nvidia-smi" in line]
        assert gpu_lines == ([expected] if expected else [])


def test_skip_prepare_on_the_main_command_names_what_will_not_be_downloaded(tmp_path):
    result = _invoke("--preset", "smoke", "--output-dir", str(tmp_path), "--skip-prepare")
    assert result.exit_code == 4
    assert "model.hf_checkpoint /root/models/Qwen3-0.6B does not exist (and --skip-prepare skips its download)" in (
        result.output
    )


class TestSides:
    """--candidate / --reference name the two sides; --compare-verl is the reference VERL; today's plans carry
    their sides (candidate Miles, reference VERL) with unchanged cell ids."""

    def test_compare_verl_and_reference_verl_plan_the_same(self, tmp_path, monkeypatch):
        monkeypatch.setenv("VERL_ISOLATED_DIR", str(tmp_path / "no-verl-here"))
        base = ["--preset", "smoke", "--backend", "fsdp", "--dry-run"]
        sugar = _invoke(*base, "--output-dir", str(tmp_path / "a"), "--compare-verl")
        named = _invoke(*base, "--output-dir", str(tmp_path / "b"), "--reference", "verl")
        assert sugar.exit_code == 0 and named.exit_code == 0, sugar.output + named.output
        plans = [json.loads((tmp_path / n / "plan.json").read_text()) for n in ("a", "b")]
        assert plans[0]["sides"] == plans[1]["sides"]
        assert [(s["role"], s["name"], s["label"]) for s in plans[0]["sides"]] == [
            ("candidate", "miles", "Miles"),
            ("reference", "verl", "VERL"),
        ]
        assert [(c["id"], c["side"]) for c in plans[0]["cells"]] == [
            ("miles-fsdp-colocate", "miles"),
            ("verl-fsdp-colocate", "verl"),
        ]
        texts = [(tmp_path / n / "parity.md").read_text().replace(str(tmp_path / n), "DIR") for n in ("a", "b")]
        assert texts[0] == texts[1]

    @pytest.mark.parametrize(
        "extra,message",
        [
            (["--reference", "nope"], "unknown framework 'nope'"),
            (["--candidate", "miles@9.9"], "unknown Miles target '9.9'"),
            (["--reference", "miles"], "both sides run Miles 31f1ca9"),
            (["--compare-verl", "--reference", "verl"], "give either --compare-verl or --reference"),
        ],
    )
    def test_bad_sides_exit_2_naming_the_problem(self, tmp_path, extra, message):
        result = _invoke("--preset", "smoke", "--output-dir", str(tmp_path / "o"), "--dry-run", *extra)
        assert result.exit_code == 2 and message in result.output, result.output

    def test_miles_wandb_group_is_the_cell_id_on_both_sides_of_miles(self, tmp_path):
        result = _invoke(
            "--preset", "smoke", "--backend", "megatron", "--output-dir", str(tmp_path / "o"), "--dry-run", "--wandb",
            "--candidate", "miles", "--reference", "miles@0.0.2",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        for cell in json.loads((tmp_path / "o" / "plan.json").read_text())["cells"]:
            assert cell["argv"][cell["argv"].index("--wandb-group") + 1] == cell["id"]
