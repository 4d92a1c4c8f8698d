"""The literal Miles flags that set each parity knob (the parity table prints them next to the canonical value).

`launch_words(knob, argv)`: the flags (with their value) of `argv` that set `knob`, "" when none does, None when
the knob has no source here.
"""

from __future__ import annotations

LAUNCH_FLAGS: dict[str, tuple[str, ...]] = {
    "prompt_rows": ("--prompt-data",),
    "max_prompt_tokens": ("--rollout-max-prompt-len",),
    "max_response_tokens": ("--rollout-max-response-len",),
    "prompts_per_step": ("--rollout-batch-size",),
    "samples_per_prompt": ("--n-samples-per-prompt",),
    "samples_per_optimizer_step": ("--global-batch-size",),
    "max_tokens_per_gpu": ("--max-tokens-per-gpu",),
    "advantage_estimator": ("--advantage-estimator",),
    "clip_low": ("--eps-clip",),
    "clip_high": ("--eps-clip-high",),
    "dual_clip": ("--eps-clip-c",),
    "loss_aggregation": ("--calculate-per-token-loss",),
    "kl_loss_coef": ("--kl-loss-coef",),
    "entropy_coef": ("--entropy-coef",),
    "optimizer": ("--optimizer",),
    "lr": ("--lr",),
    "lr_schedule": ("--lr-decay-style",),
    "lr_warmup_steps": ("--lr-warmup-iters",),
    "weight_decay": ("--weight-decay",),
    "adam_beta1": ("--adam-beta1",),
    "adam_beta2": ("--adam-beta2",),
    "adam_eps": ("--adam-eps",),
    "clip_grad": ("--clip-grad",),
    "temperature": ("--rollout-temperature",),
    "top_p": ("--rollout-top-p",),
    "top_k": ("--rollout-top-k",),
    "gpus_per_engine": ("--rollout-num-gpus-per-engine",),
    "mem_fraction": ("--sglang-mem-fraction-static",),
    "max_running_requests": ("--sglang-max-running-requests",),
    "chunked_prefill": ("--sglang-chunked-prefill-size",),
    "rollout_attention_backend": ("--sglang-attention-backend",),
    "prefill_cuda_graphs": ("--colocate", "--sglang-cuda-graph-backend-prefill", "--sglang-disable-cuda-graph"),
    "gradient_checkpointing": ("--gradient-checkpointing",),
    "tp": ("--tensor-model-parallel-size",),
    "pp": ("--pipeline-model-parallel-size",),
    "cp": ("--context-parallel-size",),
    "ep": ("--expert-model-parallel-size",),
    "sequence_parallel": ("--sequence-parallel",),
    "recompute": ("--recompute-granularity",),
    "optimizer_cpu_offload": ("--optimizer-cpu-offload",),
    "precision_aware_optimizer": ("--use-precision-aware-optimizer",),
    "train_state_offload": ("--colocate", "--offload-train", "--no-offload-train"),
    "steps": ("--num-rollout",),
    "nodes": ("--actor-num-nodes",),
    "rollout_replay": ("--load-debug-rollout-data",),
}


def launch_words(knob: str, argv: list[str]) -> str | None:
    if knob not in LAUNCH_FLAGS:
        return None
    words = []
    for flag in LAUNCH_FLAGS[knob]:
        if flag in argv:
            at = argv.index(flag)
            value = argv[at + 1] if at + 1 < len(argv) and not argv[at + 1].startswith("--") else None
            words.append(flag if value is None else f"{flag} {value}")
    return " ".join(words)
