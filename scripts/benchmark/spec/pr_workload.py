"""The PR check's workload (`run.py --pr-workload`): a preset's model, loop and engine at a size a pull request can
afford, so that the paired check of a PR head against its merge base fits Miles's CI budget (40 minutes of one node).

Kept from the preset: the model, the data set and its order, GRPO and the optimizer, parallelism (FSDP, Megatron
TP/PP/EP), the layout and its split, every rollout engine setting but the CUDA-graph batch sizes, seeds, the sinks.
Changed (`PR_*`): `PR_PROMPTS` prompts x up to `PR_SAMPLES_PER_PROMPT` samples a step, all in one optimizer step;
responses capped at `PR_MAX_RESPONSE` tokens; `PR_STEPS` steps a launch (the paired check's validation is made at
this length: tests/benchmark/paired_check_validation.py); CUDA graphs captured only up to the requests an engine
gets, which shortens every launch's start-up alike on both sides.

What a PR workload cannot see (the nightly's full-scale presets do): costs that grow with response length (attention
over 8k tokens, KV-cache pressure, chunked prefill, the long generation tail), with batch size (hundreds of running
requests per engine, the scheduler and radix cache at load, several micro-batches and optimizer steps a step), and a
slowdown confined to a phase that is a small share of this small step (most of it is fixed per-step work: weight
sync, engine sleep/wake, orchestration); the paired check's notes show the phase that moved.
"""

from __future__ import annotations

import math
from typing import Any

PR_PROMPTS = 8
PR_SAMPLES_PER_PROMPT = 8
PR_MAX_RESPONSE = 256
PR_STEPS = 40
PR_WARMUP_STEPS = 2
PR_SUFFIX = "-pr"


def pr_workload(spec: Any, data: dict[str, Any]) -> dict[str, Any]:
    """The PR workload of `spec` (a validated BenchmarkSpec) as the plain data `with_overrides` validates next
    (`data`: the spec's own dump, changed in place): named after the preset, + `-pr`."""
    batch, run = data["batch"], data["run"]
    samples = min(PR_SAMPLES_PER_PROMPT, batch["samples_per_prompt"])
    prompts = _prompts_for_every_dp(spec, samples)
    batch.update(prompts_per_step=prompts, samples_per_prompt=samples, samples_per_optimizer_step=prompts * samples)
    data["lengths"]["max_response"] = min(PR_MAX_RESPONSE, data["lengths"]["max_response"])
    run.update(num_steps=PR_STEPS, warmup_steps=PR_WARMUP_STEPS)
    data["data"]["end"] = max(data["data"]["end"], data["data"]["start"] + prompts * PR_STEPS)
    engines = max(spec.rollout_gpus() // spec.rollout.gpus_per_engine, 1)
    per_engine = -(-prompts * samples // engines)
    data["rollout"]["cuda_graph_max_bs"] = min(8 * -(-per_engine // 8), data["rollout"]["max_running_requests"])
    if not data["name"].endswith(PR_SUFFIX):
        data["name"] += PR_SUFFIX
    data["description"] = (
        f"PR workload of {spec.name}: {prompts}x{samples} samples, {data['lengths']['max_response']}-token responses, "
        f"{PR_STEPS} steps; {spec.description}"
    )
    return data


def _prompts_for_every_dp(spec: Any, samples: int) -> int:
    """The fewest prompts, at least PR_PROMPTS, whose samples every backend's data-parallel size divides (the one
    optimizer step of a step is split over the data-parallel ranks), in either layout the spec can run."""
    layouts = ["colocate"] + (["disaggregated"] if spec.placement.disaggregated is not None else [])
    sizes = [spec.data_parallel_size(b, layout) for b in ("fsdp", "megatron") for layout in layouts]
    unit = math.lcm(*sizes) // math.gcd(math.lcm(*sizes), samples)
    return unit * -(-PR_PROMPTS // unit)
