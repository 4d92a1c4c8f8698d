"""The learning run (`run.py --learning-run`): the spec's steps raised to the learning guard's 200 with the batch kept,
recorded in plan.json and the spec hash (never a throughput run's history series), its GPU cost in the plan summary,
bad values refused naming the option; the report's learning section says when a run is too short for the guard."""

import json

import pytest
from scripts.benchmark.report import learning as report_learning
from scripts.benchmark.report.learning import too_short_note
from scripts.benchmark.run import build_app
from scripts.benchmark.spec import LEARNING_RUN_STEPS, load_preset, spec_hash, with_overrides
from tests.benchmark.test_learning import learning_run
from typer.testing import CliRunner

PRESET = "qwen3-4b"


def _plan(tmp_path, monkeypatch, *extra: str):
    """A dry run of both frameworks' cells (VERL's strict compose switched off, as test_plan_cli.py does)."""
    monkeypatch.setenv("VERL_ISOLATED_DIR", str(tmp_path / "no-verl-here"))
    out = tmp_path / ("learning" if "--learning-run" in extra else "throughput")
    args = ["--backend", "all", "--compare-verl", "--preset", PRESET, "--output-dir", str(out), "--dry-run", *extra]
    result = CliRunner().invoke(build_app(), args)
    plan = json.loads((out / "plan.json").read_text()) if result.exit_code == 0 else None
    return result, plan


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


class TestLearningRunPlan:
    def test_both_frameworks_cells_run_200_steps_of_the_same_batch(self, tmp_path, monkeypatch):
        result, plan = _plan(tmp_path, monkeypatch, "--learning-run")
        assert result.exit_code == 0, result.output
        spec = load_preset(PRESET)
        assert {c["framework"] for c in plan["cells"]} == {"miles", "verl"}
        assert {c["num_steps"] for c in plan["cells"]} == {LEARNING_RUN_STEPS}
        assert plan["spec"]["run"]["mode"] == "learning" and plan["spec"]["run"]["num_steps"] == 200
        assert plan["spec"]["batch"] == spec.model_dump(mode="json")["batch"]
        assert plan["spec"]["data"]["end"] == spec.data.start + 200 * spec.batch.prompts_per_step
        for cell in plan["cells"]:
            if cell["framework"] == "miles":
                assert _flag(cell["argv"], "--num-rollout") == "200"
                assert _flag(cell["argv"], "--rollout-batch-size") == str(spec.batch.prompts_per_step)
            else:
                assert "trainer.total_training_steps=200" in cell["argv"]
                assert f"data.train_batch_size={spec.batch.prompts_per_step}" in cell["argv"]

    def test_the_hash_differs_from_the_throughput_plan_and_from_the_same_steps_without_the_mode(
        self, tmp_path, monkeypatch
    ):
        _, learning = _plan(tmp_path, monkeypatch, "--learning-run")
        _, throughput = _plan(tmp_path, monkeypatch)
        assert learning["spec_hash"] != throughput["spec_hash"]
        assert "mode" not in throughput["spec"]["run"]  # the default path writes what it wrote before
        spec = load_preset(PRESET)
        data = spec.model_dump()  # the same steps and slice as the learning run, in throughput mode
        data["run"]["num_steps"], data["data"]["end"] = 200, learning["spec"]["data"]["end"]
        assert learning["spec_hash"] != spec_hash(type(spec).model_validate(data))
        assert learning["spec_hash"] == spec_hash(with_overrides(spec, learning_run=True))
        assert throughput["spec_hash"] == spec_hash(spec)

    def test_the_summary_prints_the_cost_of_200_steps_and_what_the_run_is(self, tmp_path, monkeypatch):
        result, plan = _plan(tmp_path, monkeypatch, "--learning-run")
        assert "learning run: 200 steps of the same batch" in result.output
        assert all(
            f"cost {c['id']}: start-up" in result.output and "200 steps x" in result.output for c in plan["cells"]
        )
        assert "cost, 3 repeat(s): node wall time" in result.output  # 3 repeats when comparing
        assert {c["steps"] for c in plan["cost"]["cells"].values()} == {200}
        throughput, _ = _plan(tmp_path, monkeypatch)
        assert "learning run:" not in throughput.output

    def test_more_steps_than_200_are_kept(self, tmp_path, monkeypatch):
        result, plan = _plan(tmp_path, monkeypatch, "--learning-run", "--num-steps", "240")
        assert result.exit_code == 0, result.output
        assert {c["num_steps"] for c in plan["cells"]} == {240}


class TestBadValues:
    def test_too_few_steps_exit_2_naming_the_option(self, tmp_path, monkeypatch):
        result, _ = _plan(tmp_path, monkeypatch, "--learning-run", "--num-steps", "24")
        assert result.exit_code == 2
        assert "--num-steps 24 with --learning-run" in result.output and ">= 200" in result.output

    def test_a_spec_file_in_learning_mode_with_too_few_steps_names_the_field(self, tmp_path, monkeypatch):
        import yaml

        raw = load_preset("smoke").model_dump()
        raw["run"]["mode"] = "learning"
        path = tmp_path / "short.yaml"
        path.write_text(yaml.safe_dump(raw))
        args = ["--spec", str(path), "--output-dir", str(tmp_path / "o"), "--dry-run"]
        result = CliRunner().invoke(build_app(), args)
        assert result.exit_code == 2 and "run.num_steps=24 is too few for run.mode learning" in result.output

    def test_an_unknown_mode_names_the_field(self, tmp_path):
        raw = load_preset("smoke").model_dump()
        raw["run"]["mode"] = "speed"
        with pytest.raises(ValueError, match="run.mode"):
            type(load_preset("smoke")).model_validate(raw)


class TestReportSaysTooShort:
    def test_a_short_run_is_called_too_short_and_the_learning_run_command_is_named(self, tmp_path):
        run_dir, doc, _ = learning_run(tmp_path)
        note = too_short_note(doc)
        assert note is not None and "too short for the learning guard" in note and "--learning-run" in note
        assert "--backend fsdp --candidate miles" in note and "--reference verl" in note
        assert "--preset" in note and "--layout colocate" in note
        section = (run_dir / "report.md").read_text().split("## Do both learn the same?", 1)[1]
        assert "--learning-run" in section

    def test_a_run_as_long_as_a_learning_run_has_no_note(self, tmp_path, monkeypatch):
        _, doc, _ = learning_run(tmp_path)
        last = max(s for series in doc.learning[0].series.values() for s in series.candidate.steps)
        monkeypatch.setattr(report_learning, "LEARNING_RUN_STEPS", last)
        assert too_short_note(doc) is None
