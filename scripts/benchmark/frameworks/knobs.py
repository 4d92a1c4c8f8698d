"""Every parity knob declared once: its group, value type, unit, and what a difference between two launches costs.

A knob's value is one of three types (`Knob.kind`):
- `number`: an int or float (a list of them for a knob of several parts), or one of the knob's named words;
- `enum`: one of the knob's shared spellings (`{}` in a spelling stands for a value read from the launch);
- `note`: free text (or a list of texts), with the reason the value cannot be typed (`Knob.why_free`).

Every framework's parity parser returns these types; `Knob.problem(value)` says why a value is not of its knob's
type, and the plan refuses the pair naming the knob and the parser (plan/parity.py). `KNOBS` is the table's row
order; `knob_list_markdown()` is the list docs/benchmark/adding-a-framework.md prints.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from scripts.benchmark.common.markdown import markdown_table
from scripts.benchmark.frameworks import knob_values as v

Kind = Literal["number", "enum", "note"]
SWITCH = (True, False)
NO_TIME = "none on time; what the run learns"
LOOP = "another loop: the steps are not the same work"


@dataclass(frozen=True)
class Knob:
    name: str
    group: str
    kind: Kind
    cost: str
    """What a difference between the two sides costs (or changes), in a phrase."""
    unit: str = ""
    spellings: tuple[Any, ...] = ()
    """enum: every value it may take; number: the words it may take instead of a number."""
    why_free: str = ""
    """note: why its value cannot be typed."""
    matched_cost: str = ""
    """The note of a matched row whose value still costs time, on both sides alike."""

    def problem(self, value: Any) -> str | None:
        """Why `value` is not of this knob's type; None when it is."""
        if self.kind == "note":
            texts = value if isinstance(value, list) else [value]
            return None if texts and all(isinstance(t, str) and t for t in texts) else "not text"
        if self.kind == "number" and (_number(value) or _numbers(value)):
            return None
        if any(_spelled(value, spelling) for spelling in self.spellings):
            return None
        words = ", ".join(_shown(s) for s in self.spellings)
        if self.kind == "number":
            return f"not a number{f' nor one of {words}' if words else ''}"
        return f"not one of {words}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _numbers(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(_number(x) for x in value)


@cache
def _pattern(spelling: str) -> re.Pattern:
    return re.compile(".+".join(re.escape(part) for part in spelling.split("{}")))


def _spelled(value: Any, spelling: Any) -> bool:
    if isinstance(spelling, bool) or not isinstance(value, str):
        return value is spelling
    return value == spelling or ("{}" in spelling and _pattern(spelling).fullmatch(value) is not None)


def _shown(spelling: Any) -> str:
    return repr(spelling) if isinstance(spelling, str) else str(spelling).lower()


def _n(name: str, group: str, unit: str, cost: str, *words: str, matched_cost: str = "") -> Knob:
    return Knob(name, group, "number", cost, unit, words, matched_cost=matched_cost)


def _e(name: str, group: str, cost: str, *spellings: Any, matched_cost: str = "") -> Knob:
    return Knob(name, group, "enum", cost, "", spellings, matched_cost=matched_cost)


def _free(name: str, group: str, cost: str, why: str) -> Knob:
    return Knob(name, group, "note", cost, why_free=why)


KNOBS: tuple[Knob, ...] = (
    _e("prompt_rows", "data", "other prompts: other response lengths and step times", "{}[{}:{}]", "{} (whole file)"),
    _e("prompt_order", "data", "other prompts in each step: other step times", "file order", "shuffled (seed {})"),
    _e("chat_template", "data", "other prompt tokens, so other responses", "raw", "applied {}"),
    _n("max_prompt_tokens", "data", "tokens", "longer prompts admitted: more prefill and training"),
    _e(
        "overlong_prompts",
        "data",
        "other or truncated prompts",
        "dropped at load",
        "kept",
        "left-truncated at rollout",
    ),
    _n("max_response_tokens", "data", "tokens", "longer responses allowed: more generation and training"),
    _e(
        "reward_scorer",
        "reward",
        "scoring time (small) and what the run learns",
        "math_dapo",
        "custom {}",
        "{} (own scorer)",
        "{} via {} manager",
    ),
    _n("prompts_per_step", "batch", "prompts", "the work of a step scales with it"),
    _n("samples_per_prompt", "batch", "samples", "the work of a step scales with it"),
    _n("samples_per_optimizer_step", "batch", "samples", "more or fewer optimizer steps and gradient syncs"),
    _n("optimizer_steps_per_step", "batch", "optimizer steps", "each adds an optimizer step and a gradient sync"),
    _n("ppo_epochs", "batch", "passes over the batch", "each pass repeats the training work"),
    _e("dynamic_batching", "batch", "padding and micro-batch count: training time", *SWITCH),
    _n("max_tokens_per_gpu", "batch", "tokens per micro-batch", "micro-batch count and memory: training time"),
    _n("logprob_max_tokens_per_gpu", "batch", "tokens per micro-batch", "log-prob micro-batches: their forward time"),
    _e("dp_load_balancing", "batch", "stragglers between data-parallel ranks", "balanced", "not balanced"),
    _e(
        "advantage_estimator",
        "grpo",
        "another algorithm",
        "grpo",
        "gae",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
    ),
    _e("std_normalization", "grpo", NO_TIME, *SWITCH),
    _n("clip_low", "grpo", "ratio", NO_TIME),
    _n("clip_high", "grpo", "ratio", NO_TIME),
    _n("dual_clip", "grpo", "ratio", NO_TIME, "off"),
    _e(
        "loss_aggregation",
        "grpo",
        NO_TIME,
        "token-mean",
        "seq-mean-token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-sum-norm",
    ),
    _e("kl_loss", "grpo", "a reference forward every step", *SWITCH),
    _n("kl_loss_coef", "grpo", "coefficient", NO_TIME, v.NOT_KL),
    _e("kl_loss_type", "grpo", NO_TIME, "k1", "k2", "k3", "low_var_kl", "abs", v.NOT_KL),
    _e("kl_in_reward", "grpo", "a reference forward every step", *SWITCH),
    _e("reference_model", "grpo", "a reference log-prob forward every step", "forward every step", "none"),
    _n("entropy_coef", "grpo", "coefficient", NO_TIME),
    _e("old_logprobs", "grpo", "an actor forward every step", "recomputed by the actor", "rollout log-probs"),
    _e("optimizer", "optimizer", "optimizer step time and memory", "adamw", "sgd"),
    _n("lr", "optimizer", "learning rate", NO_TIME),
    _e("lr_schedule", "optimizer", NO_TIME, "constant", "linear", "cosine", "inverse-square-root", "WSD"),
    _n("lr_warmup_steps", "optimizer", "optimizer steps", NO_TIME, "fraction {}"),
    _n("weight_decay", "optimizer", "coefficient", NO_TIME),
    _n("adam_beta1", "optimizer", "coefficient", NO_TIME),
    _n("adam_beta2", "optimizer", "coefficient", NO_TIME),
    _n("adam_eps", "optimizer", "epsilon", NO_TIME),
    _n("clip_grad", "optimizer", "max gradient norm", NO_TIME),
    _n("temperature", "sampling", "temperature", "other response lengths: generation and training time"),
    _n("top_p", "sampling", "probability mass", "other response lengths: generation and training time"),
    _n("top_k", "sampling", "tokens (-1: all)", "other response lengths: generation and training time"),
    _free(
        "sampling_seed",
        "sampling",
        "none per token; response lengths vary run to run",
        "how a framework seeds its engine and requests has no shared vocabulary",
    ),
    _e("rollout_engine", "rollout", "another engine: all of generation", "sglang", "vllm"),
    _n("gpus_per_engine", "rollout", "GPUs", "engine parallelism: generation time"),
    _n("mem_fraction", "rollout", "fraction of GPU memory", "KV-cache size: requests run at once", "sglang auto"),
    _n("max_running_requests", "rollout", "requests per engine", "decode batch size", "sglang auto"),
    _e(
        "client_concurrency",
        "rollout",
        "where requests queue: the client or the server (small)",
        "{} in flight per engine",
        "every prompt of the step submitted at once (agent loop)",
    ),
    _n("chunked_prefill", "rollout", "tokens", "prefill chunking: generation time", "sglang default"),
    _free(
        "rollout_attention_backend",
        "rollout",
        "attention kernels: generation time",
        "SGLang's own backend names, passed through from the spec (free text there) or its default",
    ),
    _e("cuda_graphs", "rollout", "decode without CUDA graphs: much slower generation", "on", "off"),
    _n("cuda_graph_max_bs", "rollout", "requests", "larger decode batches run without graphs", v.NO_CAP),
    _n("weight_sync_bucket_mb", "rollout", "MiB", "weight-update transfer granularity: weight_sync time"),
    _e(
        "rollout_memory_release",
        "rollout",
        "copies or re-allocations every step: generate and weight_sync time",
        "kept",
        v.RELEASED_WITHOUT_COPY,
        v.RELEASED_WITH_COPY,
        v.KV_RELEASED,
    ),
    _e("rollout_memory_saver", "rollout", "bookkeeping; colocated, release and resume time", "on", "off"),
    _e(
        "completion_wait",
        "rollout",
        "generation ends late by up to the poll",
        "event-driven",
        "{} s replay-buffer poll",
    ),
    _e("health_checks", "rollout", "probe requests during generation", "off", "{} s probe + engine recovery"),
    _e("rollout_dumps", "rollout", "every sample written to disk", "off", "on ({})"),
    _e(
        "prefill_cuda_graphs",
        "rollout",
        "prefill cost: rollout time",
        "off",
        "piecewise ({})",
        "breakable ({})",
        "{} (set by the launch)",
    ),
    _free(
        "rollout_engine_version",
        "rollout",
        "another release's scheduler, kernels and defaults: rollout time",
        "an engine release and where it comes from, in each framework's words",
    ),
    _e("gradient_checkpointing", "fsdp", "recompute in the backward: about a third more training FLOPs", *SWITCH),
    _e("fsdp_version", "fsdp", "sharding implementation: training time and memory", "fsdp1", "fsdp2"),
    _e(
        "attn_implementation",
        "fsdp",
        "attention kernels: training time",
        "flash_attention_2",
        "flash_attention_3",
        "sdpa",
    ),
    _e("fsdp_cpu_offload_policy", "fsdp", "the optimizer step on CPU: much slower training", *SWITCH),
    _e("sequence_packing", "fsdp", "padding tokens computed: training time", "varlen (packed)", "padded"),
    _n("ulysses_sp", "fsdp", "GPUs", "sequence parallelism: training time and memory"),
    _free(
        "cuda_allocator",
        "fsdp",
        "memory only (fragmentation, OOM margin)",
        "PyTorch's PYTORCH_CUDA_ALLOC_CONF as set, or `default`",
    ),
    *(_n(name, "megatron", "GPUs", "model parallelism: training time and memory") for name in ("tp", "pp", "cp")),
    *(_n(name, "megatron", "GPUs", "expert parallelism: training time and memory") for name in ("ep", "etp")),
    _e("sequence_parallel", "megatron", "activation memory and communication", *SWITCH),
    _e("recompute", "megatron", "recompute in the backward: more training FLOPs", "none", "{}/{}/{}"),
    _n("dropout", "megatron", "probability (attention, hidden)", "dropout kernels (small); what the run learns"),
    _e("megatron_attention_backend", "megatron", "attention kernels", "flash", "fused", "unfused", "local", "auto"),
    _e("distributed_optimizer", "megatron", "optimizer memory and its communication", *SWITCH),
    _e("optimizer_cpu_offload", "megatron", "the optimizer step on CPU: slower training", *SWITCH),
    _e("precision_aware_optimizer", "megatron", "optimizer state precision: memory and step time", *SWITCH),
    _e("grad_reduce_dtype", "megatron", "gradient communication volume", "fp32", "bf16"),
    _e(
        "moe_kernels",
        "megatron",
        "MoE dispatch and expert GEMMs: training time",
        v.DENSE,
        "dispatcher={}, grouped_gemm={}, permute_fusion={}, aux_loss={}",
    ),
    _e("moe_router_dtype", "megatron", "router precision (small)", v.DENSE, v.MODEL_DTYPE, "fp32", "fp64"),
    _e("hf_weights_loading", "megatron", "start-up only", "megatron-bridge", "torch_dist checkpoint"),
    _e("layout", "placement", LOOP, "colocated", "disaggregated"),
    _n("train_gpus", "placement", "GPUs", "other hardware"),
    _n("rollout_gpus", "placement", "GPUs", "other hardware"),
    _n("nodes", "placement", "nodes", "other hardware and interconnect"),
    _e(
        "train_state_offload",
        "placement",
        "CPU-GPU copies around generation",
        v.RESIDENT,
        "params+optimizer during rollout",
        "params only during rollout",
        "optimizer only during rollout",
    ),
    _e(
        "weight_cpu_backup",
        "placement",
        "copies of the model to CPU and back every step",
        "none",
        "every step",
        "training model copied to CPU {}x and back {}x per step (old-policy weights)",
    ),
    _e(
        "rollout_loop",
        "loop",
        LOOP,
        v.SYNCHRONOUS,
        v.ONE_STEP_OFF_POLICY,
        "off-policy by {} steps",
        "fully async (staleness bound {})",
        "{} (warm-up {}, threshold {}, {})",
    ),
    _e(
        "loop_shape",
        "loop",
        "how busy the rollout pool stays: step time",
        v.SYNC_SHAPE,
        v.DRAIN_SHAPE,
        v.SUBMIT_AHEAD_SHAPE,
        v.FULLY_ASYNC_SHAPE,
    ),
    _n(
        "max_policy_lag",
        "loop",
        "weight versions",
        "how much generation may overlap training",
        "unbounded",
        v.FINISH_VERSION,
        matched_cost="the bound the launches set; the lag the runs log is in the report's policy_lag",
    ),
    _e("weight_sync_cadence", "loop", "weight updates per step", "every step", "every {} steps"),
    _e(
        "partial_rollout",
        "loop",
        "re-prefilled or wasted generation at each update",
        v.NOTHING_IN_FLIGHT,
        v.ABORTED_AND_REPREFILLED,
        *v.PAUSED_IN_FLIGHT.values(),
    ),
    _e(
        "first_steps_composition",
        "loop",
        "other prompts in the first steps",
        v.FILE_BATCHES,
        v.BY_COMPLETION_OVER,
        v.BY_COMPLETION_ALWAYS,
    ),
    _n("steps", "run", "steps", "run length: what the steady state can use"),
    _n("training_seed", "run", "seed", "none: the weights come from the checkpoint", "unused ({})"),
    _e("evaluation", "run", "evaluation passes inside the run", "on", "off"),
    _e("checkpoint_save", "run", "checkpoint writes inside the run", "on", "off"),
    _e("resume", "run", "a resumed run starts mid-schedule", "off", "possible (--load)", "{} (resumes)"),
    _free("external_trackers", "run", "a logger in the run", "each framework's own logger names, or `none`"),
    _e(
        "tracking",
        "run",
        "a network logger in the run",
        "off",
        "wandb (project {})",
        matched_cost="wandb adds a network logger (background upload) to both runs; equal cost, never the metric sink",
    ),
    _free("metric_sink", "run", "writing the metrics (milliseconds per step)", "each framework's own sink"),
    _free(
        "dead_or_ignored_keys",
        "run",
        "settings that do nothing, written by someone who expected an effect",
        "each framework's own flags or keys, or `none`; anything listed is a mismatch",
    ),
    _free(
        "rollout_replay",
        "run",
        "the training-step comparison only (train-only plans)",
        "what a framework still runs besides training in a replay, in its own words",
    ),
)
BY_NAME: dict[str, Knob] = {knob.name: knob for knob in KNOBS}


def _type_text(knob: Knob) -> str:
    if knob.kind == "note":
        return f"note: {knob.why_free}"
    words = ", ".join(f"`{s}`" if isinstance(s, str) else f"`{str(s).lower()}`" for s in knob.spellings)
    if knob.kind == "number":
        return f"number, or {words}" if words else "number"
    return f"one of {words}"


def knob_list_markdown() -> str:
    """The knob list of docs/benchmark/adding-a-framework.md: one row per knob, in table order."""
    rows = [[k.group, f"`{k.name}`", k.unit, _type_text(k), k.cost] for k in KNOBS]
    return markdown_table(["group", "knob", "unit", "type and spellings", "what a difference costs"], rows)
