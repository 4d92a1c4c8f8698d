"""The parity proof: both emitted launches parsed back (never the spec) into one canonical table of knobs.

- `build_parity(...) -> list[ParityRow]`: one row per knob: value per cell, `matched` or `asymmetry` (declared, with a
  one-line note of the expected throughput effect). A difference that is not declared raises `ParityError`. The
  values come from each framework's reader (`frameworks/miles/parity_knobs.py`, `frameworks/verl/parity_knobs.py`).
- Every row also carries the literal words that set the knob in each launch (`miles_launch`, `verl_launch`, from
  plan/parity_sources.py), so the table can be checked against the cell scripts word for word.
- `parity_json(...)`, `parity_markdown(...)`: what the plan writes as parity.json / parity.md (with a legend and a
  link to the manual).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

from scripts.benchmark.frameworks.miles.parity_knobs import parse_miles
from scripts.benchmark.frameworks.verl.parity_knobs import parse_verl
from scripts.benchmark.plan.parity_sources import launch_words
from scripts.benchmark.common.markdown import markdown_table

DOCS = "docs/benchmark/plan.md#the-parity-table-and-declared-asymmetries"
LEGEND = [
    "Legend: **Miles** / **VERL** are the canonical values both launches are read back into (the same unit and",
    "name on both sides); **Miles sets it with** / **VERL sets it with** are the literal flags and overrides of the",
    "cell scripts (`not set: framework default` when no word sets the knob); **status** is `matched`, `asymmetry`",
    "(declared, with its expected throughput effect) or `MISMATCH` (not declared: the plan is refused).",
    "Example: Miles's `--optimizer adam` is Adam with decoupled weight decay, VERL's default `AdamW`: both `adamw`.",
    "`train_state_offload` (weights and optimizer moved to CPU while SGLang generates) is not",
    "`optimizer_cpu_offload` (the optimizer step itself on CPU).",
]


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
    miles_launch: str = ""
    verl_launch: str = ""


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
    *[("megatron", k) for k in ("precision_aware_optimizer", "grad_reduce_dtype", "moe_kernels", "moe_router_dtype")],
    *[("megatron", k) for k in ("hf_weights_loading", "weight_cpu_backup")],
    *[("placement", k) for k in ("layout", "train_gpus", "rollout_gpus", "nodes", "train_state_offload")],
    *[("loop", k) for k in ("rollout_loop", "max_policy_lag", "weight_sync_cadence", "partial_rollout")],
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
    "metric_sink": "none: Miles prints its perf lines to stdout whatever the harness does; VERL's FileLogger "
    "appends one JSON line per step from the driver (milliseconds)",
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
    "partial_rollout": "cannot be matched: VERL's separate_async always aborts the in-flight requests at the weight "
    "update and resumes them (tokens after the update are on-policy, the rollout pool keeps working); Miles's "
    "train_async.py waits for the rollout, so its rollout GPUs idle during the update. Same lag bound (1 step)",
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
        words = launch_words(knob, miles_argv, verl_argv)
        if _same(a, b):
            note = _MATCHED_COST.get(knob, "") if a not in ("off", "none") else ""
            rows.append(ParityRow(knob, group, a, b, "matched", note, *words))
        elif knob in declared:
            rows.append(ParityRow(knob, group, a, b, "asymmetry", declared[knob], *words))
        else:
            rows.append(ParityRow(knob, group, a, b, "MISMATCH", "not a declared asymmetry", *words))
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


def _knob_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _words(text: str | None) -> str:
    if not text:
        return ""
    return text if text.startswith("not set") else f"`{text}`"


def parity_markdown(parity: dict[str, Any], title: str) -> str:
    lines = [
        f"# Parity: {title}",
        "",
        f"spec_hash `{parity['spec_hash']}`; what each row means: [{DOCS}]({DOCS}).",
        "",
    ]
    lines += [" ".join(LEGEND), ""]
    if not parity["pairs"]:
        return "\n".join(lines + ["No VERL cells planned (run with --compare-verl): nothing to compare.", ""])
    for pair in parity["pairs"]:
        c = pair["counts"]
        lines += [f"## {pair['miles_cell']} vs {pair['verl_cell']}", ""]
        lines += [f"{c['matched']} matched, {c['asymmetry']} declared asymmetries, {c['MISMATCH']} mismatches.", ""]
        if pair["error"]:
            lines += [f"**Parity error**: {pair['error']}", ""]
        rows = [
            [r["group"], r["knob"], _knob_text(r["miles"]), _knob_text(r["verl"]), r["status"]]
            + [_words(r.get("miles_launch")), _words(r.get("verl_launch")), _knob_text(r["note"])]
            for r in pair["rows"]
        ]
        header = ["group", "knob", "Miles", "VERL", "status", "Miles sets it with", "VERL sets it with"]
        header += ["expected throughput effect"]
        lines += [markdown_table(header, rows), ""]
    return "\n".join(lines)
