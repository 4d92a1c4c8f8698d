"""The parity proof: both emitted launches parsed back (never the spec) into one canonical table of knobs.

- `parse_miles(argv, backend, inventory)`: a Miles train.py argv -> {knob: value} in Miles's units; an absent flag
  takes the default Miles applies for that backend (from the flag inventory).
- `parse_verl(argv, prepare_argv)`: VERL main_ppo overrides -> the same knobs (prompts converted to samples, clip and
  optimizer keys read where each engine really reads them); absent keys take VERL 0.9.1's defaults (`VERL_DEFAULTS`,
  checked against the real config by the tests). Keys VERL ignores are reported as a knob of their own.
- `build_parity(...) -> list[ParityRow]`: one row per knob: value per cell, `matched` or `asymmetry` (declared, with a
  one-line note of the expected throughput effect). A difference that is not declared raises `ParityError`.
- `parity_json(...)`, `parity_markdown(...)`: what the plan writes as parity.json / parity.md.

Caveats:
- Values VERL takes from elsewhere than its config (dropout from the HF config through mbridge, gradient all-reduce
  in fp32, the 2 s replay-buffer poll) are VERL 0.9.1 code facts, named as such in the note.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scripts.benchmark.frameworks.miles.flags import flag_default, load_inventory, split_flags
from scripts.benchmark.frameworks.verl.data import parse_converted_name

AR = "actor_rollout_ref"
NEUTRAL_DUAL_CLIP_MIN = 1.0e8
MIB = 1024 * 1024

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
# Keys that compose in VERL 0.9.1 but that main_ppo or the chosen engine never reads (verl.md 3.4, Gotchas 12-15, 17).
VERL_IGNORED_PREFIXES = ("reward_model.", "custom_reward_function.")
VERL_IGNORED_KEYS = {
    "both": {f"{AR}.actor.grad_clip", f"{AR}.actor.fsdp_config.strategy", "trainer.balance_batch"},
    "sglang": {f"{AR}.rollout.enable_chunked_prefill", f"{AR}.rollout.max_num_batched_tokens", f"{AR}.rollout.seed"},
    "megatron": {f"{AR}.actor.optim.betas", f"{AR}.model.enable_gradient_checkpointing"},
}
MILES_DEAD_FLAGS = {
    "--log-probs-max-tokens-per-gpu",
    "--warmup-ratio",
    "--wandb-run-name",
    "--fsdp-state-dict-cpu-offload",
}


class ParityError(ValueError):
    """A knob differs between the Miles and the VERL launch and is not a declared asymmetry."""

    def __init__(self, message: str, rows: list | None = None):
        super().__init__(message)
        self.rows = rows or []


@dataclass(frozen=True)
class ParityRow:
    knob: str
    group: str
    miles: Any
    verl: Any
    status: str
    note: str


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
    return text.strip("'\"")


def _verl_overrides(argv: list[str]) -> dict[str, Any]:
    start = argv.index("verl.trainer.main_ppo") + 1 if "verl.trainer.main_ppo" in argv else 0
    values: dict[str, Any] = {}
    for token in argv[start:]:
        key, sep, value = token.partition("=")
        if sep and not key.startswith("hydra."):
            values[key.lstrip("+")] = parse_hydra_value(value)
    return values


class _Miles:
    """Read a Miles argv as Miles would: last occurrence wins, absent flags take the backend's default."""

    def __init__(self, argv: list[str], backend: str, inventory: dict):
        self.backend, self.inventory = backend, inventory
        self.flags = {flag: values for flag, values in split_flags(argv)}

    def has(self, flag: str) -> bool:
        return flag in self.flags

    def get(self, flag: str, cast=str):
        if flag in self.flags and self.flags[flag]:
            return cast(self.flags[flag][0])
        try:
            default = flag_default(self.inventory, self.backend, flag)
        except KeyError:
            return None
        return None if default is None else cast(default)


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def parse_miles(argv: list[str], backend: str, inventory: dict | None = None) -> dict[str, Any]:
    m = _Miles(argv, backend, inventory or load_inventory())
    colocate = m.has("--colocate")
    knobs: dict[str, Any] = {}
    knobs.update(_miles_data(m))
    knobs.update(_miles_batch_and_loss(m))
    knobs.update(_miles_optimizer(m))
    knobs.update(_miles_rollout(m, colocate))
    knobs.update(_miles_backend(m, backend, colocate))
    knobs.update(_miles_run(m, colocate))
    return knobs


def _miles_data(m: _Miles) -> dict[str, Any]:
    data = m.get("--prompt-data") or ""
    path, _, rows = data.partition("@")
    max_prompt = m.get("--rollout-max-prompt-len", int)
    kwargs = json.loads(m.get("--apply-chat-template-kwargs") or "{}")
    rm_type, reward_key = m.get("--rm-type"), m.get("--reward-key")
    scorer = (
        "math_dapo" if (rm_type, reward_key) == ("dapo", "score") else f"miles {rm_type} (reward key {reward_key})"
    )
    if m.has("--custom-rm-path"):
        scorer = f"custom {m.get('--custom-rm-path')}"
    return {
        "prompt_rows": f"{Path(path).name}{rows}",
        "prompt_order": f"shuffled (seed {m.get('--rollout-seed')})" if m.has("--rollout-shuffle") else "file order",
        "chat_template": f"applied {json.dumps(kwargs, sort_keys=True)}" if m.has("--apply-chat-template") else "raw",
        "max_prompt_tokens": max_prompt,
        "overlong_prompts": "dropped at load" if max_prompt else "kept",
        "max_response_tokens": m.get("--rollout-max-response-len", int),
        "reward_scorer": scorer,
    }


def _miles_batch_and_loss(m: _Miles) -> dict[str, Any]:
    rbs, n, gbs = (
        m.get("--rollout-batch-size", int),
        m.get("--n-samples-per-prompt", int),
        m.get("--global-batch-size", int),
    )
    kl_loss, kl_coef = m.has("--use-kl-loss"), m.get("--kl-coef", float) or 0.0
    eps_clip = m.get("--eps-clip", float)
    budget = m.get("--max-tokens-per-gpu", int)
    return {
        "prompts_per_step": rbs,
        "samples_per_prompt": n,
        "samples_per_optimizer_step": gbs,
        "optimizer_steps_per_step": (rbs * n // gbs) if (rbs and n and gbs) else None,
        "ppo_epochs": 1,
        "dynamic_batching": m.has("--use-dynamic-batch-size"),
        "max_tokens_per_gpu": budget,
        "logprob_max_tokens_per_gpu": budget,
        "dp_load_balancing": "balanced" if m.has("--balance-data") else "not balanced",
        "advantage_estimator": m.get("--advantage-estimator"),
        "std_normalization": not m.has("--disable-grpo-std-normalization"),
        "clip_low": eps_clip,
        "clip_high": m.get("--eps-clip-high", float) or eps_clip,
        "dual_clip": m.get("--eps-clip-c", float) or "off",
        "loss_aggregation": "token-mean" if m.has("--calculate-per-token-loss") else "seq-mean-token-mean",
        "kl_loss": kl_loss,
        "kl_loss_coef": m.get("--kl-loss-coef", float) if kl_loss else "n/a (no KL loss)",
        "kl_loss_type": _kl_type(m.get("--kl-loss-type")) if kl_loss else "n/a (no KL loss)",
        "kl_in_reward": kl_coef != 0.0,
        "reference_model": "forward every step" if (kl_loss or kl_coef != 0.0) else "none",
        "entropy_coef": m.get("--entropy-coef", float),
        "old_logprobs": "rollout log-probs" if m.has("--use-rollout-logprobs") else "recomputed by the actor",
    }


def _miles_optimizer(m: _Miles) -> dict[str, Any]:
    warmup = m.get("--lr-warmup-iters", int) or 0
    return {
        "optimizer": "adamw" if m.get("--optimizer") == "adam" else m.get("--optimizer"),
        "lr": m.get("--lr", float),
        "lr_schedule": m.get("--lr-decay-style"),
        "lr_warmup_steps": (
            warmup if not m.has("--lr-warmup-fraction") else f"fraction {m.get('--lr-warmup-fraction')}"
        ),
        "weight_decay": m.get("--weight-decay", float),
        "adam_beta1": m.get("--adam-beta1", float),
        "adam_beta2": m.get("--adam-beta2", float),
        "adam_eps": m.get("--adam-eps", float),
        "clip_grad": m.get("--clip-grad", float),
        "temperature": m.get("--rollout-temperature", float),
        "top_p": m.get("--rollout-top-p", float),
        "top_k": m.get("--rollout-top-k", int),
        "sampling_seed": f"engine seed {m.get('--seed')} + rank, requests unseeded",
    }


def _miles_rollout(m: _Miles, colocate: bool) -> dict[str, Any]:
    concurrency = m.get("--sglang-server-concurrency", int)
    dumps = [f for f in ("--dump-details", "--save-debug-rollout-data") if m.has(f)]
    return {
        "rollout_engine": "sglang",
        "gpus_per_engine": m.get("--rollout-num-gpus-per-engine", int),
        "mem_fraction": m.get("--sglang-mem-fraction-static", float) or "sglang auto",
        "max_running_requests": m.get("--sglang-max-running-requests", int) or "sglang auto",
        "client_concurrency": f"{concurrency} in flight per engine",
        "chunked_prefill": m.get("--sglang-chunked-prefill-size", int) or "sglang default",
        "rollout_attention_backend": m.get("--sglang-attention-backend") or "sglang default",
        "cuda_graphs": _on(not m.has("--sglang-disable-cuda-graph")),
        "cuda_graph_max_bs": m.get("--sglang-cuda-graph-max-bs", int) or "sglang default",
        "weight_sync_bucket_mb": (m.get("--update-weight-buffer-size", int) or 0) // MIB,
        "rollout_memory_release": "released after generation" if colocate else "kept",
        "rollout_memory_saver": _on(colocate),
        "completion_wait": "event-driven",
        "health_checks": "30 s probe + engine recovery" if m.has("--use-fault-tolerance") else "off",
        "rollout_dumps": f"on ({', '.join(dumps)})" if dumps else "off",
        "dead_or_ignored_keys": sorted(set(m.flags) & MILES_DEAD_FLAGS) or "none",
    }


def _miles_backend(m: _Miles, backend: str, colocate: bool) -> dict[str, Any]:
    if backend == "fsdp":
        cpu_offload = m.has("--fsdp-cpu-offload")
        offload_train = colocate and not cpu_offload and not m.has("--no-offload-train")
        env = json.loads(m.get("--train-env-vars") or "{}")
        return {
            "gradient_checkpointing": m.has("--gradient-checkpointing"),
            "fsdp_version": "fsdp2",
            "attn_implementation": m.get("--attn-implementation"),
            "fsdp_cpu_offload_policy": cpu_offload,
            "train_state_offload": "params+optimizer during rollout" if offload_train else "resident",
            "sequence_packing": "varlen (packed)",
            "ulysses_sp": 1,
            "training_seed": m.get("--seed", int),
            "cuda_allocator": env.get("PYTORCH_CUDA_ALLOC_CONF", "default"),
        }
    tp = m.get("--tensor-model-parallel-size", int)
    return {
        "tp": tp,
        "pp": m.get("--pipeline-model-parallel-size", int),
        "cp": m.get("--context-parallel-size", int),
        "ep": m.get("--expert-model-parallel-size", int),
        "etp": m.get("--expert-tensor-parallel-size", int),
        "sequence_parallel": m.has("--sequence-parallel") and tp > 1,
        "recompute": _recompute(
            m.get("--recompute-granularity"), m.get("--recompute-method"), m.get("--recompute-num-layers")
        ),
        "dropout": (m.get("--attention-dropout", float), m.get("--hidden-dropout", float)),
        "megatron_attention_backend": m.get("--attention-backend"),
        "distributed_optimizer": True,
        "optimizer_cpu_offload": m.has("--optimizer-cpu-offload"),
        "precision_aware_optimizer": m.has("--use-precision-aware-optimizer"),
        "grad_reduce_dtype": "fp32" if m.has("--accumulate-allreduce-grads-in-fp32") else "bf16",
        "moe_kernels": _moe(m) if m.has("--num-experts") else "n/a (dense)",
        "hf_weights_loading": (
            "megatron-bridge" if m.get("--megatron-to-hf-mode") == "bridge" else "torch_dist checkpoint"
        ),
        "train_state_offload": (
            "params+optimizer during rollout" if colocate and not m.has("--no-offload-train") else "resident"
        ),
        "training_seed": m.get("--seed", int),
        "weight_cpu_backup": "every step" if colocate else "none",
    }


def _recompute(granularity, method, layers) -> str:
    return "none" if granularity in (None, "None") else f"{granularity}/{method}/{layers}"


def _moe(m: _Miles) -> str:
    parts = [f"dispatcher={m.get('--moe-token-dispatcher-type')}", f"grouped_gemm={m.has('--moe-grouped-gemm')}"]
    parts += [f"permute_fusion={m.has('--moe-permute-fusion')}", f"router_dtype={m.get('--moe-router-dtype')}"]
    parts += [f"aux_loss={float(m.get('--moe-aux-loss-coeff') or 0.0)}"]
    return ", ".join(parts)


def _miles_run(m: _Miles, colocate: bool) -> dict[str, Any]:
    nodes, per_node = m.get("--actor-num-nodes", int), m.get("--actor-num-gpus-per-node", int)
    trackers = [f for f in ("--use-wandb", "--use-tensorboard", "--use-mlflow", "--use-prometheus") if m.has(f)]
    return {
        "layout": "colocated, synchronous" if colocate else "disaggregated, synchronous",
        "train_gpus": nodes * per_node,
        "rollout_gpus": nodes * per_node if colocate else m.get("--rollout-num-gpus", int),
        "nodes": nodes,
        "steps": m.get("--num-rollout", int),
        "evaluation": "on" if m.has("--eval-interval") else "off",
        "checkpoint_save": "on" if (m.has("--save") or m.has("--save-interval")) else "off",
        "resume": "possible (--load)" if m.has("--load") else "off",
        "external_trackers": [f.removeprefix("--use-") for f in trackers] or "none",
        "tracking": f"wandb (project {m.get('--wandb-project')})" if m.has("--use-wandb") else "off",
        "metric_sink": "on" if m.has("--save-debug-event-data") else "off",
    }


def _kl_type(value: str | None) -> str | None:
    return {"kl": "k1", "mse": "k2"}.get(value, value)


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
    return knobs


def _prepare_value(prepare_argv: list[str], flag: str) -> str | None:
    return prepare_argv[prepare_argv.index(flag) + 1] if flag in prepare_argv else None


def _verl_data(v: _Verl, prepare_argv: list[str]) -> dict[str, Any]:
    train_file = str(v.get("data.train_files") or "")
    parsed = parse_converted_name(train_file)
    prefix = "data.apply_chat_template_kwargs."
    kwargs = {k.removeprefix(prefix): val for k, val in v.overrides.items() if k.startswith(prefix)}
    data_source = _prepare_value(prepare_argv, "--data-source") or "unknown (no convert-data step)"
    custom = v.get("reward.custom_reward_function.path")
    manager = v.get("reward.reward_manager.name")
    scorer = f"custom {custom}" if custom else ("math_dapo" if data_source == "math_dapo" else f"{data_source}")
    if manager != "naive":
        scorer += f" via {manager} manager"
    shuffle = v.get("data.shuffle")
    return {
        "prompt_rows": f"{parsed[0]}[{parsed[1]}:{parsed[2]}]" if parsed else train_file,
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
        "kl_loss_coef": v.get(f"{actor}.kl_loss_coef") if kl_loss else "n/a (no KL loss)",
        "kl_loss_type": _kl_type(v.get(f"{actor}.kl_loss_type")) if kl_loss else "n/a (no KL loss)",
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
        "cuda_graphs": _on(not v.get(f"{ro}.enforce_eager")),
        "cuda_graph_max_bs": sglang.get("cuda_graph_max_bs", "sglang default"),
        "weight_sync_bucket_mb": v.get(f"{ro}.checkpoint_engine.update_weights_bucket_megabytes"),
        "rollout_memory_release": (
            "released after generation" if hybrid and v.get(f"{ro}.free_cache_engine") else "kept"
        ),
        "rollout_memory_saver": "on",
        "completion_wait": "2 s replay-buffer poll",
        "health_checks": "off",
        "rollout_dumps": "on (trainer.rollout_data_dir)" if v.get("trainer.rollout_data_dir") else "off",
        "dead_or_ignored_keys": sorted(ignored) or "none",
    }


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
            "train_state_offload": _offload(param, opt),
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
        "recompute": _recompute(
            extra.get("recompute_granularity"), extra.get("recompute_method"), extra.get("recompute_num_layers")
        ),
        "dropout": (0.0, 0.0),
        "megatron_attention_backend": extra.get("attention_backend"),
        "distributed_optimizer": bool(v.get(f"{mg}.use_distributed_optimizer")),
        "optimizer_cpu_offload": bool(optimizer_override.get("optimizer_cpu_offload", False)),
        "precision_aware_optimizer": bool(v.get(f"{AR}.actor.optim.use_precision_aware_optimizer")),
        "grad_reduce_dtype": "fp32",
        "moe_kernels": _verl_moe(extra) if any(k in extra for k in moe_keys) else "n/a (dense)",
        "hf_weights_loading": "megatron-bridge" if v.get(f"{mg}.use_mbridge") else "torch_dist checkpoint",
        "train_state_offload": _offload(v.get(f"{mg}.param_offload"), v.get(f"{mg}.optimizer_offload")),
        "training_seed": seed,
        "weight_cpu_backup": "none",
    }


def _verl_moe(extra: dict) -> str:
    parts = [
        f"dispatcher={extra.get('moe_token_dispatcher_type')}",
        f"grouped_gemm={bool(extra.get('moe_grouped_gemm'))}",
    ]
    parts += [
        f"permute_fusion={bool(extra.get('moe_permute_fusion'))}",
        f"router_dtype={extra.get('moe_router_dtype')}",
    ]
    parts += [f"aux_loss={float(extra.get('moe_aux_loss_coeff', 0.0))}"]
    return ", ".join(parts)


def _offload(param: bool, optimizer: bool) -> str:
    if param and optimizer:
        return "params+optimizer during rollout"
    return "params only during rollout" if param else ("optimizer only during rollout" if optimizer else "resident")


def _verl_run(v: _Verl) -> dict[str, Any]:
    mode = v.get("trainer.v1.trainer_mode")
    nodes, per_node = v.get("trainer.nnodes"), v.get("trainer.n_gpus_per_node")
    if mode == "sync":
        layout, rollout_gpus = "colocated, synchronous", nodes * per_node
    else:
        layout = f"{'disaggregated' if mode == 'separate_async' else 'colocated'}, asynchronous ({mode})"
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
        "metric_sink": "on" if "file" in logger else "off",
    }


# (group, knob) in table order; a knob missing from both parses is skipped (backend-specific groups).
KNOBS: list[tuple[str, str]] = [
    ("data", k) for k in ("prompt_rows", "prompt_order", "chat_template", "max_prompt_tokens", "overlong_prompts")
] + [
    ("data", "max_response_tokens"),
    ("reward", "reward_scorer"),
    *[("batch", k) for k in ("prompts_per_step", "samples_per_prompt", "samples_per_optimizer_step")],
    *[("batch", k) for k in ("optimizer_steps_per_step", "ppo_epochs", "dynamic_batching", "max_tokens_per_gpu")],
    *[("batch", k) for k in ("logprob_max_tokens_per_gpu", "dp_load_balancing")],
    *[("grpo", k) for k in ("advantage_estimator", "std_normalization", "clip_low", "clip_high", "dual_clip")],
    *[("grpo", k) for k in ("loss_aggregation", "kl_loss", "kl_loss_coef", "kl_loss_type", "kl_in_reward")],
    *[("grpo", k) for k in ("reference_model", "entropy_coef", "old_logprobs")],
    *[("optimizer", k) for k in ("optimizer", "lr", "lr_schedule", "lr_warmup_steps", "weight_decay")],
    *[("optimizer", k) for k in ("adam_beta1", "adam_beta2", "adam_eps", "clip_grad")],
    *[("sampling", k) for k in ("temperature", "top_p", "top_k", "sampling_seed")],
    *[("rollout", k) for k in ("rollout_engine", "gpus_per_engine", "mem_fraction", "max_running_requests")],
    *[("rollout", k) for k in ("client_concurrency", "chunked_prefill", "rollout_attention_backend", "cuda_graphs")],
    *[("rollout", k) for k in ("cuda_graph_max_bs", "weight_sync_bucket_mb", "rollout_memory_release")],
    *[("rollout", k) for k in ("rollout_memory_saver", "completion_wait", "health_checks", "rollout_dumps")],
    *[("fsdp", k) for k in ("gradient_checkpointing", "fsdp_version", "attn_implementation")],
    *[("fsdp", k) for k in ("fsdp_cpu_offload_policy", "sequence_packing", "ulysses_sp", "cuda_allocator")],
    *[("megatron", k) for k in ("tp", "pp", "cp", "ep", "etp", "sequence_parallel", "recompute", "dropout")],
    *[("megatron", k) for k in ("megatron_attention_backend", "distributed_optimizer", "optimizer_cpu_offload")],
    *[("megatron", k) for k in ("precision_aware_optimizer", "grad_reduce_dtype", "moe_kernels")],
    *[("megatron", k) for k in ("hf_weights_loading", "weight_cpu_backup")],
    *[("placement", k) for k in ("layout", "train_gpus", "rollout_gpus", "nodes", "train_state_offload")],
    *[("run", k) for k in ("steps", "training_seed", "evaluation", "checkpoint_save", "resume")],
    *[("run", k) for k in ("external_trackers", "tracking", "metric_sink", "dead_or_ignored_keys")],
]

# Notes of matched knobs whose matched value still costs time (the same cost on both sides).
_MATCHED_COST = {
    "tracking": "wandb adds a network logger (background upload) to both runs; equal cost, never the metric sink",
}

# Differences that are inherent to the two frameworks, with their expected effect on throughput.
_ALWAYS_DECLARED = {
    "sampling_seed": "none on cost per token; response lengths vary run to run on both sides (compare medians)",
    "client_concurrency": "small: both servers cap running requests at the same number; VERL queues the rest "
    "in SGLang, Miles in its client",
    "completion_wait": "VERL's generate phase ends up to 2 s late per step (hard-coded poll_interval=2.0)",
}
_FSDP_DECLARED = {
    "training_seed": "none: weights come from the checkpoint and no dropout is active",
    "cuda_allocator": "memory only (fragmentation, OOM margin); Miles's stock FSDP setting is kept",
}
_MEGATRON_DECLARED = {
    "weight_cpu_backup": "Miles's colocated Megatron actor copies weights to CPU every step: extra time in the "
    "Miles step (train_wait)",
}
_DISAGGREGATED_DECLARED = {
    "layout": "VERL 0.9.1 has no synchronous disaggregated mode: its separate_async trainer overlaps generation "
    "of step N+1 with training of N (<= 1 step stale, partial rollout), so its step time is expected lower",
    "rollout_memory_saver": "VERL always enables SGLang's memory saver; without colocation it only adds "
    "bookkeeping, no offload",
}


def declared_asymmetries(backend: str, layout: str) -> dict[str, str]:
    declared = dict(_ALWAYS_DECLARED)
    declared.update(_FSDP_DECLARED if backend == "fsdp" else _MEGATRON_DECLARED)
    if layout == "disaggregated":
        declared.update(_DISAGGREGATED_DECLARED)
    return declared


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def build_parity(
    miles_argv: list[str],
    verl_argv: list[str],
    backend: str,
    layout: str,
    prepare_argv: list[str] | None = None,
    inventory: dict | None = None,
) -> list[ParityRow]:
    """All rows; raises ParityError (carrying the rows) if a knob differs and is not a declared asymmetry."""
    miles, verl = parse_miles(miles_argv, backend, inventory), parse_verl(verl_argv, prepare_argv)
    declared, rows, errors = declared_asymmetries(backend, layout), [], []
    for group, knob in KNOBS:
        if knob not in miles and knob not in verl:
            continue
        a, b = miles.get(knob, "<absent>"), verl.get(knob, "<absent>")
        if _same(a, b):
            note = _MATCHED_COST.get(knob, "") if a not in ("off", "none") else ""
            rows.append(ParityRow(knob, group, a, b, "matched", note))
        elif knob in declared:
            rows.append(ParityRow(knob, group, a, b, "asymmetry", declared[knob]))
        else:
            rows.append(ParityRow(knob, group, a, b, "MISMATCH", "not a declared asymmetry"))
            errors.append(f"{knob}: miles={a!r} verl={b!r}")
    if errors:
        raise ParityError(f"{backend}/{layout}: " + "; ".join(errors), rows)
    return rows


def parity_json(spec_hash: str, pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """pairs: [{"backend", "layout", "miles_cell", "verl_cell", "rows": [ParityRow], "error": str|None}]."""
    out = []
    for pair in pairs:
        rows = [asdict(row) for row in pair["rows"]]
        counts = {s: sum(r["status"] == s for r in rows) for s in ("matched", "asymmetry", "MISMATCH")}
        out.append(
            {
                **{k: pair[k] for k in ("backend", "layout", "miles_cell", "verl_cell", "error")},
                "counts": counts,
                "rows": rows,
            }
        )
    return {"schema_version": 1, "spec_hash": spec_hash, "pairs": out}


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|")


def parity_markdown(parity: dict[str, Any], title: str) -> str:
    lines = [f"# Parity: {title}", "", f"spec_hash `{parity['spec_hash']}`", ""]
    if not parity["pairs"]:
        return "\n".join(lines + ["No VERL cells planned (run with --compare-verl): nothing to compare.", ""])
    for pair in parity["pairs"]:
        c = pair["counts"]
        lines += [f"## {pair['miles_cell']} vs {pair['verl_cell']}", ""]
        lines += [f"{c['matched']} matched, {c['asymmetry']} declared asymmetries, {c['MISMATCH']} mismatches.", ""]
        if pair["error"]:
            lines += [f"**Parity error**: {pair['error']}", ""]
        lines += ["| group | knob | Miles | VERL | status | expected throughput effect |", "|---|---|---|---|---|---|"]
        for r in pair["rows"]:
            lines.append(
                f"| {r['group']} | {r['knob']} | {_cell(r['miles'])} | {_cell(r['verl'])} | {r['status']} | "
                f"{_cell(r['note'])} |"
            )
        lines.append("")
    return "\n".join(lines)
