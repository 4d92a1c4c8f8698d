"""The benchmark spec: presets load, and every class of unrunnable spec is rejected with the field and the numbers."""

import copy

import pytest
import yaml
from pydantic import ValidationError

from scripts.benchmark.spec import (
    BACKENDS,
    LAYOUTS,
    BenchmarkSpec,
    load_preset,
    load_spec_file,
    preset_names,
    spec_hash,
    spec_json,
    steady_state_warnings,
    with_overrides,
)


def _raw(name: str = "qwen3-1.7b-base") -> dict:
    return load_preset(name).model_dump()


def _error(raw: dict) -> str:
    with pytest.raises(ValidationError) as info:
        BenchmarkSpec.model_validate(raw)
    return str(info.value)


class TestPresets:
    def test_the_four_presets_ship(self):
        """The issue names exactly these presets."""
        assert preset_names() == ["qwen3-1.7b-base", "qwen3-30b-a3b", "qwen3-4b", "smoke"]

    @pytest.mark.parametrize("name", ["qwen3-1.7b-base", "qwen3-30b-a3b", "qwen3-4b", "smoke"])
    def test_each_preset_is_valid_for_both_backends_and_both_layouts(self, name):
        """A preset must plan every backend x layout cell."""
        spec = load_preset(name)
        for layout in LAYOUTS:
            relaid = with_overrides(spec, layout=layout)
            for backend in BACKENDS:
                assert relaid.data_parallel_size(backend) >= 1

    def test_slime_1072_geometry(self):
        """qwen3-1.7b-base is the slime#1072 setup: 8 GPUs, 128 x 32, 8k response, Megatron TP=2."""
        spec = load_preset("qwen3-1.7b-base")
        assert (spec.batch.prompts_per_step, spec.batch.samples_per_prompt) == (128, 32)
        assert spec.lengths.max_response == 8192 and spec.megatron.tp == 2 and spec.total_gpus() == 8
        assert spec.architecture() == "qwen3"

    def test_moe_preset_uses_expert_parallel_and_fsdp_offload(self):
        spec = load_preset("qwen3-30b-a3b")
        assert spec.architecture() == "qwen3_moe" and spec.megatron.ep > 1 and spec.fsdp.cpu_offload

    def test_smoke_runs_on_one_gpu(self):
        spec = load_preset("smoke")
        assert spec.total_gpus("colocate") == 1 and spec.model.hf_config()["hidden_size"] == 1024

    def test_unknown_preset_names_the_known_ones(self):
        with pytest.raises(ValueError, match="no preset named 'nope'.*smoke"):
            load_preset("nope")


class TestSpecHash:
    def test_hash_is_12_hex_and_stable(self):
        a, b = load_preset("smoke"), load_preset("smoke")
        assert spec_hash(a) == spec_hash(b) and len(spec_hash(a)) == 12
        int(spec_hash(a), 16)

    def test_hash_changes_with_any_pinned_value(self):
        spec = load_preset("smoke")
        assert spec_hash(with_overrides(spec, num_steps=5)) != spec_hash(spec)

    def test_inline_config_equal_to_named_config_hashes_the_same(self):
        """The hash covers the architecture facts, not the name they were looked up by."""
        spec = load_preset("smoke")
        raw = spec.model_dump()
        raw["model"]["config"] = spec.model.hf_config()
        assert spec_hash(BenchmarkSpec.model_validate(raw)) == spec_hash(spec)
        assert spec_json(spec)["model"]["config"]["model_type"] == "qwen3"


class TestSpecFile:
    def test_a_maintainer_spec_file_loads(self, tmp_path):
        raw = _raw("smoke")
        raw["name"] = "mine"
        path = tmp_path / "mine.yaml"
        path.write_text(yaml.safe_dump(raw))
        assert load_spec_file(path).name == "mine"

    def test_an_unknown_key_is_rejected(self, tmp_path):
        """extra="forbid": a typo must not silently fall back to a default."""
        raw = _raw("smoke")
        raw["batch"]["prompt_per_step"] = 4
        path = tmp_path / "typo.yaml"
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(ValidationError, match="prompt_per_step"):
            load_spec_file(path)

    def test_spec_is_frozen(self):
        spec = load_preset("smoke")
        with pytest.raises(ValidationError):
            spec.run.num_steps = 3


class TestValidation:
    def test_optimizer_batch_not_divisible_by_fsdp_dp(self):
        raw = _raw()
        raw["batch"]["samples_per_optimizer_step"] = 32 * 3  # 96 does not divide 4096
        assert "batch.samples_per_optimizer_step=96 does not divide the samples per step 4096" in _error(raw)

    def test_optimizer_batch_not_divisible_by_megatron_dp(self):
        raw = _raw("smoke")
        raw["run"]["gpus_per_node"] = 3
        raw["rollout"]["gpus_per_engine"] = 1
        msg = _error(raw)
        assert "fsdp: batch.samples_per_optimizer_step=16 is not divisible by the data-parallel size 3" in msg

    def test_parallel_sizes_must_divide_the_gpus(self):
        raw = _raw()
        raw["megatron"]["tp"] = 3
        msg = _error(raw)
        assert "tp 3 x pp 1 x cp 1 = 3 does not divide the 8 train GPUs" in msg

    def test_expert_parallel_must_divide_the_gpus(self):
        raw = _raw("qwen3-30b-a3b")
        raw["megatron"]["ep"] = 8  # 8 does not fit the 4-GPU train side of the disaggregated split
        assert "ep 8 x etp 1 x pp 1 does not divide the 4 GPUs [disaggregated: 4 train GPUs]" in _error(raw)

    def test_expert_parallel_on_a_dense_model(self):
        raw = _raw()
        raw["megatron"]["ep"] = 2
        assert "megatron.ep=2 does not divide num_experts=0" in _error(raw)

    def test_disaggregated_split_without_rollout_gpus(self):
        raw = _raw()
        raw["placement"]["disaggregated"] = {"train_gpus": 8, "rollout_gpus": 0}
        assert "train_gpus=8, rollout_gpus=0 leaves no rollout GPUs" in _error(raw)

    def test_disaggregated_split_without_train_gpus(self):
        raw = _raw()
        raw["placement"]["disaggregated"] = {"train_gpus": 0, "rollout_gpus": 8}
        assert "leaves no training GPUs" in _error(raw)

    def test_disaggregated_layout_without_a_split(self):
        raw = _raw()
        raw["placement"] = {"layout": "disaggregated", "disaggregated": None}
        assert "no train_gpus/rollout_gpus split" in _error(raw)

    def test_token_budget_shorter_than_the_longest_sequence(self):
        raw = _raw()
        raw["megatron"]["max_tokens_per_gpu"] = 8192
        msg = _error(raw)
        assert "megatron: token budget max_tokens_per_gpu=8192 x cp 1 = 8192" in msg
        assert "lengths.max_prompt 1024 + lengths.max_response 8192 = 9216" in msg

    def test_unknown_architecture(self):
        raw = _raw()
        raw["model"]["config"] = {**load_preset("qwen3-1.7b-base").model.hf_config(), "model_type": "llama"}
        assert "unknown architecture model_type='llama'" in _error(raw)

    def test_unknown_model_config_name(self):
        raw = _raw()
        raw["model"]["config"] = "qwen9"
        assert "no model config named 'qwen9'" in _error(raw)

    def test_rollout_engine_must_divide_rollout_gpus(self):
        raw = _raw()
        raw["rollout"]["gpus_per_engine"] = 3
        assert "rollout.gpus_per_engine=3 does not divide the 8 rollout GPUs [colocate]" in _error(raw)

    def test_prompt_slice_shorter_than_the_run(self):
        raw = _raw()
        raw["data"]["end"] = 1000
        assert "has 1000 prompts, fewer than run.num_steps 24 x batch.prompts_per_step 128 = 3072" in _error(raw)

    def test_optimizer_batch_must_be_whole_prompts(self):
        raw = _raw()
        raw["batch"]["samples_per_optimizer_step"] = 1024 + 16
        msg = _error(raw)
        assert "is not a whole number of prompts (samples_per_prompt 32)" in msg

    def test_tp_must_divide_attention_heads(self):
        raw = copy.deepcopy(_raw("qwen3-30b-a3b"))
        raw["megatron"]["tp"] = 8
        raw["placement"]["disaggregated"] = {"train_gpus": 8, "rollout_gpus": 8}
        assert "megatron.tp=8 does not divide the attention heads 32 / KV heads 4" in _error(raw)


class TestHubIds:
    def test_every_preset_names_its_model_and_dataset_repo(self):
        for name in preset_names():
            spec = load_preset(name)
            assert spec.model.hf_repo.startswith("Qwen/") and spec.data.hf_repo == "zhuzilin/dapo-math-17k"
            assert spec.model.hf_repo.split("/")[1] == spec.model.hf_checkpoint.rsplit("/", 1)[1]

    @pytest.mark.parametrize("bad", ["Qwen3-0.6B", "Qwen/", "/Qwen3", "a/b/c", "Qwen/Qwen3--0.6B", "Qwen/x.", "Q w/x"])
    def test_a_malformed_model_repo_names_the_field(self, bad):
        raw = _raw("smoke")
        raw["model"]["hf_repo"] = bad
        message = _error(raw)
        assert "model.hf_repo" in message and repr(bad) in message and "not a Hugging Face repo id" in message

    def test_a_malformed_dataset_repo_names_the_field(self):
        raw = _raw("smoke")
        raw["data"]["hf_repo"] = "https://huggingface.co/datasets/zhuzilin/dapo-math-17k"
        assert "data.hf_repo" in _error(raw)

    def test_the_repos_are_optional_and_pinned_in_the_hash(self):
        raw = _raw("smoke")
        raw["model"]["hf_repo"] = raw["data"]["hf_repo"] = None
        bare = BenchmarkSpec.model_validate(raw)
        assert bare.model.hf_repo is None and spec_hash(bare) != spec_hash(load_preset("smoke"))


class TestSteadyStateBudget:
    def test_every_preset_runs_long_enough_for_a_steady_state(self):
        """A shipped preset must give the report enough steps to find its warm-up and a steady tail."""
        for name in preset_names():
            assert steady_state_warnings(load_preset(name)) == [], name

    def test_a_short_run_is_warned_with_the_numbers(self):
        """Ten steps cannot show a steady state: the plan says so (a warning; the run still proves the pipeline)."""
        (warning,) = steady_state_warnings(with_overrides(load_preset("qwen3-30b-a3b"), num_steps=10))
        assert "run.num_steps=10" in warning and "at least 21 steps" in warning


class TestSpecFilesAreReadStrictly:
    """YAML's quiet conversions never reach the spec: a key given twice, or yes/no where a number belongs."""

    def _write(self, tmp_path, text: str):
        path = tmp_path / "spec.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    def test_a_key_given_twice_is_refused_with_both_lines(self, tmp_path):
        text = yaml.safe_dump(_raw("smoke"), sort_keys=False)
        text += "run:\n  num_steps: 30\n"  # a second `run:` section would silently replace the first
        with pytest.raises(ValueError, match=r"duplicate key 'run' \(first at line \d+\)") as info:
            load_spec_file(self._write(tmp_path, text))
        assert "spec.yaml" in str(info.value)

    def test_a_nested_duplicate_key_is_refused_too(self, tmp_path):
        text = yaml.safe_dump(_raw("smoke"), sort_keys=False).replace(
            "  num_steps:", "  warmup_steps: 1\n  num_steps:", 1
        )
        with pytest.raises(ValueError, match="duplicate key 'warmup_steps'"):
            load_spec_file(self._write(tmp_path, text))

    @pytest.mark.parametrize("word", ["yes", "no", "on", "true"])
    def test_a_yaml_boolean_where_a_count_belongs_is_refused(self, tmp_path, word):
        text = yaml.safe_dump(_raw("smoke"), sort_keys=False)
        text = text.replace(f"  num_steps: {_raw('smoke')['run']['num_steps']}\n", f"  num_steps: {word}\n")
        assert f"num_steps: {word}" in text
        with pytest.raises(ValidationError, match=r"run\.num_steps\n.*must be a number, got the boolean"):
            load_spec_file(self._write(tmp_path, text))

    @pytest.mark.parametrize(("section", "field", "value"), [("run", "num_steps", 24.5), ("run", "num_steps", "24")])
    def test_a_count_that_is_not_a_whole_number_is_refused(self, section, field, value):
        raw = _raw("smoke")
        raw[section][field] = value
        assert f"{section}.{field}" in _error(raw)

    def test_a_boolean_where_a_float_belongs_is_refused_but_an_int_is_a_float(self):
        raw = _raw("smoke")
        raw["sampling"]["temperature"] = True
        assert "sampling.temperature" in _error(raw)
        raw["sampling"]["temperature"] = 1
        assert BenchmarkSpec.model_validate(raw).sampling.temperature == 1.0

    def test_the_presets_hash_as_before_the_strict_reading(self):
        """Strict reading changes no accepted value: the default preset keeps the hash its history is keyed by."""
        assert spec_hash(load_preset("qwen3-1.7b-base")) == "b72627595773"
