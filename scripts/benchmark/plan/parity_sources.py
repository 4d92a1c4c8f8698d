"""What each framework is actually given for a parity knob: the literal flags and overrides of its launch.

The parity table compares canonical values (Miles's `--optimizer adam` and VERL's default `AdamW` are both `adamw`,
Adam with decoupled weight decay). A reader checking the table against the cell scripts needs the literal words too,
so every row names them: `launch_words(knob, miles_argv, verl_argv)` -> (Miles words, VERL words), where a knob that
no word sets reads "not set: framework default".
"""

from __future__ import annotations

AR = "actor_rollout_ref"
_OPTIM = f"{AR}.actor.optim"
_OVERRIDE = f"{_OPTIM}.override_optimizer_config"
_MEGATRON = f"{AR}.actor.megatron"
_FSDP = f"{AR}.actor.fsdp_config"
_ROLLOUT = f"{AR}.rollout"
_SGLANG = f"{_ROLLOUT}.engine_kwargs.sglang"

NOT_SET = "not set: framework default"

# knob -> (Miles flags, VERL override keys; a key also matches its sub-keys).
LAUNCH_SOURCES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "prompt_rows": (("--prompt-data",), ("data.train_files",)),
    "max_prompt_tokens": (("--rollout-max-prompt-len",), ("data.max_prompt_length",)),
    "max_response_tokens": (("--rollout-max-response-len",), ("data.max_response_length",)),
    "prompts_per_step": (("--rollout-batch-size",), ("data.train_batch_size",)),
    "samples_per_prompt": (("--n-samples-per-prompt",), (f"{_ROLLOUT}.n",)),
    "samples_per_optimizer_step": (("--global-batch-size",), (f"{AR}.actor.ppo_mini_batch_size",)),
    "max_tokens_per_gpu": (("--max-tokens-per-gpu",), (f"{AR}.actor.ppo_max_token_len_per_gpu",)),
    "advantage_estimator": (("--advantage-estimator",), ("algorithm.adv_estimator",)),
    "clip_low": (("--eps-clip",), (f"{AR}.actor.clip_ratio_low",)),
    "clip_high": (("--eps-clip-high",), (f"{AR}.actor.clip_ratio_high",)),
    "dual_clip": (("--eps-clip-c",), (f"{AR}.actor.clip_ratio_c",)),
    "loss_aggregation": (("--calculate-per-token-loss",), (f"{AR}.actor.loss_agg_mode",)),
    "kl_loss_coef": (("--kl-loss-coef",), (f"{AR}.actor.kl_loss_coef",)),
    "entropy_coef": (("--entropy-coef",), (f"{AR}.actor.entropy_coeff",)),
    "optimizer": (("--optimizer",), (f"{_OPTIM}.optimizer",)),
    "lr": (("--lr",), (f"{_OPTIM}.lr",)),
    "lr_schedule": (("--lr-decay-style",), (f"{_OPTIM}.lr_scheduler_type", f"{_OPTIM}.lr_decay_style")),
    "lr_warmup_steps": (("--lr-warmup-iters",), (f"{_OPTIM}.lr_warmup_steps",)),
    "weight_decay": (("--weight-decay",), (f"{_OPTIM}.weight_decay",)),
    "adam_beta1": (("--adam-beta1",), (f"{_OPTIM}.betas", f"{_OVERRIDE}.adam_beta1")),
    "adam_beta2": (("--adam-beta2",), (f"{_OPTIM}.betas", f"{_OVERRIDE}.adam_beta2")),
    "adam_eps": (("--adam-eps",), (f"{_OVERRIDE}.adam_eps", _OVERRIDE)),
    "clip_grad": (("--clip-grad",), (f"{_OPTIM}.clip_grad",)),
    "temperature": (("--rollout-temperature",), (f"{_ROLLOUT}.temperature",)),
    "top_p": (("--rollout-top-p",), (f"{_ROLLOUT}.top_p",)),
    "top_k": (("--rollout-top-k",), (f"{_ROLLOUT}.top_k",)),
    "gpus_per_engine": (("--rollout-num-gpus-per-engine",), (f"{_ROLLOUT}.tensor_model_parallel_size",)),
    "mem_fraction": (("--sglang-mem-fraction-static",), (f"{_ROLLOUT}.gpu_memory_utilization",)),
    "max_running_requests": (("--sglang-max-running-requests",), (f"{_ROLLOUT}.max_num_seqs",)),
    "chunked_prefill": (("--sglang-chunked-prefill-size",), (f"{_SGLANG}.chunked_prefill_size",)),
    "rollout_attention_backend": (("--sglang-attention-backend",), (f"{_SGLANG}.attention_backend",)),
    "gradient_checkpointing": (("--gradient-checkpointing",), (f"{AR}.model.enable_gradient_checkpointing",)),
    "tp": (("--tensor-model-parallel-size",), (f"{_MEGATRON}.tensor_model_parallel_size",)),
    "pp": (("--pipeline-model-parallel-size",), (f"{_MEGATRON}.pipeline_model_parallel_size",)),
    "cp": (("--context-parallel-size",), (f"{_MEGATRON}.context_parallel_size",)),
    "ep": (("--expert-model-parallel-size",), (f"{_MEGATRON}.expert_model_parallel_size",)),
    "sequence_parallel": (("--sequence-parallel",), (f"{_MEGATRON}.sequence_parallel",)),
    "recompute": (("--recompute-granularity",), (f"{_MEGATRON}.override_transformer_config.recompute_granularity",)),
    "optimizer_cpu_offload": (("--optimizer-cpu-offload",), (f"{_OVERRIDE}.optimizer_cpu_offload",)),
    "precision_aware_optimizer": (
        ("--use-precision-aware-optimizer",),
        (f"{_OPTIM}.use_precision_aware_optimizer",),
    ),
    "train_state_offload": (
        ("--colocate", "--offload-train", "--no-offload-train"),
        (f"{_MEGATRON}.param_offload", f"{_MEGATRON}.optimizer_offload", f"{_FSDP}.param_offload",
         f"{_FSDP}.optimizer_offload"),
    ),  # fmt: skip
    "steps": (("--num-rollout",), ("trainer.total_training_steps",)),
    "nodes": (("--actor-num-nodes",), ("trainer.nnodes",)),
}


def _miles_words(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    words = []
    for flag in flags:
        if flag in argv:
            at = argv.index(flag)
            value = argv[at + 1] if at + 1 < len(argv) and not argv[at + 1].startswith("--") else None
            words.append(flag if value is None else f"{flag} {value}")
    return words


def _verl_words(argv: list[str], keys: tuple[str, ...]) -> list[str]:
    words = []
    for token in argv:
        key = token.partition("=")[0].lstrip("+~")
        if any(key == k or key.startswith(k + ".") for k in keys) and token not in words:
            words.append(token)
    return words


def launch_words(knob: str, miles_argv: list[str], verl_argv: list[str]) -> tuple[str, str]:
    """The literal words that set `knob` in each launch ("" when the table has no source for this knob)."""
    if knob not in LAUNCH_SOURCES:
        return "", ""
    flags, keys = LAUNCH_SOURCES[knob]
    miles, verl = _miles_words(miles_argv, flags), _verl_words(verl_argv, keys)
    return " ".join(miles) or NOT_SET, " ".join(verl) or NOT_SET
