"""A Miles train.py argv read back into the parity table's knobs, in Miles's units.

`parse_miles(argv, backend, inventory)` reads the argv as Miles would (last occurrence wins); an absent flag takes
the default Miles applies for that backend (from the flag inventory). The entry point (train.py or train_async.py)
decides the loop rows; in --megatron-to-hf-mode bridge only the args Miles copies onto the model provider
(`_apply_bridge_runtime_config`) reach the model, so the MoE router dtype row says what the model really uses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scripts.benchmark.frameworks import knob_values as spelled
from scripts.benchmark.frameworks.knob_values import MIB, kl_type, offload_state, on_off, recompute
from scripts.benchmark.frameworks.miles.flags import flag_default, load_inventory, split_flags
from scripts.benchmark.frameworks.sglang_version import SGLANG_DECODE_GRAPH_RENAME, version_tuple

MILES_DEAD_FLAGS = {
    "--log-probs-max-tokens-per-gpu",
    "--warmup-ratio",
    "--wandb-run-name",
    "--fsdp-state-dict-cpu-offload",
}


class _Miles:
    """Read a Miles argv as Miles would: last occurrence wins, absent flags take the backend's default."""

    def __init__(self, argv: list[str], backend: str, inventory: dict):
        self.backend, self.inventory = backend, inventory
        self.flags = {flag: values for flag, values in split_flags(argv)}
        self.entry = next((Path(token).name for token in argv if token.endswith(".py")), "train.py")

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


def parse_miles(
    argv: list[str], backend: str, inventory: dict | None = None, bundled_sglang: str | None = None
) -> dict[str, Any]:
    """`bundled_sglang`: the SGLang a released Miles target bundles (None: the sglang-miles fork of the source
    target), which sets the engine-version and default-prefill-graph rows."""
    m = _Miles(argv, backend, inventory or load_inventory())
    colocate = m.has("--colocate")
    knobs: dict[str, Any] = {}
    knobs.update(_miles_data(m))
    knobs.update(_miles_batch_and_loss(m))
    knobs.update(_miles_optimizer(m))
    knobs.update(_miles_rollout(m, colocate, bundled_sglang))
    knobs.update(_miles_backend(m, backend, colocate))
    knobs.update(_miles_run(m, colocate))
    knobs.update(_miles_loop(m))
    if m.has("--load-debug-rollout-data"):
        knobs["rollout_replay"] = REPLAY_EXTRAS
    return knobs


REPLAY_EXTRAS = "recorded rollout, no SGLang engine (debug_train_only): no generation, no weight sync"
"""What a Miles replay does besides training: nothing (arguments.py forces debug_train_only with the load switch)."""


# SGLang code facts: Miles @31f1ca9 runs its sglang-miles fork of 0.5.16, whose default prefill backend on CUDA is
# breakable (segmented capture, no torch.compile: `default_prefill_backend`), read from the 0.5.16 release.
MILES_SGLANG = "0.5.16"
ENGINE_VERSION = f"sglang {MILES_SGLANG} + Miles's patches (sglang-miles)"
PREFILL_DEFAULT = "breakable (sglang 0.5.16 default)"


def _miles_loop(m: _Miles) -> dict[str, Any]:
    """train.py: generate, train, update, in turn. train_async.py: the next rollout starts before training and the
    weight update waits for it (`train_async.py`), so every sample is exactly --update-weights-interval stale.
    --fully-async: FullyAsyncRolloutFn's persistent producer (`_fully_async_loop`)."""
    interval = m.get("--update-weights-interval", int) or 1
    shape = spelled.SYNC_SHAPE
    if m.entry != "train_async.py":
        loop, lag = spelled.SYNCHRONOUS, 0
    elif m.has("--fully-async"):
        return _fully_async_loop(m, interval)
    else:
        loop, lag = (spelled.ONE_STEP_OFF_POLICY if interval == 1 else f"off-policy by {interval} steps"), interval
        shape = spelled.DRAIN_SHAPE
    return {
        "rollout_loop": loop,
        "loop_shape": shape,
        "max_policy_lag": lag,
        "weight_sync_cadence": "every step" if interval == 1 or m.entry == "train.py" else f"every {interval} steps",
        "partial_rollout": spelled.NOTHING_IN_FLIGHT,
        "first_steps_composition": spelled.FILE_BATCHES,
    }


def _memory_release(m: _Miles, colocate: bool) -> str:
    """Colocated, Miles releases its engines' memory after generation (offload_rollout); SGLang keeps a CPU copy of
    the weights only with --sglang-enable-weights-cpu-backup, which Miles itself turns on for LoRA alone
    (`sglang_engine.py`): the update then overwrites weights it reallocated, never copied."""
    if not colocate:
        return "kept"
    return spelled.RELEASED_WITH_COPY if m.has("--sglang-enable-weights-cpu-backup") else spelled.RELEASED_WITHOUT_COPY


def _fully_async_shape(m: _Miles) -> str:
    """What the rollout pool holds around an update: the producer's groups in flight and the data buffer's finished
    groups (`fully_async_rollout.py`, `fully_async_data_buffer.py`), in batches of the step."""
    batch = m.get("--rollout-batch-size", int)
    concurrent = m.get("--async-max-concurrent-samples", int)
    in_flight = concurrent // m.get("--n-samples-per-prompt", int) / batch if concurrent else 1
    buffered = int(m.get("--async-data-buffer-capacity-factor", float) * batch) / batch
    counts = (f"{count:g}" for count in (in_flight, buffered, in_flight + buffered))
    return spelled.FULLY_ASYNC_SHAPE.format(*counts, m.get("--async-unused-samples-handler"))


def _fully_async_loop(m: _Miles, interval: int) -> dict[str, Any]:
    """The producer keeps --async-max-concurrent-samples (default one batch) generating, backfilled per group
    (`fully_async_rollout.py`); the data buffer drops a group whose oldest weight version is more than
    --max-weight-staleness behind the engines' version when the batch is drained (`fully_async_data_buffer.py`);
    train_async.py drains the next batch before the update that precedes its training (`train_async.py`), so the
    policy that trains it is one version newer (weights updated every step): the lag bound against the training
    policy is the flag plus one, by the version each sample finished under."""
    bound, pause = m.get("--max-weight-staleness", int), m.get("--pause-generation-mode") or "retract"
    lag = "unbounded" if bound is None else bound + 1
    one_step = lag == 1 and interval == 1
    return {
        "rollout_loop": spelled.ONE_STEP_OFF_POLICY if one_step else f"fully async (staleness bound {lag})",
        "loop_shape": _fully_async_shape(m),
        "max_policy_lag": lag if lag == "unbounded" else spelled.FINISH_VERSION.format(lag),
        "weight_sync_cadence": "every step" if interval == 1 else f"every {interval} steps",
        "partial_rollout": spelled.PAUSED_IN_FLIGHT.get(pause, pause),  # an unknown mode: refused, named
        "first_steps_composition": spelled.BY_COMPLETION_ALWAYS,
    }


def _miles_data(m: _Miles) -> dict[str, Any]:
    data = m.get("--prompt-data") or ""
    path, _, rows = data.partition("@")
    max_prompt = m.get("--rollout-max-prompt-len", int)
    kwargs = json.loads(m.get("--apply-chat-template-kwargs") or "{}")
    rm_type, reward_key = m.get("--rm-type"), m.get("--reward-key")
    scorer = "math_dapo" if (rm_type, reward_key) == ("dapo", "score") else f"{rm_type}, key {reward_key} (own scorer)"
    if m.has("--custom-rm-path"):
        scorer = f"custom {m.get('--custom-rm-path')}"
    return {
        "prompt_rows": f"{Path(path).name}{rows}" if rows else f"{Path(path).name} (whole file)",
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
        "kl_loss_coef": m.get("--kl-loss-coef", float) if kl_loss else spelled.NOT_KL,
        "kl_loss_type": kl_type(m.get("--kl-loss-type")) if kl_loss else spelled.NOT_KL,
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


def _miles_rollout(m: _Miles, colocate: bool, bundled_sglang: str | None) -> dict[str, Any]:
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
        "cuda_graphs": on_off(not m.has("--sglang-disable-cuda-graph")),
        "cuda_graph_max_bs": (
            m.get("--sglang-cuda-graph-max-bs-decode", int)
            or m.get("--sglang-cuda-graph-max-bs", int)
            or spelled.NO_CAP.format(bundled_sglang or MILES_SGLANG)
        ),
        "weight_sync_bucket_mb": (m.get("--update-weight-buffer-size", int) or 0) // MIB,
        "rollout_memory_release": _memory_release(m, colocate),
        "rollout_memory_saver": on_off(colocate),
        "prefill_cuda_graphs": _prefill_graphs(m, colocate, bundled_sglang),
        "rollout_engine_version": (
            f"sglang {bundled_sglang} (bundled with this Miles release)" if bundled_sglang else ENGINE_VERSION
        ),
        "completion_wait": "event-driven",
        "health_checks": "30 s probe + engine recovery" if m.has("--use-fault-tolerance") else "off",
        "rollout_dumps": f"on ({', '.join(dumps)})" if dumps else "off",
        "dead_or_ignored_keys": sorted(set(m.flags) & MILES_DEAD_FLAGS) or "none",
    }


def _prefill_graphs(m: _Miles, colocate: bool, bundled_sglang: str | None) -> str:
    """Miles sets --sglang-cuda-graph-backend-prefill disabled under --colocate when it is not given
    (`miles/utils/arguments.py`); a release on SGLang before 0.5.14 sets --sglang-disable-piecewise-cuda-graph
    under --colocate instead (miles-rl 0.0.2), and captures piecewise prefill graphs otherwise."""
    if m.has("--sglang-disable-cuda-graph"):
        return "off"
    if bundled_sglang and version_tuple(bundled_sglang) < SGLANG_DECODE_GRAPH_RENAME:
        off = m.has("--sglang-disable-piecewise-cuda-graph") or (
            colocate and not m.has("--sglang-enforce-piecewise-cuda-graph")
        )
        return "off" if off else f"piecewise (sglang {bundled_sglang} default)"
    chosen = m.get("--sglang-cuda-graph-backend-prefill")
    if chosen is None and colocate:
        chosen = "disabled"
    if chosen == "disabled":
        return "off"
    return f"{chosen} (set by the launch)" if chosen else PREFILL_DEFAULT


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
            "train_state_offload": offload_state(offload_train, offload_train),
            "sequence_packing": "varlen (packed)",
            "ulysses_sp": 1,
            "training_seed": m.get("--seed", int),
            "cuda_allocator": env.get("PYTORCH_CUDA_ALLOC_CONF", "default"),
            "weight_cpu_backup": "none",
        }
    tp = m.get("--tensor-model-parallel-size", int)
    offload_train = colocate and not m.has("--no-offload-train")
    return {
        "tp": tp,
        "pp": m.get("--pipeline-model-parallel-size", int),
        "cp": m.get("--context-parallel-size", int),
        "ep": m.get("--expert-model-parallel-size", int),
        "etp": m.get("--expert-tensor-parallel-size", int),
        "sequence_parallel": m.has("--sequence-parallel") and tp > 1,
        "recompute": recompute(
            m.get("--recompute-granularity"), m.get("--recompute-method"), m.get("--recompute-num-layers")
        ),
        "dropout": (m.get("--attention-dropout", float), m.get("--hidden-dropout", float)),
        "megatron_attention_backend": m.get("--attention-backend"),
        "distributed_optimizer": True,
        "optimizer_cpu_offload": m.has("--optimizer-cpu-offload"),
        "precision_aware_optimizer": m.has("--use-precision-aware-optimizer"),
        "grad_reduce_dtype": "fp32" if m.has("--accumulate-allreduce-grads-in-fp32") else "bf16",
        "moe_kernels": _moe(m) if m.has("--num-experts") else spelled.DENSE,
        "moe_router_dtype": _router_dtype(m) if m.has("--num-experts") else spelled.DENSE,
        "hf_weights_loading": (
            "megatron-bridge" if m.get("--megatron-to-hf-mode") == "bridge" else "torch_dist checkpoint"
        ),
        "train_state_offload": offload_state(offload_train, offload_train),
        "training_seed": m.get("--seed", int),
        "weight_cpu_backup": "every step" if colocate else "none",
    }


def _moe(m: _Miles) -> str:
    parts = [f"dispatcher={m.get('--moe-token-dispatcher-type')}", f"grouped_gemm={m.has('--moe-grouped-gemm')}"]
    parts += [f"permute_fusion={m.has('--moe-permute-fusion')}"]
    parts += [f"aux_loss={float(m.get('--moe-aux-loss-coeff') or 0.0)}"]
    return ", ".join(parts)


def _router_dtype(m: _Miles) -> str:
    """Bridge mode never copies --moe-router-dtype onto the provider: the router runs in the model dtype."""
    if m.get("--megatron-to-hf-mode") == "bridge":
        return spelled.MODEL_DTYPE
    return m.get("--moe-router-dtype") or spelled.MODEL_DTYPE


def _miles_run(m: _Miles, colocate: bool) -> dict[str, Any]:
    nodes, per_node = m.get("--actor-num-nodes", int), m.get("--actor-num-gpus-per-node", int)
    trackers = [f for f in ("--use-wandb", "--use-tensorboard", "--use-mlflow", "--use-prometheus") if m.has(f)]
    return {
        "layout": "colocated" if colocate else "disaggregated",
        "train_gpus": nodes * per_node,
        "rollout_gpus": nodes * per_node if colocate else m.get("--rollout-num-gpus", int),
        "nodes": nodes,
        "steps": m.get("--num-rollout", int),
        "evaluation": "on" if m.has("--eval-interval") else "off",
        "checkpoint_save": "on" if (m.has("--save") or m.has("--save-interval")) else "off",
        "resume": "possible (--load)" if m.has("--load") else "off",
        "external_trackers": [f.removeprefix("--use-") for f in trackers] or "none",
        "tracking": f"wandb (project {m.get('--wandb-project')})" if m.has("--use-wandb") else "off",
        "metric_sink": "event log (--save-debug-event-data)" if m.has("--save-debug-event-data") else "stdout",
    }
