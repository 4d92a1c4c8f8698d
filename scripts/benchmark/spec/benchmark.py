"""The pinned benchmark spec: one validated description that both the Miles and the VERL launch are built from.

- `BenchmarkSpec` (pydantic v2, frozen, extra="forbid") with one sub-model per concern (sections.py).
- Validation rejects what cannot run, naming the field and the numbers: batch geometry vs the data-parallel size of
  each backend, parallel sizes vs the GPU count, a disaggregated split with no train or rollout GPUs, a token budget
  shorter than the longest sequence, an unknown architecture.
- `model.hf_repo` / `data.hf_repo` (`owner/name`): what the prepare steps download when missing (optional).
- `tracking.wandb` (off in presets; `run.py --wandb`): both launches also log to wandb; the key is never in the spec.
- `report` and `learning`: how results are read and judged; outside `spec_hash(spec)` (sha256 of the resolved spec).
- `run.mode` (`throughput`; `learning` for the learning guard; `train-only` for replaying one recorded rollout into
  every cell's training step; in the hash only when set): `with_overrides(..., learning_run=True)` sets learning with
  `LEARNING_RUN_STEPS` steps and the same batch; `with_overrides(..., train_only=True)` sets train-only and a
  `recording` section (where recordings are cached; absent, and out of the resolved spec, otherwise).
- `load_preset(name)`, `load_spec_file(path)`, `with_overrides(spec, ...)`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from pathlib import Path
from typing import Any

from pydantic import model_validator

from scripts.benchmark.model_config import BACKENDS, read_preset_yaml, read_yaml_mapping
from scripts.benchmark.spec.learning import LearningSpec
from scripts.benchmark.spec.pr_workload import pr_workload as shrink_to_pr_workload
from scripts.benchmark.spec.report import MIN_STEADY_STEPS, ReportSpec
from scripts.benchmark.spec.sections import (
    KNOWN_ARCHITECTURES,
    LEARNING_RUN_STEPS,
    Backend,
    BatchSpec,
    DataSpec,
    DisaggregatedSplit,
    FsdpSpec,
    GrpoSpec,
    Layout,
    LengthSpec,
    MegatronSpec,
    ModelSpec,
    OptimizerSpec,
    PlacementSpec,
    RecordingSpec,
    RewardSpec,
    RolloutSpec,
    RunSpec,
    SamplingSpec,
    Section,
    TrackingSpec,
)


class BenchmarkSpec(Section):
    name: str
    description: str = ""
    model: ModelSpec
    data: DataSpec
    grpo: GrpoSpec = GrpoSpec()
    optimizer: OptimizerSpec = OptimizerSpec()
    batch: BatchSpec
    lengths: LengthSpec
    sampling: SamplingSpec = SamplingSpec()
    reward: RewardSpec = RewardSpec()
    rollout: RolloutSpec
    megatron: MegatronSpec = MegatronSpec()
    fsdp: FsdpSpec = FsdpSpec()
    placement: PlacementSpec = PlacementSpec()
    run: RunSpec
    tracking: TrackingSpec = TrackingSpec()
    report: ReportSpec = ReportSpec()
    learning: LearningSpec = LearningSpec()
    recording: RecordingSpec | None = None

    def train_gpus(self, layout: Layout | None = None) -> int:
        if (layout or self.placement.layout) == "disaggregated":
            return self._split().train_gpus
        return self.run.gpus_per_node * self.run.nodes

    def rollout_gpus(self, layout: Layout | None = None) -> int:
        if (layout or self.placement.layout) == "disaggregated":
            return self._split().rollout_gpus
        return self.run.gpus_per_node * self.run.nodes

    def total_gpus(self, layout: Layout | None = None) -> int:
        if (layout or self.placement.layout) == "disaggregated":
            return self.train_gpus(layout) + self.rollout_gpus(layout)
        return self.run.gpus_per_node * self.run.nodes

    def gpus_per_node(self, layout: Layout | None = None) -> int:
        """GPUs a node must offer: the disaggregated split may need more than the colocated node size (smoke)."""
        return max(self.run.gpus_per_node, -(-self.total_gpus(layout) // self.run.nodes))

    def data_parallel_size(self, backend: Backend, layout: Layout | None = None) -> int:
        if backend == "megatron":
            return self.train_gpus(layout) // self.megatron.model_parallel
        return self.train_gpus(layout)

    def max_tokens_per_gpu(self, backend: Backend) -> int:
        override = self.megatron.max_tokens_per_gpu if backend == "megatron" else self.fsdp.max_tokens_per_gpu
        return override or self.batch.max_tokens_per_gpu

    def architecture(self) -> str:
        return self.model.hf_config().get("model_type", "<missing model_type>")

    def _split(self) -> DisaggregatedSplit:
        if self.placement.disaggregated is None:
            raise ValueError("placement.disaggregated: the disaggregated layout needs a train/rollout GPU split")
        return self.placement.disaggregated

    @model_validator(mode="after")
    def _check_runnable(self) -> BenchmarkSpec:
        problems = _problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _problems(spec: BenchmarkSpec) -> list[str]:
    problems = _architecture_problems(spec) + _geometry_problems(spec)
    if problems[:1] and problems[0].startswith("model."):
        return problems
    layouts: list[Layout] = ["colocate"]
    if spec.placement.layout == "disaggregated" or spec.placement.disaggregated is not None:
        problems += _split_problems(spec)
        if not problems:
            layouts.append("disaggregated")
    for layout in layouts:
        problems += _parallel_problems(spec, layout)
    return problems


def _architecture_problems(spec: BenchmarkSpec) -> list[str]:
    try:
        hf = spec.model.hf_config()
    except ValueError as exc:
        return [str(exc)]
    model_type = hf.get("model_type")
    if model_type not in KNOWN_ARCHITECTURES:
        return [f"model.config: unknown architecture model_type={model_type!r} (known: {sorted(KNOWN_ARCHITECTURES)})"]
    required = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size"]
    required += ["moe_intermediate_size", "num_experts", "num_experts_per_tok"] if model_type == "qwen3_moe" else []
    required += ["intermediate_size"]
    missing = [key for key in required if key not in hf]
    return [f"model.config: {model_type} config lacks {missing}"] if missing else []


def _geometry_problems(spec: BenchmarkSpec) -> list[str]:
    batch, problems = spec.batch, []
    if batch.samples_per_step % batch.samples_per_optimizer_step:
        problems.append(
            f"batch.samples_per_optimizer_step={batch.samples_per_optimizer_step} does not divide the samples per "
            f"step {batch.samples_per_step} (prompts_per_step {batch.prompts_per_step} x samples_per_prompt "
            f"{batch.samples_per_prompt})"
        )
    if batch.samples_per_optimizer_step % batch.samples_per_prompt:
        problems.append(
            f"batch.samples_per_optimizer_step={batch.samples_per_optimizer_step} is not a whole number of prompts "
            f"(samples_per_prompt {batch.samples_per_prompt}); VERL counts its mini-batch in prompts"
        )
    longest = spec.lengths.max_prompt + spec.lengths.max_response
    for backend in BACKENDS:
        cp = spec.megatron.cp if backend == "megatron" else 1
        budget = spec.max_tokens_per_gpu(backend) * cp
        if budget < longest:
            problems.append(
                f"{backend}: token budget max_tokens_per_gpu={spec.max_tokens_per_gpu(backend)} x cp {cp} = {budget} "
                f"is shorter than the longest sequence lengths.max_prompt {spec.lengths.max_prompt} + "
                f"lengths.max_response {spec.lengths.max_response} = {longest}"
            )
    rows = spec.data.end - spec.data.start
    needed = batch.prompts_per_step * spec.run.num_steps
    if rows < needed:
        problems.append(
            f"data: the slice [{spec.data.start}:{spec.data.end}) has {rows} prompts, fewer than run.num_steps "
            f"{spec.run.num_steps} x batch.prompts_per_step {batch.prompts_per_step} = {needed}"
        )
    if spec.run.mode == "learning" and spec.run.num_steps < LEARNING_RUN_STEPS:
        problems.append(
            f"run.num_steps={spec.run.num_steps} is too few for run.mode learning: the learning guard needs at least "
            f"{LEARNING_RUN_STEPS} steps"
        )
    if (spec.run.mode == "train-only") != (spec.recording is not None):
        problems.append(
            f"run.mode={spec.run.mode} with {'a' if spec.recording else 'no'} recording section: a train-only run "
            "needs `recording` (where its recorded rollouts are kept) and no other mode takes one"
        )
    if spec.run.warmup_steps >= spec.run.num_steps:
        problems.append(f"run.warmup_steps={spec.run.warmup_steps} leaves no measured step of {spec.run.num_steps}")
    return problems


def steady_state_warnings(spec: BenchmarkSpec) -> list[str]:
    """Why the report could not find a steady state in a run of this spec (too few steps); empty when it can.

    A warning, not an error: a short run still proves the pipeline (the report then says "never reached").
    """
    # MSER keeps >= MIN_STEADY_STEPS steps after a warm-up found in the first half; Miles's last step has no step time.
    needed = 2 * max(spec.run.warmup_steps, MIN_STEADY_STEPS) + 1
    if spec.run.num_steps >= needed:
        return []
    return [
        f"run.num_steps={spec.run.num_steps} is too few for a steady state: with run.warmup_steps="
        f"{spec.run.warmup_steps} the report needs at least {needed} steps (a warm-up found in the first half, then "
        f"{MIN_STEADY_STEPS} steady steps; Miles's last step has no step time), so every cell will be reported as "
        "never reaching a steady state"
    ]


def _split_problems(spec: BenchmarkSpec) -> list[str]:
    split = spec.placement.disaggregated
    if split is None:
        return ["placement.disaggregated: layout is disaggregated but no train_gpus/rollout_gpus split is given"]
    problems = []
    if split.train_gpus < 1 or split.rollout_gpus < 1:
        problems.append(
            f"placement.disaggregated: train_gpus={split.train_gpus}, rollout_gpus={split.rollout_gpus} leaves no "
            f"{'training' if split.train_gpus < 1 else 'rollout'} GPUs"
        )
    elif split.train_gpus % spec.run.nodes:
        problems.append(
            f"placement.disaggregated.train_gpus={split.train_gpus} does not spread over run.nodes={spec.run.nodes}"
        )
    return problems


def _parallel_problems(spec: BenchmarkSpec, layout: Layout) -> list[str]:
    hf, mg, batch = spec.model.hf_config(), spec.megatron, spec.batch
    train, rollout, problems = spec.train_gpus(layout), spec.rollout_gpus(layout), []
    where = f"[{layout}: {train} train GPUs]"
    megatron_invalid = bool(train % mg.model_parallel or train % (mg.ep * mg.etp * mg.pp))
    if train % mg.model_parallel:
        problems.append(
            f"megatron: tp {mg.tp} x pp {mg.pp} x cp {mg.cp} = {mg.model_parallel} does not divide the {train} train "
            f"GPUs {where}"
        )
    elif train % (mg.ep * mg.etp * mg.pp):
        problems.append(f"megatron: ep {mg.ep} x etp {mg.etp} x pp {mg.pp} does not divide the {train} GPUs {where}")
    for backend in BACKENDS:
        if megatron_invalid and backend == "megatron":
            continue
        dp = spec.data_parallel_size(backend, layout)
        if batch.samples_per_optimizer_step % dp:
            problems.append(
                f"{backend}: batch.samples_per_optimizer_step={batch.samples_per_optimizer_step} is not divisible by "
                f"the data-parallel size {dp} {where}"
            )
        lcm = math.lcm(dp, batch.samples_per_optimizer_step)
        if batch.samples_per_step % lcm:
            problems.append(
                f"{backend}: samples per step {batch.samples_per_step} is not a multiple of lcm(dp {dp}, "
                f"samples_per_optimizer_step {batch.samples_per_optimizer_step}) = {lcm}; VERL would pad with dummy "
                f"samples {where}"
            )
    if hf.get("num_key_value_heads", 1) % mg.tp or hf.get("num_attention_heads", 1) % mg.tp:
        problems.append(
            f"megatron.tp={mg.tp} does not divide the attention heads {hf.get('num_attention_heads')} / KV heads "
            f"{hf.get('num_key_value_heads')}"
        )
    if hf.get("num_hidden_layers", 1) % mg.pp:
        problems.append(f"megatron.pp={mg.pp} does not divide num_hidden_layers={hf.get('num_hidden_layers')}")
    experts = hf.get("num_experts", 0)
    if mg.ep > 1 and (not experts or experts % mg.ep):
        problems.append(f"megatron.ep={mg.ep} does not divide num_experts={experts} (expert parallel needs a MoE)")
    if mg.sequence_parallel and mg.tp == 1:
        problems.append("megatron.sequence_parallel needs tp > 1 (tp=1)")
    if rollout % spec.rollout.gpus_per_engine:
        problems.append(
            f"rollout.gpus_per_engine={spec.rollout.gpus_per_engine} does not divide the {rollout} rollout GPUs "
            f"[{layout}]"
        )
    return problems


def spec_json(spec: BenchmarkSpec) -> dict[str, Any]:
    """The resolved spec: the model config name is replaced by the architecture facts it names."""
    data = spec.model_dump(mode="json")
    data["model"]["config"] = spec.model.hf_config()
    if data["run"]["mode"] == "throughput":  # the default stays out: throughput hashes predate the mode
        del data["run"]["mode"]
    if data["recording"] is None:
        del data["recording"]
    return data


def spec_hash(spec: BenchmarkSpec) -> str:
    """How the report reads results (`report`) and how learning is judged (`learning`) do not change what is
    measured, so they stay out of the hash. The loop's default `schedule` (drain) is left out too, so specs written
    before the knob existed keep their hash."""
    return spec_json_hash(spec_json(spec))


def full_loop_spec_hash(resolved: dict[str, Any]) -> str:
    """The `spec_hash` of a resolved spec run as a full loop: without the train-only mode and its recording (what a
    train-only run's recording and its `--full-loop` companion must have been made with)."""
    data = copy.deepcopy(resolved)
    data.get("run", {}).pop("mode", None)
    data.pop("recording", None)
    return spec_json_hash(data)


def spec_json_hash(resolved: dict[str, Any]) -> str:
    """`spec_hash` of a resolved spec as plan.json stores it (what `execute` checks a plan's `spec_hash` against)."""
    unmeasured = ("report", "learning", "recording")  # where recordings are kept changes nothing measured
    measured = copy.deepcopy({k: v for k, v in resolved.items() if k not in unmeasured})
    loop = measured.get("placement", {}).get("async_loop", {})
    if loop.get("schedule") == "drain":
        del loop["schedule"]
    canonical = json.dumps(measured, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def load_preset(name: str) -> BenchmarkSpec:
    try:
        raw = read_preset_yaml(name)
    except ValueError as exc:
        raise ValueError(f"--preset: {exc}") from None
    return BenchmarkSpec.model_validate(raw)


def load_spec_file(path: str | Path, *, run_mode: str | None = None) -> BenchmarkSpec:
    """The spec of a YAML file; `run_mode` (a command line's --train-only) is set before it is validated, so a file
    that already holds the section that mode needs (`recording`) is valid with it."""
    data = read_yaml_mapping(path)
    if run_mode is not None and isinstance(data.get("run", {}), dict):
        data["run"] = {**data.get("run", {}), "mode": run_mode}
    return BenchmarkSpec.model_validate(data)


def with_overrides(
    spec: BenchmarkSpec,
    *,
    layout: Layout | None = None,
    num_steps: int | None = None,
    gpus_per_node: int | None = None,
    wandb: bool | None = None,
    learning_run: bool = False,
    train_only: bool = False,
    pr_workload: bool = False,
) -> BenchmarkSpec:
    """A re-validated copy (model_copy would skip validation). `learning_run`: run.mode learning, `num_steps` (default
    `LEARNING_RUN_STEPS`) steps of the same batch, the prompt slice grown to cover them. `train_only`: run.mode
    train-only, with the spec's `recording` section or the default one. `pr_workload`: the PR check's smaller
    workload of the same model and loop (spec/pr_workload.py), before the other overrides."""
    data = spec.model_dump()
    if pr_workload:
        data = shrink_to_pr_workload(spec, data)
    if train_only:
        data["run"]["mode"] = "train-only"
        data["recording"] = data["recording"] or RecordingSpec().model_dump()
    if learning_run:
        num_steps = num_steps if num_steps is not None else LEARNING_RUN_STEPS
        data["run"]["mode"] = "learning"
        needed = data["data"]["start"] + num_steps * data["batch"]["prompts_per_step"]
        data["data"]["end"] = max(data["data"]["end"], needed)
    if wandb is not None:
        data["tracking"]["wandb"] = wandb
    if layout is not None:
        data["placement"]["layout"] = layout
    if num_steps is not None:
        data["run"]["num_steps"] = num_steps
    if gpus_per_node is not None:
        data["run"]["gpus_per_node"] = gpus_per_node
    return BenchmarkSpec.model_validate(data)
