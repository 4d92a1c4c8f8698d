"""The pinned benchmark spec: one validated description that both the Miles and the VERL launch are built from.

- `BenchmarkSpec` (pydantic v2, frozen, extra="forbid") with one sub-model per concern: model, data, grpo, optimizer,
  batch, lengths, sampling, reward, rollout, megatron, fsdp, placement, run, tracking.
- Validation rejects what cannot run, naming the field and the numbers: batch geometry vs the data-parallel size of
  each backend, parallel sizes vs the GPU count, a disaggregated split with no train or rollout GPUs, a token budget
  shorter than the longest sequence, an unknown architecture.
- `model.hf_repo` / `data.hf_repo` (`owner/name`): what the prepare steps download when missing (optional).
- `tracking.wandb` (off in presets; `run.py --wandb`): both launches also log to wandb; the key is never in the spec.
- `report` and `learning`: how results are read and judged; outside `spec_hash(spec)` (sha256 of the resolved spec).
- `load_preset(name)`, `load_spec_file(path)`, `with_overrides(spec, ...)`; `resolve_model_config(model)`.

Caveats:
- Units follow Miles: `batch.prompts_per_step` counts prompts, `batch.samples_per_optimizer_step` counts samples
  (responses); the VERL builder converts.
- Paths (checkpoint, data) are not checked here: a dry run must work on any machine. `preflight` checks them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from scripts.benchmark.analysis.verdict import ReportSpec
from scripts.benchmark.model_config import (  # noqa: F401  (re-exported: the spec's public names)
    BACKENDS,
    MODEL_CONFIGS_DIR,
    PRESETS_DIR,
    model_config_names,
    named_model_config,
    preset_names,
    read_preset_yaml,
    read_yaml_mapping,
    resolve_model_config,
)
from scripts.benchmark.spec_learning import LearningSpec
from scripts.benchmark.spec_pins import AsyncLoopSpec, SglangVersions

Backend = Literal["fsdp", "megatron"]
Layout = Literal["colocate", "disaggregated"]
LAYOUTS: tuple[Layout, ...] = ("colocate", "disaggregated")
KNOWN_ARCHITECTURES = {"qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}
HF_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")


def check_hf_repo_id(value: str | None, field: str) -> str | None:
    """`owner/name` as the Hub accepts it (no '--' or '..', no trailing '-' or '.'); None means no download."""
    if value is None:
        return None
    if not HF_REPO_ID.fullmatch(value) or "--" in value or ".." in value or value[-1] in "-.":
        raise ValueError(
            f"{field}: {value!r} is not a Hugging Face repo id (owner/name of letters, digits, '-', '_', '.'; "
            "no '--' or '..'; at most 96 characters each side)"
        )
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSpec(_Frozen):
    hf_checkpoint: str
    """HF checkpoint folder (weights + tokenizer) on the GPU node."""
    config: str | dict[str, Any]
    """Name of scripts/benchmark/model_configs/<name>.json, or an inline HF config dict (the architecture facts)."""
    hf_repo: str | None = None
    """Hugging Face model repo the prepare step downloads into hf_checkpoint when it is missing (None: no download)."""

    @field_validator("hf_repo")
    @classmethod
    def _repo_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_hf_repo_id(value, f"model.{info.field_name}")

    def hf_config(self) -> dict[str, Any]:
        if isinstance(self.config, dict):
            return dict(self.config)
        try:
            return named_model_config(self.config)
        except ValueError as exc:
            raise ValueError(f"model.config: {exc}") from None

    def config_path(self) -> str:
        """Where the FLOPs model reads the architecture: the model_configs file, or the checkpoint's config.json."""
        if isinstance(self.config, str):
            return str(MODEL_CONFIGS_DIR / f"{self.config}.json")
        return str(Path(self.hf_checkpoint) / "config.json")


class DataSpec(_Frozen):
    prompt_data: str
    """Miles jsonl (DAPO-math-17k as Miles reads it)."""
    input_key: str = "prompt"
    label_key: str = "label"
    start: int = Field(0, ge=0)
    end: int = Field(gt=0)
    """The fixed prompt slice [start:end), read in file order by both frameworks (no shuffle)."""
    apply_chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    val_rows: int = Field(8, gt=0)
    """Rows of the small validation parquet VERL insists on loading (never evaluated)."""
    hf_repo: str | None = None
    """Hugging Face dataset repo the prepare step downloads into prompt_data's folder when the jsonl is missing."""

    @field_validator("hf_repo")
    @classmethod
    def _repo_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_hf_repo_id(value, f"data.{info.field_name}")


class GrpoSpec(_Frozen):
    advantage_estimator: Literal["grpo"] = "grpo"
    eps_clip: float = Field(0.2, gt=0)
    eps_clip_high: float = Field(0.28, gt=0)
    dual_clip_c: float | None = None
    """None = dual clip off (Miles default); VERL's always-on clip_ratio_c is then neutralised."""
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.0
    kl_loss_type: Literal["k1", "k2", "low_var_kl"] = "low_var_kl"
    entropy_coef: float = 0.0
    loss_aggregation: Literal["token-mean", "seq-mean-token-mean"] = "token-mean"
    std_normalization: bool = True


class OptimizerSpec(_Frozen):
    lr: float = Field(1e-6, gt=0)
    weight_decay: float = Field(0.1, ge=0)
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-8
    clip_grad: float = 1.0
    lr_schedule: Literal["constant"] = "constant"
    warmup_steps: Literal[0] = 0


class BatchSpec(_Frozen):
    prompts_per_step: int = Field(gt=0)
    samples_per_prompt: int = Field(gt=0)
    samples_per_optimizer_step: int = Field(gt=0)
    dynamic_batching: Literal[True] = True
    max_tokens_per_gpu: int = Field(gt=0)
    """Per-micro-batch token budget (prompt+response) per data-parallel rank; the backends may override it."""

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def optimizer_steps_per_step(self) -> int:
        return self.samples_per_step // self.samples_per_optimizer_step


class LengthSpec(_Frozen):
    max_prompt: int = Field(gt=0)
    max_response: int = Field(gt=0)


class SamplingSpec(_Frozen):
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = -1


class RewardSpec(_Frozen):
    scorer: Literal["math_dapo"] = "math_dapo"
    """VERL's math_dapo.compute_score; Miles runs its port (--rm-type dapo --reward-key score)."""


class RolloutSpec(_Frozen):
    engine: Literal["sglang"] = "sglang"
    sglang_versions: SglangVersions = SglangVersions()
    gpus_per_engine: int = Field(1, gt=0)
    mem_fraction: float = Field(gt=0, lt=1)
    cuda_graphs: bool = True
    cuda_graph_max_bs: int | None = Field(None, gt=0)
    max_running_requests: int = Field(gt=0)
    """Per-engine cap on running requests; Miles's client-side concurrency is pinned to the same number."""
    chunked_prefill_size: int | None = Field(4096, gt=0)
    attention_backend: str = "fa3"
    weight_sync_bucket_mb: int = Field(512, gt=0)


class MegatronSpec(_Frozen):
    tp: int = Field(1, gt=0)
    pp: int = Field(1, gt=0)
    cp: int = Field(1, gt=0)
    ep: int = Field(1, gt=0)
    etp: int = Field(1, gt=0)
    sequence_parallel: bool = False
    recompute: Literal["full", "none"] = "full"
    max_tokens_per_gpu: int | None = Field(None, gt=0)
    optimizer_cpu_offload: bool = False
    attention_backend: Literal["flash"] = "flash"

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp


class FsdpSpec(_Frozen):
    gradient_checkpointing: bool = True
    cpu_offload: bool = False
    """FSDP2 CPUOffloadPolicy in Miles (optimizer on CPU); VERL gets param+optimizer offload."""
    attn_implementation: Literal["flash_attention_2", "flash_attention_3", "sdpa"] = "flash_attention_2"
    max_tokens_per_gpu: int | None = Field(None, gt=0)


class DisaggregatedSplit(_Frozen):
    train_gpus: int
    rollout_gpus: int


class PlacementSpec(_Frozen):
    layout: Layout = "colocate"
    disaggregated: DisaggregatedSplit | None = None
    """The GPU split used when layout is disaggregated (its own total; colocated cells use the whole node set)."""
    async_loop: AsyncLoopSpec = AsyncLoopSpec()


class RunSpec(_Frozen):
    seed: int = 1234
    rollout_seed: int = 42
    num_steps: int = Field(gt=0)
    warmup_steps: int = Field(ge=0)
    """The longest warm-up this run budgets for. The report detects the real warm-up (MSER); this only sizes the
    run: `steady_state_warnings` asks for enough steps that a warm-up this long is found and a steady tail remains."""
    gpus_per_node: int = Field(gt=0)
    nodes: int = Field(1, gt=0)


class TrackingSpec(_Frozen):
    wandb: bool = False
    """Also log to wandb from both frameworks (a network logger on both sides); the key comes from WANDB_API_KEY."""
    wandb_project: str = Field("miles-bench", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")


class BenchmarkSpec(_Frozen):
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
    if spec.run.warmup_steps >= spec.run.num_steps:
        problems.append(f"run.warmup_steps={spec.run.warmup_steps} leaves no measured step of {spec.run.num_steps}")
    return problems


def steady_state_warnings(spec: BenchmarkSpec) -> list[str]:
    """Why the report could not find a steady state in a run of this spec (too few steps); empty when it can.

    A warning, not an error: a short run still proves the pipeline (the report then says "never reached").
    """
    from scripts.benchmark.analysis.steady_state import MIN_TAIL_STEPS

    # MSER keeps >= MIN_TAIL_STEPS steps after a warm-up found in the first half; Miles's last step has no step time.
    needed = 2 * max(spec.run.warmup_steps, MIN_TAIL_STEPS) + 1
    if spec.run.num_steps >= needed:
        return []
    return [
        f"run.num_steps={spec.run.num_steps} is too few for a steady state: with run.warmup_steps="
        f"{spec.run.warmup_steps} the report needs at least {needed} steps (a warm-up found in the first half, then "
        f"{MIN_TAIL_STEPS} steady steps; Miles's last step has no step time), so every cell will be reported as "
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
    return data


def spec_hash(spec: BenchmarkSpec) -> str:
    """How the report reads results (`report`) and how learning is judged (`learning`) do not change what is
    measured, so they stay out of the hash."""
    measured = {k: v for k, v in spec_json(spec).items() if k not in ("report", "learning")}
    canonical = json.dumps(measured, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def load_preset(name: str) -> BenchmarkSpec:
    try:
        raw = read_preset_yaml(name)
    except ValueError as exc:
        raise ValueError(f"--preset: {exc}") from None
    return BenchmarkSpec.model_validate(raw)


def load_spec_file(path: str | Path) -> BenchmarkSpec:
    return BenchmarkSpec.model_validate(read_yaml_mapping(path))


def with_overrides(
    spec: BenchmarkSpec,
    *,
    layout: Layout | None = None,
    num_steps: int | None = None,
    gpus_per_node: int | None = None,
    wandb: bool | None = None,
) -> BenchmarkSpec:
    """A re-validated copy (model_copy would skip validation)."""
    data = spec.model_dump()
    if wandb is not None:
        data["tracking"]["wandb"] = wandb
    if layout is not None:
        data["placement"]["layout"] = layout
    if num_steps is not None:
        data["run"]["num_steps"] = num_steps
    if gpus_per_node is not None:
        data["run"]["gpus_per_node"] = gpus_per_node
    return BenchmarkSpec.model_validate(data)
