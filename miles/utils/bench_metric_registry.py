"""The metric registry of the benchmark schema: every field of a step record declared once.

- `METRICS`: per metric its unit, better direction, family, source (recorded by the sink, derived by
  bench_metrics.derive_step_fields, or computed by the report's column reader), how it is derived, whether the
  regression check gates it and whether the report shows it (or why not). `REPORT_METRICS` is the shown part, in
  report order; the column reader, the report's tables and charts, the history record and `check` all read it.
- `NOT_METRICS`: the record's other fields and why they are not summarised; `LEARNING_SIGNALS`: the learning signals.
- bench_metrics re-exports all of it: import from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PHASES: tuple[str, ...] = ("generate", "rollout_wait", "old_logprob", "ref_logprob", "train", "weight_sync", "other")
STEP_PHASES: tuple[str, ...] = tuple(p for p in PHASES if p != "generate")
"""The phases that partition a step's wall time (generate is rollout-side and may overlap training)."""


Family = Literal["step", "phase", "cost", "overlap", "throughput", "efficiency", "workload", "count"]
Source = Literal["record", "derived", "columns"]


@dataclass(frozen=True, kw_only=True)
class MetricSpec:
    """One metric, declared once: what it is, which way is better, where it comes from, who reads it.

    `source`: "record" (the framework's sink fills it), "derived" (`derive_step_fields` fills it in the record) or
    "columns" (the report's column reader computes it per step from other fields; `derivation` says how).
    `gated`: the regression check judges it (`gate_threshold`, and `gate_required`: a missing value is an error).
    `shown`: report.json summarises it (and so the history records it); otherwise `hidden_reason` says why not.
    """

    name: str
    unit: str
    direction: Literal["lower", "higher"]
    description: str
    family: Family
    source: Source
    derivation: str = "recorded by the framework's sink"
    average: Literal["arithmetic", "harmonic"] = "arithmetic"
    """How a series of it is averaged: rates harmonically (total work over total time), costs arithmetically."""
    gated: bool = False
    gate_threshold: float | None = None
    gate_required: bool = False
    shown: bool = True
    hidden_reason: str | None = None

    def __post_init__(self) -> None:
        if self.shown == (self.hidden_reason is not None):
            raise ValueError(f"metric {self.name}: a metric is shown or has a hidden_reason, not both or neither")
        if self.gated != (self.gate_threshold is not None):
            raise ValueError(f"metric {self.name}: a gated metric declares its gate_threshold (and only it does)")
        if self.gated and not self.shown:
            raise ValueError(f"metric {self.name}: a gated metric must be shown (the history records shown ones)")


_DERIVE = "derive_step_fields"
_GATE = 0.03
"""3% rather than the 5% tolerance quoted by Datadog SMP: at the point estimate a true 5% regression exceeds a 5%
threshold only half of the time; 3% gives >= 90% detection at CV 2% (docs/benchmark.md, simulation table)."""


def _phase(phase: str, description: str) -> MetricSpec:
    return MetricSpec(
        name=f"phases_s.{phase}", unit="s", direction="lower", description=description, family="phase", source="record"
    )


_PHASE_TEXT = {
    "generate": "rollout-side generation wall time of the step's batch",
    "rollout_wait": "time the trainer was blocked waiting for the step's batch",
    "old_logprob": "time in the old_logprob phase",
    "ref_logprob": "time in the ref_logprob phase",
    "train": "time in the train phase (forward + backward + optimizer step of every mini-batch)",
    "weight_sync": "time in the weight_sync phase",
    "other": "step time no other phase covers",
}
_METRIC_LIST = [
    MetricSpec(
        name="step_time_s",
        unit="s",
        direction="lower",
        description="wall time of one RL step",
        family="step",
        source="record",
        gated=True,
        gate_threshold=_GATE,
        gate_required=True,
    ),
    _phase("generate", _PHASE_TEXT["generate"]),
    MetricSpec(
        name="generate_s_per_1k_response_tokens",
        unit="s/1k tokens",
        direction="lower",
        description="generate phase seconds per 1000 response tokens of the step",
        family="cost",
        source="columns",
        derivation="phases_s.generate / (tokens.response / 1000)",
    ),
    _phase("rollout_wait", _PHASE_TEXT["rollout_wait"]),
    MetricSpec(
        name="overlap_s",
        unit="s",
        direction="higher",
        description="rollout-side generation seconds hidden behind training: max(0, generate - rollout_wait)",
        family="overlap",
        source="derived",
        derivation=f"{_DERIVE}: max(0, phases_s.generate - phases_s.rollout_wait)",
    ),
    _phase("train", _PHASE_TEXT["train"]),
    MetricSpec(
        name="train_s_per_1k_tokens",
        unit="s/1k tokens",
        direction="lower",
        description="train phase seconds per 1000 trained (prompt + response) tokens of the step",
        family="cost",
        source="columns",
        derivation="phases_s.train / ((tokens.prompt + tokens.response) / 1000)",
    ),
    *(_phase(p, _PHASE_TEXT[p]) for p in ("old_logprob", "ref_logprob", "weight_sync", "other")),
    MetricSpec(
        name="rollout_tokens_per_gpu_s",
        unit="tokens/s/GPU",
        direction="higher",
        description="response tokens generated per second of the generate phase per rollout GPU",
        family="throughput",
        source="derived",
        derivation=f"{_DERIVE}: tokens.response / phases_s.generate / num_rollout_gpus",
        average="harmonic",
        gated=True,
        gate_threshold=_GATE,
    ),
    MetricSpec(
        name="train_tflops_per_gpu",
        unit="TFLOP/s/GPU",
        direction="higher",
        description="model FLOPs of the train phase (one FLOPs model, 3x forward) per second per training GPU",
        family="efficiency",
        source="derived",
        derivation=f"{_DERIVE}: batch_train_flops / phases_s.train / num_train_gpus",
        average="harmonic",
        gated=True,
        gate_threshold=_GATE,
    ),
    MetricSpec(
        name="train_mfu",
        unit="fraction",
        direction="higher",
        description="train_tflops_per_gpu / peak",
        family="efficiency",
        source="derived",
        derivation=f"{_DERIVE}: train_tflops_per_gpu / RunContext.peak_tflops",
        average="harmonic",
        gated=True,
        gate_threshold=_GATE,
    ),
    MetricSpec(
        name="train_tokens_per_s",
        unit="tokens/s",
        direction="higher",
        description="prompt+response tokens trained per second of the train phase, whole job",
        family="throughput",
        source="derived",
        derivation=f"{_DERIVE}: (tokens.prompt + tokens.response) / phases_s.train",
        average="harmonic",
        gated=True,
        gate_threshold=_GATE,
    ),
    MetricSpec(
        name="wait_ratio",
        unit="fraction",
        direction="lower",
        description="share of the step the training GPUs spend outside trainer compute (old_logprob+ref+train)",
        family="step",
        source="derived",
        derivation=f"{_DERIVE}: 1 - (old_logprob + ref_logprob + train) / step_time_s",
    ),
    MetricSpec(
        name="response_length_mean",
        unit="tokens",
        direction="lower",
        description="mean response length of the step's samples (a workload property, not a speed)",
        family="workload",
        source="columns",
        derivation="tokens.response / samples",
    ),
    *(
        MetricSpec(
            name=f"tokens.{kind}",
            unit="tokens",
            direction="lower",
            description=f"{kind} tokens summed over the step's samples",
            family="count",
            source="record",
            shown=False,
            hidden_reason="a workload count: shown through the throughputs, per-token costs and response length",
        )
        for kind in ("prompt", "response")
    ),
    MetricSpec(
        name="samples",
        unit="samples",
        direction="lower",
        description="samples trained in the step",
        family="count",
        source="record",
        shown=False,
        hidden_reason="fixed by the spec's batch; shown through response_length_mean",
    ),
]
METRICS: dict[str, MetricSpec] = {m.name: m for m in _METRIC_LIST}
"""Every metric of the schema, in report order (each per-token cost right under the phase it normalises)."""
REPORT_METRICS: dict[str, MetricSpec] = {name: m for name, m in METRICS.items() if m.shown}
"""What report.json summarises per cell, what its tables and charts show and what the history records."""
STEP_TIME_FAMILY: tuple[str, ...] = (
    "step_time_s",
    "train_tokens_per_s",
    "rollout_tokens_per_gpu_s",
    "train_tflops_per_gpu",
    "train_mfu",
)
"""The gated metrics in the order they are tested (fixed sequence: step time first, then the throughputs measured on
the same steps), by the report's comparison and by the regression check."""
if set(STEP_TIME_FAMILY) != {name for name, m in METRICS.items() if m.gated}:
    raise ValueError("STEP_TIME_FAMILY must list exactly the gated metrics")

NOT_METRICS: dict[str, str] = {
    "framework": "names the cell's framework: report.json cells[].framework and the history's series key",
    "step": "the step index: the x axis of the report's series, never summarised",
    "schema_version": "the record's format version",
    "flags": "notes on the record (missing inputs, non-finite values); read by the readers, not summarised",
    "raw": "the framework's own metrics, verbatim; only the response-length extremes are read from it",
    "learning": "the learning signals (LEARNING_SIGNALS): compared per pair and recorded per cell on their own",
}
"""The StepRecord fields that are not metrics, and why the report does not summarise them."""


# Learning signals: what both frameworks learn per step, compared for equivalence (not for speed).


@dataclass(frozen=True, kw_only=True)
class Planted:
    """A learning difference the guard is built to see: the candidate's level times `factor` at the end of the run,
    reached in `shape` (constant, a step at a quarter of the run, or linearly from 1)."""

    factor: float
    shape: Literal["constant", "from a quarter", "linear"]
    words: str

    def factors(self, steps: int) -> list[float]:
        """The candidate's factor on the level at each of `steps` steps."""
        last = max(steps - 1, 1)
        if self.shape == "constant":
            return [self.factor] * steps
        if self.shape == "from a quarter":
            return [self.factor if k >= steps // 4 else 1.0 for k in range(steps)]
        return [1 + (self.factor - 1) * k / last for k in range(steps)]


@dataclass(frozen=True, kw_only=True)
class LearningSignal:
    """One learning signal of `StepRecord.learning`: its unit and its default equivalence margin.

    margin_kind "absolute" compares miles - verl; "relative" compares log((miles - level_from) / (verl - level_from))
    against log(1 + margin): a margin that follows the level; margin None (a spec's `learning.margins: {name: null}`)
    means the signal is plotted and tabled but never judged.
    """

    name: str
    unit: str
    margin_kind: Literal["absolute", "relative"]
    margin: float | None
    description: str
    reason: str = ""
    """Why this margin and kind, in one line (printed in docs/benchmark/analysis.md)."""
    level_from: float = 0.0
    """Where a relative signal's level is measured from: the lowest score for a reward, a small offset for a share
    that can be 0 (so a ratio of a few samples is not all the verdict sees)."""
    planted: Planted | None = None
    """The difference the guard must see on this signal: its margin is under half of it, and the power statements
    (analysis/learning_power.py) say how many repeats a side see it 9 times in 10."""
    run_spread: float = 0.0
    """The assumed run-to-run standard deviation of one run's window mean (log units for a relative signal), used
    for the power statements where neither the history nor the run's own repeats give one: an assumption, stated."""

    def level(self, value: float) -> float:
        """The value on the scale a relative margin is a share of."""
        return value - self.level_from


LEARNING_SIGNALS: dict[str, LearningSignal] = {
    s.name: s
    for s in [
        LearningSignal(
            name="reward_mean",
            unit="reward",
            margin_kind="relative",
            margin=0.05,
            description="mean raw reward-function score over the step's samples",
            reason="math_dapo scores a sample -1 or +1, so its level is the solve rate, (mean + 1) / 2, which moves "
            "with model and step; 5% of it is half a 10% drop at any solve rate",
            level_from=-1.0,
            planted=Planted(factor=0.9, shape="from a quarter", words="a 10% lower solve rate from a quarter on"),
            run_spread=0.04,
        ),
        LearningSignal(
            name="response_length_mean",
            unit="tokens",
            margin_kind="relative",
            margin=0.05,
            description="mean response tokens per sample",
            reason="lengths scale with model and task; 5% moves generate time as much, a quarter of a +20% drift",
            planted=Planted(factor=1.2, shape="linear", words="responses drifting to 20% longer"),
            run_spread=0.05,
        ),
        LearningSignal(
            name="truncation_fraction",
            unit="fraction",
            margin_kind="relative",
            margin=0.25,
            description="share of samples cut at the response-length cap",
            reason="the share cut at the cap goes from near 0 to tens of % by model and step: a quarter of it plus "
            "0.01, so near 0, where a ratio of a few cut samples is unstable, a gap of 0.0025 still counts",
            level_from=-0.01,
            run_spread=0.15,
        ),
        LearningSignal(
            name="entropy",
            unit="nats/token",
            margin_kind="relative",
            margin=0.15,
            description="policy entropy on the step's samples before the update",
            reason="its level depends on the model; a 15% change is well under the 40% of an entropy collapse",
            planted=Planted(factor=0.6, shape="linear", words="an entropy collapse to -40%"),
            run_spread=0.04,
        ),
        LearningSignal(
            name="clip_fraction",
            unit="fraction",
            margin_kind="relative",
            margin=0.30,
            description="share of response tokens where the PPO clip is active",
            reason="its level depends on the learning rate and the off-policy gap; a doubling means far larger steps",
            planted=Planted(factor=2.0, shape="constant", words="clip fraction 2x"),
            run_spread=0.10,
        ),
        LearningSignal(
            name="approx_kl",
            unit="nats/token",
            margin_kind="relative",
            margin=0.50,
            description="k1 estimate of KL(old policy || updated policy) during the update",
            reason="a noisy small number whose level depends on the step size; 3x means a different update",
            planted=Planted(factor=3.0, shape="constant", words="KL 3x"),
            run_spread=0.15,
        ),
        LearningSignal(
            name="grad_norm",
            unit="L2",
            margin_kind="relative",
            margin=0.25,
            description="gradient L2 norm before clipping, mean over the step's optimizer steps",
            reason="its level depends on the model, the batch and the step; a 25% gap in its mean is a different "
            "loss scale or normalisation",
            run_spread=0.06,
        ),
        LearningSignal(
            name="policy_loss",
            unit="loss",
            margin_kind="absolute",
            margin=0.02,
            description="policy-gradient loss (minus the clipped surrogate), mean over optimizer steps",
            reason="std-normalised group advantages (grpo.std_normalization) make its unit an advantage's SD at any "
            "model or step; its level, the length-weighted mean advantage, sits near 0 with either sign, where a "
            "ratio means nothing: 0.02 SD",
            run_spread=0.005,
        ),
    ]
}
