"""The VERL launch: every cell composes against the real VERL 0.9.1 config in strict mode, with the values that
match Miles (units converted, VERL's known traps avoided)."""

from functools import cache

import pytest

from scripts.benchmark.frameworks.verl.config import compose_overrides, find_verl_root, verl_override_problems
from scripts.benchmark.frameworks.verl.launch import VerlData, build_verl_launch, overrides_of
from scripts.benchmark.spec import BACKENDS, LAYOUTS, load_preset, preset_names, with_overrides

DATA = VerlData("/data/dapo-math-17k.rows-0-2048.parquet", "/data/dapo-math-17k.rows-0-2048.val.parquet")
CELLS = [(p, b, lay) for p in preset_names() for b in BACKENDS for lay in LAYOUTS]
AR = "actor_rollout_ref"


def _overrides(preset="qwen3-1.7b-base", backend="fsdp", layout="colocate", wandb=None) -> tuple[str, ...]:
    spec = with_overrides(load_preset(preset), layout=layout, wandb=wandb)
    return tuple(overrides_of(build_verl_launch(spec, backend, layout, DATA).argv))


@cache
def _composed(root, overrides: tuple[str, ...]):
    return compose_overrides(list(overrides), root)


def _cfg(verl_root, preset="qwen3-1.7b-base", backend="fsdp", layout="colocate"):
    return _composed(verl_root, _overrides(preset, backend, layout))


class TestStrictComposition:
    @pytest.mark.parametrize("preset,backend,layout", CELLS)
    def test_every_cell_composes_against_verl_0_9_1(self, verl_root, preset, backend, layout):
        cfg = _cfg(verl_root, preset, backend, layout)
        assert cfg.actor_rollout_ref.rollout.name == "sglang"
        assert cfg.actor_rollout_ref.actor.strategy == ("megatron" if backend == "megatron" else "fsdp2")

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_wandb_tracking_composes_with_the_file_sink_kept(self, verl_root, backend):
        """--wandb adds wandb to trainer.logger; the file sink stays; project and run name are what wandb shows."""
        trainer = _composed(verl_root, _overrides(backend=backend, wandb=True)).trainer
        assert list(trainer.logger) == ["console", "file", "wandb"]
        assert trainer.project_name == "miles-bench" and trainer.experiment_name == f"verl-{backend}-colocate"

    def test_an_unknown_key_is_rejected(self, verl_root):
        problems = verl_override_problems(list(_overrides()) + [f"{AR}.actor.bogus_key=1"], verl_root)
        assert problems and "bogus_key" in problems[0]

    def test_a_key_from_newer_verl_is_rejected(self, verl_root):
        """megatron.grad_offload is in VERL main but not in 0.9.1."""
        overrides = list(_overrides(backend="megatron")) + [f"{AR}.actor.megatron.grad_offload=True"]
        assert "grad_offload" in verl_override_problems(overrides, verl_root)[0]

    def test_plus_on_an_existing_key_is_rejected(self, verl_root):
        overrides = list(_overrides()) + [f"+{AR}.actor.clip_ratio_high=0.28"]
        assert "Could not append" in verl_override_problems(overrides, verl_root)[0]

    def test_root_comes_from_env(self, verl_root, monkeypatch, tmp_path):
        monkeypatch.setenv("VERL_ISOLATED_DIR", str(verl_root))
        assert find_verl_root() == verl_root
        monkeypatch.setenv("VERL_ISOLATED_DIR", str(tmp_path))
        assert find_verl_root() is None


class TestConvertedValues:
    def test_batch_units_are_converted(self, verl_root):
        """VERL counts prompts; Miles's 1024-sample optimizer batch is 32 prompts x 32 samples."""
        cfg = _cfg(verl_root)
        assert cfg.data.train_batch_size == 128 and cfg.actor_rollout_ref.rollout.n == 32
        assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 32
        assert cfg.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == 18432

    def test_clip_dual_clip_and_loss_aggregation(self, verl_root):
        actor = _cfg(verl_root).actor_rollout_ref.actor
        assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
        assert actor.clip_ratio_c == 1.0e9 and actor.loss_agg_mode == "token-mean"
        assert actor.use_kl_loss is False and actor.entropy_coeff == 0.0

    def test_megatron_betas_go_through_the_optimizer_override(self, verl_root):
        optim = _cfg(verl_root, backend="megatron").actor_rollout_ref.actor.optim
        assert optim.override_optimizer_config.adam_beta2 == 0.98
        assert optim.override_optimizer_config.adam_eps == 1e-8
        assert optim.lr_decay_style == "constant" and optim.weight_decay == 0.1

    def test_fsdp_betas_and_eps(self, verl_root):
        optim = _cfg(verl_root).actor_rollout_ref.actor.optim
        assert list(optim.betas) == [0.9, 0.98] and optim.override_optimizer_config.eps == 1e-8
        assert optim.lr_scheduler_type == "constant"

    def test_rollout_matches_the_miles_engine(self, verl_root):
        rollout = _cfg(verl_root).actor_rollout_ref.rollout
        assert rollout.tensor_model_parallel_size == 1 and rollout.gpu_memory_utilization == 0.7
        assert rollout.max_num_seqs == 512 and rollout.enforce_eager is False
        sglang = {"chunked_prefill_size": 4096, "attention_backend": "fa3", "disable_piecewise_cuda_graph": True}
        assert dict(rollout.engine_kwargs.sglang) == sglang  # colocated: prefill graphs off, as Miles's --colocate
        assert rollout.checkpoint_engine.update_weights_bucket_megabytes == 512

    def test_no_validation_saving_resume_or_wandb(self, verl_root):
        trainer = _cfg(verl_root).trainer
        assert trainer.val_before_train is False and trainer.test_freq == -1 and trainer.save_freq == -1
        assert trainer.resume_mode == "disable" and list(trainer.logger) == ["console", "file"]

    def test_reward_under_reward_not_the_legacy_keys(self, verl_root):
        cfg = _cfg(verl_root)
        assert cfg.reward.reward_manager.name == "naive" and cfg.reward_model.reward_manager is None

    def test_data_in_miles_order(self, verl_root):
        data = _cfg(verl_root).data
        assert data.shuffle is False and data.filter_overlong_prompts is True
        assert data.train_files == DATA.train_file and data.val_files == DATA.val_file

    def test_megatron_parallelism(self, verl_root):
        cfg = _cfg(verl_root, "qwen3-30b-a3b", "megatron")
        mg = cfg.actor_rollout_ref.actor.megatron
        assert cfg.model_engine == "megatron"
        assert (mg.tensor_model_parallel_size, mg.expert_model_parallel_size, mg.expert_tensor_parallel_size) == (
            4,
            4,
            1,
        )
        assert mg.override_transformer_config.recompute_granularity == "full"
        assert cfg.actor_rollout_ref.actor.optim.override_optimizer_config.optimizer_cpu_offload is True

    def test_disaggregated_is_separate_async_with_one_sync_per_step(self, verl_root):
        cfg = _cfg(verl_root, layout="disaggregated")
        assert cfg.trainer.v1.trainer_mode == "separate_async" and cfg.actor_rollout_ref.hybrid_engine is False
        sync_step = cfg.trainer.v1.separate_async.parameter_sync_step
        assert cfg.data.train_batch_size == sync_step * cfg.actor_rollout_ref.actor.ppo_mini_batch_size
        assert cfg.actor_rollout_ref.rollout.n_gpus_per_node == 4 and cfg.trainer.n_gpus_per_node == 4
        assert cfg.actor_rollout_ref.rollout.checkpoint_engine.backend == "nccl"

    def test_sink_is_the_file_logger_in_the_cell_folder(self):
        launch = build_verl_launch(load_preset("smoke"), "fsdp", "colocate", DATA)
        assert launch.env["VERL_FILE_LOGGER_PATH"] == "${BENCH_CELL_DIR}/sink/verl.jsonl"
        assert launch.launch_argv == launch.argv and launch.argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
