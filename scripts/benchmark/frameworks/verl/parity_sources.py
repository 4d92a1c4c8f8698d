"""The literal VERL overrides that set each parity knob (the parity table prints them next to the canonical value).

`launch_words(knob, argv)`: the overrides of `argv` whose key (or a parent key) sets `knob`, "" when none does,
None when the knob has no source here.
"""

from __future__ import annotations

AR = "actor_rollout_ref"
_OPTIM = f"{AR}.actor.optim"
_OVERRIDE = f"{_OPTIM}.override_optimizer_config"
_MEGATRON = f"{AR}.actor.megatron"
_FSDP = f"{AR}.actor.fsdp_config"
_ROLLOUT = f"{AR}.rollout"
_SGLANG = f"{_ROLLOUT}.engine_kwargs.sglang"

# knob -> override keys; a key also matches its sub-keys.
LAUNCH_KEYS: dict[str, tuple[str, ...]] = {
    "prompt_rows": ("data.train_files",),
    "max_prompt_tokens": ("data.max_prompt_length",),
    "max_response_tokens": ("data.max_response_length",),
    "prompts_per_step": ("data.train_batch_size",),
    "samples_per_prompt": (f"{_ROLLOUT}.n",),
    "samples_per_optimizer_step": (f"{AR}.actor.ppo_mini_batch_size",),
    "max_tokens_per_gpu": (f"{AR}.actor.ppo_max_token_len_per_gpu",),
    "advantage_estimator": ("algorithm.adv_estimator",),
    "clip_low": (f"{AR}.actor.clip_ratio_low",),
    "clip_high": (f"{AR}.actor.clip_ratio_high",),
    "dual_clip": (f"{AR}.actor.clip_ratio_c",),
    "loss_aggregation": (f"{AR}.actor.loss_agg_mode",),
    "kl_loss_coef": (f"{AR}.actor.kl_loss_coef",),
    "entropy_coef": (f"{AR}.actor.entropy_coeff",),
    "optimizer": (f"{_OPTIM}.optimizer",),
    "lr": (f"{_OPTIM}.lr",),
    "lr_schedule": (f"{_OPTIM}.lr_scheduler_type", f"{_OPTIM}.lr_decay_style"),
    "lr_warmup_steps": (f"{_OPTIM}.lr_warmup_steps",),
    "weight_decay": (f"{_OPTIM}.weight_decay",),
    "adam_beta1": (f"{_OPTIM}.betas", f"{_OVERRIDE}.adam_beta1"),
    "adam_beta2": (f"{_OPTIM}.betas", f"{_OVERRIDE}.adam_beta2"),
    "adam_eps": (f"{_OVERRIDE}.adam_eps", _OVERRIDE),
    "clip_grad": (f"{_OPTIM}.clip_grad",),
    "temperature": (f"{_ROLLOUT}.temperature",),
    "top_p": (f"{_ROLLOUT}.top_p",),
    "top_k": (f"{_ROLLOUT}.top_k",),
    "gpus_per_engine": (f"{_ROLLOUT}.tensor_model_parallel_size",),
    "mem_fraction": (f"{_ROLLOUT}.gpu_memory_utilization",),
    "max_running_requests": (f"{_ROLLOUT}.max_num_seqs",),
    "chunked_prefill": (f"{_SGLANG}.chunked_prefill_size",),
    "rollout_attention_backend": (f"{_SGLANG}.attention_backend",),
    "prefill_cuda_graphs": (
        f"{_ROLLOUT}.enforce_eager",
        f"{_SGLANG}.disable_piecewise_cuda_graph",
        f"{_SGLANG}.disable_prefill_cuda_graph",
    ),
    "gradient_checkpointing": (f"{AR}.model.enable_gradient_checkpointing",),
    "tp": (f"{_MEGATRON}.tensor_model_parallel_size",),
    "pp": (f"{_MEGATRON}.pipeline_model_parallel_size",),
    "cp": (f"{_MEGATRON}.context_parallel_size",),
    "ep": (f"{_MEGATRON}.expert_model_parallel_size",),
    "sequence_parallel": (f"{_MEGATRON}.sequence_parallel",),
    "recompute": (f"{_MEGATRON}.override_transformer_config.recompute_granularity",),
    "optimizer_cpu_offload": (f"{_OVERRIDE}.optimizer_cpu_offload",),
    "precision_aware_optimizer": (f"{_OPTIM}.use_precision_aware_optimizer",),
    "train_state_offload": (
        f"{_MEGATRON}.param_offload",
        f"{_MEGATRON}.optimizer_offload",
        f"{_FSDP}.param_offload",
        f"{_FSDP}.optimizer_offload",
    ),
    "steps": ("trainer.total_training_steps",),
    "nodes": ("trainer.nnodes",),
    "rollout_replay": ("skip.rollout_tq",),
}


def launch_words(knob: str, argv: list[str]) -> str | None:
    if knob not in LAUNCH_KEYS:
        return None
    keys, words = LAUNCH_KEYS[knob], []
    for token in argv:
        key = token.partition("=")[0].lstrip("+~")
        if any(key == k or key.startswith(k + ".") for k in keys) and token not in words:
            words.append(token)
    return " ".join(words)
