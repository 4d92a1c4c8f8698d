"""VERL main_ppo overrides read back into the parity table's knobs.

`parse_verl(argv, prepare_argv)`: prompts converted to samples, clip and optimizer keys read where each engine
really reads them; absent keys take VERL 0.9.1's defaults (`VERL_DEFAULTS`, checked against the real composed
config by the tests). Keys VERL ignores are reported as a knob of their own. Values VERL takes from elsewhere than
its config (dropout from the HF config through mbridge, gradient all-reduce in fp32, the 2 s replay-buffer poll)
are VERL 0.9.1 code facts, named as such in the parity notes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from scripts.benchmark.frameworks import knob_values as spelled
from scripts.benchmark.frameworks.knob_values import NEUTRAL_DUAL_CLIP_MIN, kl_type, offload_state, on_off, recompute
from scripts.benchmark.frameworks.verl.data import parse_converted_name

AR = "actor_rollout_ref"
# SGLang code facts: VERL 0.9.1 pins sglang==0.5.12, whose default captures piecewise prefill graphs
# (ServerArgs.disable_piecewise_cuda_graph=False; from 0.5.14 the switch is disable_prefill_cuda_graph).
VERL_SGLANG = "0.5.12"
ENGINE_VERSION = f"sglang {VERL_SGLANG} (VERL 0.9.1's pin)"
PREFILL_GRAPHS = f"piecewise (sglang {VERL_SGLANG} default)"
PREFILL_OFF_KEYS = ("disable_piecewise_cuda_graph", "disable_prefill_cuda_graph")

# VERL 0.9.1 defaults of every key the parser reads (test_parity checks them against the real composed config).
VERL_DEFAULTS: dict[str, Any] = {
    "data.train_batch_size": 1024,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "data.shuffle": True,
    "data.seed": None,
    "data.filter_overlong_prompts": False,
    "algorithm.adv_estimator": "gae",
    "algorithm.norm_adv_by_std_in_grpo": True,
    "algorithm.use_kl_in_reward": False,
    "algorithm.rollout_correction.bypass_mode": False,
    f"{AR}.hybrid_engine": True,
    f"{AR}.model.enable_gradient_checkpointing": True,
    f"{AR}.model.use_remove_padding": True,
    f"{AR}.actor.ppo_mini_batch_size": 256,
    f"{AR}.actor.ppo_epochs": 1,
    f"{AR}.actor.use_dynamic_bsz": False,
    f"{AR}.actor.ppo_max_token_len_per_gpu": 16384,
    f"{AR}.actor.clip_ratio_low": 0.2,
    f"{AR}.actor.clip_ratio_high": 0.2,
    f"{AR}.actor.clip_ratio_c": 3.0,
    f"{AR}.actor.loss_agg_mode": "token-mean",
    f"{AR}.actor.entropy_coeff": 0,
    f"{AR}.actor.use_kl_loss": False,
    f"{AR}.actor.kl_loss_coef": 0.001,
    f"{AR}.actor.kl_loss_type": "low_var_kl",
    f"{AR}.actor.optim.lr": 1e-6,
    f"{AR}.actor.optim.weight_decay": 0.01,
    f"{AR}.actor.optim.clip_grad": 1.0,
    f"{AR}.actor.optim.betas": [0.9, 0.999],
    f"{AR}.actor.optim.lr_warmup_steps": -1,
    f"{AR}.actor.optim.lr_warmup_steps_ratio": 0.0,
    f"{AR}.rollout.name": None,
    f"{AR}.rollout.n": 1,
    f"{AR}.rollout.temperature": 1.0,
    f"{AR}.rollout.top_p": 1,
    f"{AR}.rollout.top_k": -1,
    f"{AR}.rollout.tensor_model_parallel_size": 2,
    f"{AR}.rollout.data_parallel_size": 1,
    f"{AR}.rollout.gpu_memory_utilization": 0.5,
    f"{AR}.rollout.enforce_eager": False,
    f"{AR}.rollout.max_num_seqs": 256,
    f"{AR}.rollout.free_cache_engine": True,
    f"{AR}.rollout.nnodes": 0,
    f"{AR}.rollout.checkpoint_engine.update_weights_bucket_megabytes": 2048,
    "reward.reward_manager.name": "naive",
    "reward.custom_reward_function.path": None,
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 8,
    "trainer.total_training_steps": None,
    "trainer.val_before_train": True,
    "trainer.test_freq": -1,
    "trainer.save_freq": -1,
    "trainer.resume_mode": "auto",
    "trainer.logger": ["console", "wandb"],
    "trainer.project_name": "verl_examples",
    "trainer.rollout_data_dir": None,
    "trainer.v1.trainer_mode": "sync",
    "trainer.v1.separate_async.num_warmup_batches": 1,
    "trainer.v1.separate_async.parameter_sync_step": 4,
    "trainer.v1.sampler.max_off_policy_threshold": 8,
    "trainer.v1.sampler.max_off_policy_strategy": "drop",
}
VERL_FSDP_DEFAULTS: dict[str, Any] = {
    f"{AR}.actor.ulysses_sequence_parallel_size": 1,
    f"{AR}.actor.strategy": "fsdp",
    f"{AR}.actor.optim.optimizer": "AdamW",
    f"{AR}.actor.optim.lr_scheduler_type": "constant",
    f"{AR}.actor.optim.override_optimizer_config": None,
    f"{AR}.actor.fsdp_config.param_offload": False,
    f"{AR}.actor.fsdp_config.optimizer_offload": False,
    f"{AR}.actor.fsdp_config.offload_policy": False,
}
VERL_MEGATRON_DEFAULTS: dict[str, Any] = {
    f"{AR}.actor.strategy": "megatron",
    f"{AR}.actor.optim.optimizer": "adam",
    f"{AR}.actor.optim.lr_decay_style": "constant",
    f"{AR}.actor.optim.use_precision_aware_optimizer": False,
    f"{AR}.actor.megatron.param_offload": False,
    f"{AR}.actor.megatron.optimizer_offload": False,
    f"{AR}.actor.megatron.tensor_model_parallel_size": 1,
    f"{AR}.actor.megatron.pipeline_model_parallel_size": 1,
    f"{AR}.actor.megatron.context_parallel_size": 1,
    f"{AR}.actor.megatron.expert_model_parallel_size": 1,
    f"{AR}.actor.megatron.expert_tensor_parallel_size": None,
    f"{AR}.actor.megatron.sequence_parallel": True,
    f"{AR}.actor.megatron.use_distributed_optimizer": True,
    f"{AR}.actor.megatron.use_mbridge": True,
    f"{AR}.actor.megatron.seed": 42,
    f"{AR}.actor.megatron.override_transformer_config.recompute_granularity": None,
    f"{AR}.actor.megatron.override_transformer_config.recompute_method": None,
    f"{AR}.actor.megatron.override_transformer_config.recompute_num_layers": None,
    f"{AR}.actor.megatron.override_transformer_config.attention_backend": "flash",
}
# Megatron-Core OptimizerConfig defaults: what VERL's Megatron engine uses when override_optimizer_config is silent.
MCORE_ADAM = {"adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-8}
# Keys that compose in VERL 0.9.1 but that main_ppo or the chosen engine never reads.
VERL_IGNORED_PREFIXES = ("reward_model.", "custom_reward_function.")
VERL_IGNORED_KEYS = {
    "both": {f"{AR}.actor.grad_clip", f"{AR}.actor.fsdp_config.strategy", "trainer.balance_batch"},
    "sglang": {f"{AR}.rollout.enable_chunked_prefill", f"{AR}.rollout.max_num_batched_tokens", f"{AR}.rollout.seed"},
    "megatron": {f"{AR}.actor.optim.betas", f"{AR}.model.enable_gradient_checkpointing"},
}


def parse_hydra_value(text: str) -> Any:
    """The subset of Hydra's override grammar the launches use: bool, null, int, float, [list], {dict}, string."""
    text = text.strip()
    if text in ("True", "true", "False", "false"):
        return text in ("True", "true")
    if text in ("null", "None", "~"):
        return None
    if text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return [parse_hydra_value(part) for part in inner.split(",")] if inner else []
    if text.startswith("{") and text.endswith("}"):
        pairs = [p.split(":", 1) for p in text[1:-1].split(",") if p.strip()]
        return {k.strip(): parse_hydra_value(v) for k, v in pairs}
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return _unquote(text[1:-1])
    return text


def _unquote(inner: str) -> str:
    """The content of a Hydra quoted value (the inverse of verl.launch.hydra_string)."""
    return re.sub(r"(\\+)('|\"|\$\{|$)", lambda m: m.group(1)[: len(m.group(1)) // 2] + m.group(2), inner)


def _verl_overrides(argv: list[str]) -> dict[str, Any]:
    start = argv.index("verl.trainer.main_ppo") + 1 if "verl.trainer.main_ppo" in argv else 0
    values: dict[str, Any] = {}
    for token in argv[start:]:
        key, sep, value = token.partition("=")
        if sep and not key.startswith("hydra."):
            values[key.lstrip("+")] = parse_hydra_value(value)
    return values


class _Verl:
    def __init__(self, argv: list[str]):
        self.overrides = _verl_overrides(argv)
        self.backend = "megatron" if self.overrides.get("model_engine") == "megatron" else "fsdp"
        engine = VERL_MEGATRON_DEFAULTS if self.backend == "megatron" else VERL_FSDP_DEFAULTS
        self.defaults = {**VERL_DEFAULTS, **engine}

    def get(self, key: str) -> Any:
        if key in self.overrides:
            return self.overrides[key]
        return self.defaults.get(key)


def parse_verl(argv: list[str], prepare_argv: list[str] | None = None) -> dict[str, Any]:
    v = _Verl(argv)
    knobs: dict[str, Any] = {}
    knobs.update(_verl_data(v, prepare_argv or []))
    knobs.update(_verl_batch_and_loss(v))
    knobs.update(_verl_optimizer(v))
    knobs.update(_verl_rollout(v))
    knobs.update(_verl_backend(v))
    knobs.update(_verl_run(v))
    knobs.update(_verl_loop(v))
    if v.get("skip.rollout_tq.enable"):
        knobs["rollout_replay"] = REPLAY_EXTRAS
    return knobs


REPLAY_EXTRAS = "recorded rollout (skip.rollout_tq), SGLang engines started and idle, weights synced to them each step"


def _verl_loop(v: _Verl) -> dict[str, Any]:
    """sync: generate, train, update in turn. separate_async (ReplayBufferAsync): num_warmup_batches batches are
    submitted ahead; with strategy wait the trainer blocks while an in-flight prompt is threshold steps old, so
    warm-up 1 + threshold 2 trains on the previous step's prompts while the current ones generate, and warm-up 0 +
    threshold 1 waits for every prompt (synchronous). Weights are pushed once per step; the push aborts the
    in-flight requests and resumes them with the new weights (checkpoint_engine/base.py), with no switch."""
    mode = v.get("trainer.v1.trainer_mode")
    if mode == "sync":
        return {
            "rollout_loop": spelled.SYNCHRONOUS,
            "loop_shape": spelled.SYNC_SHAPE,
            "max_policy_lag": 0,
            "weight_sync_cadence": "every step",
            "partial_rollout": spelled.NOTHING_IN_FLIGHT,
            "first_steps_composition": spelled.FILE_BATCHES,
            "weight_cpu_backup": "none",
        }
    warmup = v.get(f"trainer.v1.{mode}.num_warmup_batches")
    threshold = v.get("trainer.v1.sampler.max_off_policy_threshold")
    strategy = v.get("trainer.v1.sampler.max_off_policy_strategy")
    lag = threshold - 1 if threshold else "unbounded"
    if strategy == "wait" and isinstance(lag, int):
        lag = min(warmup, lag)
    if strategy == "wait" and lag == 0:
        loop = spelled.SYNCHRONOUS
    elif strategy == "wait" and lag == 1:
        loop = spelled.ONE_STEP_OFF_POLICY
    else:
        loop = f"{mode} (warm-up {warmup}, threshold {threshold}, {strategy})"
    return {
        "rollout_loop": loop,
        "loop_shape": spelled.SUBMIT_AHEAD_SHAPE,
        "max_policy_lag": lag,
        "weight_sync_cadence": "every step",
        "partial_rollout": spelled.ABORTED_AND_REPREFILLED,
        "first_steps_composition": _first_steps(warmup),
        "weight_cpu_backup": _old_policy_copies(v, mode),
    }


def _first_steps(warmup: int) -> str:
    """The replay buffer hands the trainer the first prompts to finish: with warm-up batches in flight, the first
    step trains the fastest of the submitted prompts and the next the slowest (trainer_base.py)."""
    if not warmup:
        return spelled.FILE_BATCHES
    return spelled.BY_COMPLETION_OVER.format(warmup + 1, warmup)


def _old_policy_copies(v: _Verl, mode: str) -> str:
    """Decoupled PPO (bypass_mode False) in separate_async: old log-probs of every mini-batch come from the step's
    first weights, swapped in through CPU (`_compute_old_log_prob` of trainer_separate_async.py)."""
    if mode != "separate_async" or v.get("algorithm.rollout_correction.bypass_mode"):
        return "none"
    mini_batches = v.get("trainer.v1.separate_async.parameter_sync_step")
    restores = 2 * (mini_batches - 1)
    return f"training model copied to CPU {mini_batches}x and back {restores}x per step (old-policy weights)"


def _prepare_value(prepare_argv: list[str], flag: str) -> str | None:
    return prepare_argv[prepare_argv.index(flag) + 1] if flag in prepare_argv else None


def _verl_data(v: _Verl, prepare_argv: list[str]) -> dict[str, Any]:
    train_file = str(v.get("data.train_files") or "")
    parsed = parse_converted_name(train_file)
    prefix = "data.apply_chat_template_kwargs."
    kwargs = {k.removeprefix(prefix): val for k, val in v.overrides.items() if k.startswith(prefix)}
    data_source = _prepare_value(prepare_argv, "--data-source") or "no convert-data step"
    custom = v.get("reward.custom_reward_function.path")
    manager = v.get("reward.reward_manager.name")
    scorer = "math_dapo" if data_source == "math_dapo" else f"{data_source} (own scorer)"
    scorer = f"custom {custom}" if custom else scorer
    if manager != "naive":
        scorer += f" via {manager} manager"
    shuffle = v.get("data.shuffle")
    return {
        "prompt_rows": f"{parsed[0]}[{parsed[1]}:{parsed[2]}]" if parsed else f"{train_file} (whole file)",
        "prompt_order": f"shuffled (seed {v.get('data.seed')})" if shuffle else "file order",
        "chat_template": f"applied {json.dumps(kwargs, sort_keys=True)}",
        "max_prompt_tokens": v.get("data.max_prompt_length"),
        "overlong_prompts": (
            "dropped at load" if v.get("data.filter_overlong_prompts") else "left-truncated at rollout"
        ),
        "max_response_tokens": v.get("data.max_response_length"),
        "reward_scorer": scorer,
    }


def _verl_batch_and_loss(v: _Verl) -> dict[str, Any]:
    actor = f"{AR}.actor"
    n, prompts, mini = v.get(f"{AR}.rollout.n"), v.get("data.train_batch_size"), v.get(f"{actor}.ppo_mini_batch_size")
    low, high, dual = (
        v.get(f"{actor}.clip_ratio_low"),
        v.get(f"{actor}.clip_ratio_high"),
        v.get(f"{actor}.clip_ratio_c"),
    )
    kl_loss, kl_reward = bool(v.get(f"{actor}.use_kl_loss")), bool(v.get("algorithm.use_kl_in_reward"))
    budget = v.get(f"{actor}.ppo_max_token_len_per_gpu")
    logprob_budget = v.get(f"{AR}.rollout.log_prob_max_token_len_per_gpu")
    return {
        "prompts_per_step": prompts,
        "samples_per_prompt": n,
        "samples_per_optimizer_step": mini * n,
        "optimizer_steps_per_step": prompts // mini * v.get(f"{actor}.ppo_epochs"),
        "ppo_epochs": v.get(f"{actor}.ppo_epochs"),
        "dynamic_batching": bool(v.get(f"{actor}.use_dynamic_bsz")),
        "max_tokens_per_gpu": budget,
        "logprob_max_tokens_per_gpu": budget if logprob_budget is None else logprob_budget,
        "dp_load_balancing": "balanced",
        "advantage_estimator": v.get("algorithm.adv_estimator"),
        "std_normalization": bool(v.get("algorithm.norm_adv_by_std_in_grpo")),
        "clip_low": low if low is not None else v.get(f"{actor}.clip_ratio"),
        "clip_high": high if high is not None else v.get(f"{actor}.clip_ratio"),
        "dual_clip": "off" if dual >= NEUTRAL_DUAL_CLIP_MIN else dual,
        "loss_aggregation": v.get(f"{actor}.loss_agg_mode"),
        "kl_loss": kl_loss,
        "kl_loss_coef": v.get(f"{actor}.kl_loss_coef") if kl_loss else spelled.NOT_KL,
        "kl_loss_type": kl_type(v.get(f"{actor}.kl_loss_type")) if kl_loss else spelled.NOT_KL,
        "kl_in_reward": kl_reward,
        "reference_model": "forward every step" if (kl_loss or kl_reward) else "none",
        "entropy_coef": v.get(f"{actor}.entropy_coeff"),
        "old_logprobs": (
            "rollout log-probs" if v.get("algorithm.rollout_correction.bypass_mode") else "recomputed by the actor"
        ),
    }


def _verl_optimizer(v: _Verl) -> dict[str, Any]:
    optim = f"{AR}.actor.optim"
    if v.backend == "megatron":
        override = {**MCORE_ADAM, **_override_dict(v, f"{optim}.override_optimizer_config")}
        beta1, beta2, eps = override["adam_beta1"], override["adam_beta2"], override["adam_eps"]
        schedule = v.get(f"{optim}.lr_decay_style")
    else:
        override = _override_dict(v, f"{optim}.override_optimizer_config")
        (beta1, beta2), eps = v.get(f"{optim}.betas"), override.get("eps", 1e-8)
        schedule = v.get(f"{optim}.lr_scheduler_type")
    warmup, ratio = v.get(f"{optim}.lr_warmup_steps"), v.get(f"{optim}.lr_warmup_steps_ratio")
    name = v.get(f"{optim}.optimizer")
    return {
        "optimizer": "adamw" if name in ("adam", "AdamW") else name,
        "lr": v.get(f"{optim}.lr"),
        "lr_schedule": schedule,
        "lr_warmup_steps": warmup if warmup >= 0 else (0 if not ratio else f"fraction {ratio}"),
        "weight_decay": v.get(f"{optim}.weight_decay"),
        "adam_beta1": beta1,
        "adam_beta2": beta2,
        "adam_eps": eps,
        "clip_grad": v.get(f"{optim}.clip_grad"),
        "temperature": v.get(f"{AR}.rollout.temperature"),
        "top_p": v.get(f"{AR}.rollout.top_p"),
        "top_k": v.get(f"{AR}.rollout.top_k"),
        "sampling_seed": "sglang default (VERL passes no seed to SGLang)",
    }


def _override_dict(v: _Verl, prefix: str) -> dict[str, Any]:
    whole = v.get(prefix)
    values = dict(whole) if isinstance(whole, dict) else {}
    values.update({k.removeprefix(prefix + "."): val for k, val in v.overrides.items() if k.startswith(prefix + ".")})
    return values


def _verl_rollout(v: _Verl) -> dict[str, Any]:
    ro = f"{AR}.rollout"
    sglang = _override_dict(v, f"{ro}.engine_kwargs.sglang")
    hybrid = bool(v.get(f"{AR}.hybrid_engine"))
    ignored = {k for k in v.overrides if k.startswith(VERL_IGNORED_PREFIXES)}
    ignored |= set(v.overrides) & (VERL_IGNORED_KEYS["both"] | VERL_IGNORED_KEYS["sglang"])
    if v.backend == "megatron":
        ignored |= set(v.overrides) & VERL_IGNORED_KEYS["megatron"]
    return {
        "rollout_engine": v.get(f"{ro}.name"),
        "gpus_per_engine": v.get(f"{ro}.tensor_model_parallel_size") * v.get(f"{ro}.data_parallel_size"),
        "mem_fraction": v.get(f"{ro}.gpu_memory_utilization"),
        "max_running_requests": v.get(f"{ro}.max_num_seqs"),
        "client_concurrency": "every prompt of the step submitted at once (agent loop)",
        "chunked_prefill": sglang.get("chunked_prefill_size", "sglang default"),
        "rollout_attention_backend": sglang.get("attention_backend", "flashinfer"),
        "cuda_graphs": on_off(not v.get(f"{ro}.enforce_eager")),
        "cuda_graph_max_bs": sglang.get(
            "cuda_graph_max_bs_decode", sglang.get("cuda_graph_max_bs", spelled.NO_CAP.format(VERL_SGLANG))
        ),
        "weight_sync_bucket_mb": v.get(f"{ro}.checkpoint_engine.update_weights_bucket_megabytes"),
        "rollout_memory_release": _memory_release(hybrid, bool(v.get(f"{ro}.free_cache_engine"))),
        "prefill_cuda_graphs": _prefill_graphs(v, sglang),
        "rollout_engine_version": ENGINE_VERSION,
        "rollout_memory_saver": "on",
        "completion_wait": "2 s replay-buffer poll",
        "health_checks": "off",
        "rollout_dumps": "on (trainer.rollout_data_dir)" if v.get("trainer.rollout_data_dir") else "off",
        "dead_or_ignored_keys": sorted(ignored) or "none",
    }


def _prefill_graphs(v: _Verl, sglang: dict[str, Any]) -> str:
    """enforce_eager becomes SGLang's disable_cuda_graph (no graph at all); the prefill switch reaches ServerArgs
    through engine_kwargs (`async_sglang_server.py` `launch_server`)."""
    off = any(str(sglang.get(key, False)).lower() == "true" for key in PREFILL_OFF_KEYS)
    return "off" if off or v.get(f"{AR}.rollout.enforce_eager") else PREFILL_GRAPHS


def _memory_release(hybrid: bool, free_cache_engine: bool) -> str:
    """A standalone server with free_cache_engine releases its KV pool at every weight sync; the hybrid one sleeps
    with enable_weights_cpu_backup, forced on by `launch_server` whatever the cell passes (async_sglang_server.py)."""
    if not free_cache_engine:
        return "kept"
    return spelled.RELEASED_WITH_COPY if hybrid else spelled.KV_RELEASED


def _verl_backend(v: _Verl) -> dict[str, Any]:
    seed = v.get(f"{AR}.actor.megatron.seed")
    if v.backend == "fsdp":
        cfg = f"{AR}.actor.fsdp_config"
        param, opt = v.get(f"{cfg}.param_offload"), v.get(f"{cfg}.optimizer_offload")
        attn = _override_dict(v, f"{AR}.model.override_config").get("attn_implementation", "flash_attention_2")
        strategy = v.get(f"{AR}.actor.strategy")
        return {
            "gradient_checkpointing": bool(v.get(f"{AR}.model.enable_gradient_checkpointing")),
            "fsdp_version": "fsdp2" if strategy == "fsdp2" else "fsdp1",
            "attn_implementation": attn,
            "fsdp_cpu_offload_policy": bool(v.get(f"{cfg}.offload_policy")),
            "train_state_offload": offload_state(param, opt),
            "sequence_packing": "varlen (packed)" if v.get(f"{AR}.model.use_remove_padding") else "padded",
            "ulysses_sp": v.get(f"{AR}.actor.ulysses_sequence_parallel_size"),
            "training_seed": "unused (fsdp_config.seed applies only with full_determinism)",
            "cuda_allocator": "default",
        }
    mg, tc = f"{AR}.actor.megatron", f"{AR}.actor.megatron.override_transformer_config"
    tp, extra = v.get(f"{mg}.tensor_model_parallel_size"), _override_dict(v, tc)
    etp = v.get(f"{mg}.expert_tensor_parallel_size")
    optimizer_override = _override_dict(v, f"{AR}.actor.optim.override_optimizer_config")
    moe_keys = ("moe_token_dispatcher_type", "moe_grouped_gemm", "moe_permute_fusion", "moe_router_dtype")
    return {
        "tp": tp,
        "pp": v.get(f"{mg}.pipeline_model_parallel_size"),
        "cp": v.get(f"{mg}.context_parallel_size"),
        "ep": v.get(f"{mg}.expert_model_parallel_size"),
        "etp": tp if etp is None else etp,
        "sequence_parallel": bool(v.get(f"{mg}.sequence_parallel")) and tp > 1,
        "recompute": recompute(
            extra.get("recompute_granularity"), extra.get("recompute_method"), extra.get("recompute_num_layers")
        ),
        "dropout": (0.0, 0.0),
        "megatron_attention_backend": extra.get("attention_backend"),
        "distributed_optimizer": bool(v.get(f"{mg}.use_distributed_optimizer")),
        "optimizer_cpu_offload": bool(optimizer_override.get("optimizer_cpu_offload", False)),
        "precision_aware_optimizer": bool(v.get(f"{AR}.actor.optim.use_precision_aware_optimizer")),
        "grad_reduce_dtype": "fp32",
        "moe_kernels": _verl_moe(extra) if any(k in extra for k in moe_keys) else spelled.DENSE,
        "moe_router_dtype": (
            (extra.get("moe_router_dtype") or spelled.MODEL_DTYPE)
            if any(k in extra for k in moe_keys)
            else spelled.DENSE
        ),
        "hf_weights_loading": "megatron-bridge" if v.get(f"{mg}.use_mbridge") else "torch_dist checkpoint",
        "train_state_offload": offload_state(v.get(f"{mg}.param_offload"), v.get(f"{mg}.optimizer_offload")),
        "training_seed": seed,
    }


def _verl_moe(extra: dict) -> str:
    parts = [
        f"dispatcher={extra.get('moe_token_dispatcher_type')}",
        f"grouped_gemm={bool(extra.get('moe_grouped_gemm'))}",
    ]
    parts += [f"permute_fusion={bool(extra.get('moe_permute_fusion'))}"]
    parts += [f"aux_loss={float(extra.get('moe_aux_loss_coeff', 0.0))}"]
    return ", ".join(parts)


def _verl_run(v: _Verl) -> dict[str, Any]:
    mode = v.get("trainer.v1.trainer_mode")
    nodes, per_node = v.get("trainer.nnodes"), v.get("trainer.n_gpus_per_node")
    if mode == "sync":
        layout, rollout_gpus = "colocated", nodes * per_node
    else:
        layout = "disaggregated" if mode == "separate_async" else "colocated"
        rollout_gpus = v.get(f"{AR}.rollout.nnodes") * v.get(f"{AR}.rollout.n_gpus_per_node")
    logger = v.get("trainer.logger") or []
    return {
        "layout": layout,
        "train_gpus": nodes * per_node,
        "rollout_gpus": rollout_gpus,
        "nodes": nodes,
        "steps": v.get("trainer.total_training_steps"),
        "evaluation": "on" if (v.get("trainer.val_before_train") or (v.get("trainer.test_freq") or -1) > 0) else "off",
        "checkpoint_save": "on" if (v.get("trainer.save_freq") or -1) > 0 else "off",
        "resume": "off" if v.get("trainer.resume_mode") == "disable" else f"{v.get('trainer.resume_mode')} (resumes)",
        "external_trackers": [x for x in logger if x not in ("console", "file")] or "none",
        "tracking": f"wandb (project {v.get('trainer.project_name')})" if "wandb" in logger else "off",
        "metric_sink": "FileLogger (file)" if "file" in logger else "off",
    }
