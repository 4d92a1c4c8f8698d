"""The spec's sections, one pydantic model per concern: model, data, grpo, optimizer, batch, lengths, sampling,
reward, rollout, megatron, fsdp, placement, run, tracking (BenchmarkSpec in benchmark.py assembles them).

Caveats:
- Units follow Miles: `batch.prompts_per_step` counts prompts, `batch.samples_per_optimizer_step` counts samples
  (responses); the VERL builder converts.
- Paths (checkpoint, data) are not checked here: a dry run must work on any machine. `preflight` checks them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from scripts.benchmark.model_config import MODEL_CONFIGS_DIR, named_model_config
from scripts.benchmark.spec.pins import DEFAULT_SGLANG_VERSIONS, AsyncLoopSpec, Count, Number, SglangVersions

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


class Section(BaseModel):
    """A spec section: frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSpec(Section):
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


class DataSpec(Section):
    prompt_data: str
    """Miles jsonl (DAPO-math-17k as Miles reads it)."""
    input_key: str = "prompt"
    label_key: str = "label"
    start: Count = Field(0, ge=0)
    end: Count = Field(gt=0)
    """The fixed prompt slice [start:end), read in file order by both frameworks (no shuffle)."""
    apply_chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    val_rows: Count = Field(8, gt=0)
    """Rows of the small validation parquet VERL insists on loading (never evaluated)."""
    hf_repo: str | None = None
    """Hugging Face dataset repo the prepare step downloads into prompt_data's folder when the jsonl is missing."""

    @field_validator("hf_repo")
    @classmethod
    def _repo_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_hf_repo_id(value, f"data.{info.field_name}")


class GrpoSpec(Section):
    advantage_estimator: Literal["grpo"] = "grpo"
    eps_clip: Number = Field(0.2, gt=0)
    eps_clip_high: Number = Field(0.28, gt=0)
    dual_clip_c: Number | None = None
    """None = dual clip off (Miles default); VERL's always-on clip_ratio_c is then neutralised."""
    use_kl_loss: bool = False
    kl_loss_coef: Number = 0.0
    kl_loss_type: Literal["k1", "k2", "low_var_kl"] = "low_var_kl"
    entropy_coef: Number = 0.0
    loss_aggregation: Literal["token-mean", "seq-mean-token-mean"] = "token-mean"
    std_normalization: bool = True


class OptimizerSpec(Section):
    lr: Number = Field(1e-6, gt=0)
    weight_decay: Number = Field(0.1, ge=0)
    adam_beta1: Number = 0.9
    adam_beta2: Number = 0.98
    adam_eps: Number = 1e-8
    clip_grad: Number = 1.0
    lr_schedule: Literal["constant"] = "constant"
    warmup_steps: Literal[0] = 0


class BatchSpec(Section):
    prompts_per_step: Count = Field(gt=0)
    samples_per_prompt: Count = Field(gt=0)
    samples_per_optimizer_step: Count = Field(gt=0)
    dynamic_batching: Literal[True] = True
    max_tokens_per_gpu: Count = Field(gt=0)
    """Per-micro-batch token budget (prompt+response) per data-parallel rank; the backends may override it."""

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def optimizer_steps_per_step(self) -> int:
        return self.samples_per_step // self.samples_per_optimizer_step


class LengthSpec(Section):
    max_prompt: Count = Field(gt=0)
    max_response: Count = Field(gt=0)


class SamplingSpec(Section):
    temperature: Number = Field(1.0, ge=0)
    top_p: Number = Field(1.0, gt=0, le=1)
    top_k: Count = -1


class RewardSpec(Section):
    scorer: Literal["math_dapo"] = "math_dapo"
    """VERL's math_dapo.compute_score; Miles runs its port (--rm-type dapo --reward-key score)."""


class RolloutSpec(Section):
    engine: Literal["sglang"] = "sglang"
    sglang_versions: SglangVersions = Field(default_factory=lambda: dict(DEFAULT_SGLANG_VERSIONS))
    gpus_per_engine: Count = Field(1, gt=0)
    mem_fraction: Number = Field(gt=0, lt=1)
    cuda_graphs: bool = True
    cuda_graph_max_bs: Count | None = Field(None, gt=0)
    max_running_requests: Count = Field(gt=0)
    """Per-engine cap on running requests; Miles's client-side concurrency is pinned to the same number."""
    chunked_prefill_size: Count | None = Field(4096, gt=0)
    attention_backend: str = "fa3"
    weight_sync_bucket_mb: Count = Field(512, gt=0)


class MegatronSpec(Section):
    tp: Count = Field(1, gt=0)
    pp: Count = Field(1, gt=0)
    cp: Count = Field(1, gt=0)
    ep: Count = Field(1, gt=0)
    etp: Count = Field(1, gt=0)
    sequence_parallel: bool = False
    recompute: Literal["full", "none"] = "full"
    max_tokens_per_gpu: Count | None = Field(None, gt=0)
    optimizer_cpu_offload: bool = False
    attention_backend: Literal["flash"] = "flash"

    @property
    def model_parallel(self) -> int:
        return self.tp * self.pp * self.cp


class FsdpSpec(Section):
    gradient_checkpointing: bool = True
    cpu_offload: bool = False
    """FSDP2 CPUOffloadPolicy in Miles (optimizer on CPU); VERL gets param+optimizer offload."""
    attn_implementation: Literal["flash_attention_2", "flash_attention_3", "sdpa"] = "flash_attention_2"
    max_tokens_per_gpu: Count | None = Field(None, gt=0)


class DisaggregatedSplit(Section):
    train_gpus: Count
    rollout_gpus: Count


class PlacementSpec(Section):
    layout: Layout = "colocate"
    disaggregated: DisaggregatedSplit | None = None
    """The GPU split used when layout is disaggregated (its own total; colocated cells use the whole node set)."""
    async_loop: AsyncLoopSpec = AsyncLoopSpec()


LEARNING_RUN_STEPS = 200
"""Steps of a learning run, and the fewest it may have: the learning guard's targets are validated at 200 steps
(docs/benchmark/analysis.md); at the presets' 24 a 10% lower solve rate is caught in about 3 pairs in 10 with 3 repeats
a side."""


class RunSpec(Section):
    seed: Count = 1234
    rollout_seed: Count = 42
    num_steps: Count = Field(gt=0)
    warmup_steps: Count = Field(ge=0)
    """The longest warm-up this run budgets for. The report detects the real warm-up (MSER); this only sizes the
    run: `steady_state_warnings` asks for enough steps that a warm-up this long is found and a steady tail remains."""
    gpus_per_node: Count = Field(gt=0)
    nodes: Count = Field(1, gt=0)
    mode: Literal["throughput", "learning", "train-only"] = "throughput"
    """`learning`: a run for the learning guard (`run.py --learning-run`): at least `LEARNING_RUN_STEPS` steps, the
    batch unchanged. `train-only` (`run.py --train-only`): one recorded rollout replayed into every cell's training
    step, no generation (see `RecordingSpec`). In the spec hash only when not `throughput`, so such a run never shares
    a history series with the throughput runs and the throughput hashes stay as they were."""


RECORDING_PATH = re.compile(r"/[A-Za-z0-9_.,:=@%+/-]*")
"""The characters a recording folder may hold: it reaches the Ray job's /bin/sh line and Hydra overrides."""


class RecordingSpec(Section):
    """Where a train-only run keeps its recorded rollouts on the GPU node: one folder per recording key (what
    determines the rollout), so a recording made once is replayed by every later run and night of the same spec."""

    cache_dir: str = "/root/.cache/bench-recordings"

    @field_validator("cache_dir")
    @classmethod
    def _plain_absolute(cls, value: str) -> str:
        if not RECORDING_PATH.fullmatch(value) or ".." in value.split("/"):
            raise ValueError(
                f"recording.cache_dir: {value!r} must be an absolute folder of letters, digits and _ . , : = @ % + / -"
                " (it is passed through a shell line and Hydra overrides)"
            )
        return value.rstrip("/") or "/"


class TrackingSpec(Section):
    wandb: bool = False
    """Also log to wandb from both frameworks (a network logger on both sides); the key comes from WANDB_API_KEY."""
    wandb_project: str = Field("miles-bench", min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
