"""What a plan costs, stated before any GPU time is spent: per cell launch its start-up and step time, for the plan
its node wall time and GPU-hours, start-ups included, each as a typical and an upper estimate with its source.

The runner runs a plan's launches one after another on one node (runner/executor.py), so the node's wall time is
the sum of the launches and the GPU-hours are each launch's time times its GPUs. A sequential pair (`--sequential`)
runs rounds of one launch a side until the paired check decides: its cost is a range, from the rounds the check
needs at least (`pair_check.MIN_REPEATS`) to the rounds the plan allows (`repeats`).

Step time of a cell, by source (the first that applies):
1. measured: `--cost-store URL`, the same cell of the same spec in the history store (its newest recorded runs,
   history/costs.py): typical the median, upper the largest step time; start-up likewise;
2. stated: `--step-seconds S`, the preset's full-scale step time as whoever plans knows it (the nightly's report):
   typical = upper = S, for the cells of the preset's own workload only (a PR workload's small steps are not a share
   of the full-scale ones: most of their time is fixed per-step work);
3. the model (`modelled_step_s`), from the one FLOPs model, the committed H200 rooflines and the numbers this module
   states (`STATED`): an assumption until a run measures it.

The model of one step: rollout is the batch's generated tokens at a stated rate per rollout GPU, but never faster
than its longest response at a stated per-sequence decode speed; training is the FLOPs model of the trained tokens
(forward and backward, one more forward for the old log-probs and one for the reference when KL is on) at the
preset's roofline (calibration/results: typical its median, upper its p10), on the training GPUs; plus per-step work
that does not scale with the batch (weight sync, engine sleep and wake, orchestration). Typical: responses at half
their cap and prompts of `TYPICAL_PROMPT_TOKENS`; upper: every prompt and response at its cap.

`--budget-minutes N` (`budget_problem`) refuses a plan whose committed launches (all of them; for a sequential pair
the rounds the check needs at least) do not fit N minutes at their upper start-ups and upper step times, except where
the step time is only the model's: its upper assumes every response reaches its cap, no bound on a real run, so the
typical one is used. Whatever the estimate, the runner stops starting launches that would end past the budget
(runner/rounds.py).

Caveats:
- The stated numbers are this module's assumptions for an 8x H200 node, not measurements: measured values replace
  them as soon as a run of the spec is recorded (`--cost-store`).
- Preparation steps (downloads, conversions) are not counted: a CI node keeps its models and data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from miles.utils.bench_flops import ModelArch, batch_train_flops

TYPICAL_PROMPT_TOKENS = 256
"""DAPO-math-17k prompts with the chat template are a few hundred tokens (the cap is the spec's max_prompt)."""
TYPICAL_RESPONSE_SHARE = 0.25
"""Qwen3 base models on DAPO-math average 1-3k-token responses early in training: a quarter of an 8k cap."""
CALIBRATED_DEVICE = "NVIDIA H200"
FALLBACK_TFLOPS = (150.0, 75.0)
"""Per-GPU training TFLOP/s (typical, upper) for a model the calibration has no roofline for."""


@dataclass(frozen=True, kw_only=True)
class Stated:
    """The model's stated numbers for models up to `max_params` parameters, (typical, upper) each, on 8x H200."""

    max_params: float
    decode_s_per_token: tuple[float, float]
    """One decode step of one sequence at low concurrency (SGLang with CUDA graphs): the rollout's latency floor."""
    rollout_tokens_per_gpu_s: tuple[float, float]
    """Generated tokens per second per rollout GPU at full concurrency (typical; upper: the slower rate)."""
    fixed_step_s: tuple[float, float]
    """Per-step work that does not scale with the batch: weight sync, engine sleep/wake, orchestration, reward."""
    startup_s: tuple[float, float]
    """One launch's start-up: Ray, imports, model load, engines and their CUDA graphs, the first weight sync."""


STATED: tuple[Stated, ...] = (
    Stated(
        max_params=2.5e9,
        decode_s_per_token=(0.004, 0.007),
        rollout_tokens_per_gpu_s=(30000.0, 15000.0),
        fixed_step_s=(1.5, 3.0),
        startup_s=(90.0, 180.0),
    ),
    Stated(
        max_params=6e9,
        decode_s_per_token=(0.005, 0.009),
        rollout_tokens_per_gpu_s=(18000.0, 9000.0),
        fixed_step_s=(2.5, 5.0),
        startup_s=(120.0, 240.0),
    ),
    Stated(
        max_params=math.inf,
        decode_s_per_token=(0.010, 0.018),
        rollout_tokens_per_gpu_s=(8000.0, 4000.0),
        fixed_step_s=(8.0, 15.0),
        startup_s=(240.0, 420.0),
    ),
)


@dataclass(frozen=True, kw_only=True)
class Estimate:
    typical: float
    upper: float
    source: str
    """measured (N runs), stated (--step-seconds), or model."""


@dataclass(frozen=True, kw_only=True)
class LaunchCost:
    cell: str
    gpus: int
    steps: int
    step_s: Estimate
    startup_s: Estimate

    def launch_s(self, which: str) -> float:
        return getattr(self.startup_s, which) + self.steps * getattr(self.step_s, which)


@dataclass(frozen=True, kw_only=True)
class PlanCost:
    launches: list[LaunchCost]
    """One per cell (every repeat of a cell costs the same)."""
    repeats: int
    min_rounds: int | None = None
    """A sequential pair: the rounds the check needs at least (None: every repeat runs)."""
    notes: list[str] = field(default_factory=list)

    def wall_s(self, which: str, repeats: int | None = None) -> float:
        return (repeats or self.repeats) * sum(c.launch_s(which) for c in self.launches)

    def gpu_hours(self, which: str, repeats: int | None = None) -> float:
        return (repeats or self.repeats) * sum(c.launch_s(which) * c.gpus for c in self.launches) / 3600

    @property
    def committed_repeats(self) -> int:
        return self.min_rounds or self.repeats

    def budget_wall_s(self, repeats: int | None = None) -> float:
        """The wall time `--budget-minutes` is checked against: upper start-ups, and upper step times except where
        only the model gives them (its upper assumes every response at its cap, no bound on a real run): typical."""
        return (repeats or self.repeats) * sum(
            c.startup_s.upper + c.steps * (c.step_s.typical if c.step_s.source == "model" else c.step_s.upper)
            for c in self.launches
        )

    def to_json(self) -> dict[str, Any]:
        cells = {
            c.cell: {
                "gpus": c.gpus,
                "steps": c.steps,
                "step_s": asdict(c.step_s),
                "startup_s": asdict(c.startup_s),
                "launch_s": {"typical": c.launch_s("typical"), "upper": c.launch_s("upper")},
            }
            for c in self.launches
        }
        totals = {
            which: {"wall_s": self.wall_s(which), "gpu_hours": self.gpu_hours(which)} for which in ("typical", "upper")
        }
        committed = {which: self.wall_s(which, self.committed_repeats) for which in ("typical", "upper")}
        return {
            "cells": cells,
            "repeats": self.repeats,
            "min_rounds": self.min_rounds,
            "totals": totals,
            "committed_wall_s": committed,
            "notes": self.notes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlanCost:
        """A plan.json `cost` read back (what `to_json` wrote), for a command that plans runs of this plan."""
        launches = [
            LaunchCost(
                cell=cell,
                gpus=int(c["gpus"]),
                steps=int(c["steps"]),
                step_s=Estimate(**c["step_s"]),
                startup_s=Estimate(**c["startup_s"]),
            )
            for cell, c in data["cells"].items()
        ]
        return cls(
            launches=launches, repeats=int(data["repeats"]), min_rounds=data.get("min_rounds"), notes=data["notes"]
        )


def stated_for(config: Mapping[str, Any]) -> Stated:
    from scripts.benchmark.calibration.results import parameter_count

    params = parameter_count(config)
    return next(s for s in STATED if params <= s.max_params)


def modelled_step_s(plan: Mapping[str, Any], cell: Mapping[str, Any]) -> Estimate:
    """The model's step time of one cell (module docstring), typical and upper."""
    spec = plan["spec"]
    config = spec["model"]["config"]
    stated = stated_for(config)
    batch, lengths = spec["batch"], spec["lengths"]
    samples = batch["prompts_per_step"] * batch["samples_per_prompt"]
    gpus = cell["gpus"]
    tflops = _roofline_tflops(plan, cell["backend"])
    arch = ModelArch.from_hf_config(config)
    passes = 1 + 1 / 3 + (1 / 3 if spec["grpo"].get("use_kl_loss") else 0.0)
    out = []
    for i, (prompt, response_share) in enumerate(
        ((min(TYPICAL_PROMPT_TOKENS, lengths["max_prompt"]), TYPICAL_RESPONSE_SHARE), (lengths["max_prompt"], 1.0))
    ):
        response = max(1, int(lengths["max_response"] * response_share))
        generated = samples * response
        rollout = max(
            generated / (stated.rollout_tokens_per_gpu_s[i] * gpus["rollout"]),
            lengths["max_response"] * stated.decode_s_per_token[i],
        )
        flops = passes * batch_train_flops(arch, [prompt + response] * samples)
        train = flops / (tflops[i] * 1e12 * gpus["train"])
        out.append(rollout + train + stated.fixed_step_s[i])
    return Estimate(typical=out[0], upper=out[1], source="model")


def _roofline_tflops(plan: Mapping[str, Any], backend: str) -> tuple[float, float]:
    """(typical, upper-estimate) per-GPU TFLOP/s: the calibrated roofline's median and p10 with recompute as the
    backend runs it (the backend's packed shape, else one longest sequence); FALLBACK_TFLOPS without a roofline."""
    from scripts.benchmark.calibration.results import (
        grad_ckpt_by_backend,
        roofline_model_key,
        roofline_spread,
        roofline_tflops,
    )

    key = roofline_model_key(plan)
    recompute = grad_ckpt_by_backend(plan).get(backend, True)
    for shape in (None, "max_len"):
        median = key and roofline_tflops(CALIBRATED_DEVICE, key, recompute, backend=backend, shape=shape)
        if median:
            spread = roofline_spread(CALIBRATED_DEVICE, key, recompute, backend=backend, shape=shape) or {}
            return median, min(median, spread.get("p10") or median)
    return FALLBACK_TFLOPS


def plan_cost(
    plan: Mapping[str, Any],
    *,
    repeats: int,
    min_rounds: int | None = None,
    step_seconds: float | None = None,
    measured: Mapping[str, Mapping[str, Any]] | None = None,
) -> PlanCost:
    """The cost of `plan` at `repeats` (module docstring); `measured`: per cell id, "step_s" and "startup_s" as
    (typical, upper) and "runs", read from the history store (history/costs.py)."""
    derived = plan.get("workload") == "pr"
    notes = []
    if step_seconds is not None and derived:
        notes.append(
            f"--step-seconds {step_seconds:g} is the full-scale preset's step; this plan's workload "
            f"({plan['spec']['name']}) is estimated on its own"
        )
    launches = []
    for cell in plan["cells"]:
        found = _measured_estimates((measured or {}).get(cell["id"]))
        stated = stated_for(plan["spec"]["model"]["config"])
        step = found.get("step_s")
        if step is None and step_seconds is not None and not derived:
            step = Estimate(typical=step_seconds, upper=step_seconds, source="stated (--step-seconds)")
        step = step or modelled_step_s(plan, cell)
        startup = found.get("startup_s") or Estimate(
            typical=stated.startup_s[0], upper=stated.startup_s[1], source="model"
        )
        launches.append(
            LaunchCost(
                cell=cell["id"], gpus=cell["gpus"]["total"], steps=cell["num_steps"], step_s=step, startup_s=startup
            )
        )
    return PlanCost(launches=launches, repeats=repeats, min_rounds=min_rounds, notes=notes)


def _measured_estimates(found: Mapping[str, Any] | None) -> dict[str, Estimate]:
    if not found:
        return {}
    source = f"measured ({found['runs']} recorded run(s))"
    return {
        key: Estimate(typical=found[key][0], upper=found[key][1], source=source) for key in ("step_s", "startup_s")
    }


def budget_problem(cost: PlanCost, budget_minutes: float) -> str | None:
    """Why the plan's committed launches do not fit `budget_minutes` (`PlanCost.budget_wall_s`), with what would;
    None when they fit."""
    need = cost.budget_wall_s(cost.committed_repeats)
    if need <= budget_minutes * 60:
        return None
    fits = int(budget_minutes * 60 // cost.budget_wall_s(1))
    what = "the rounds the paired check needs" if cost.min_rounds else "its launches"
    fix = f"{fits} repeat(s) fit" if fits >= 1 else "not one repeat fits"
    if fits < (cost.min_rounds or 1):
        fix += "; --pr-workload runs a smaller workload of the same model"
    return (
        f"--budget-minutes {budget_minutes:g}: {what} ({cost.committed_repeats} repeat(s) of {len(cost.launches)} "
        f"launch(es)) take {need / 60:.0f} min, start-ups included (upper start-ups, upper step times where measured "
        f"or stated, the model's typical ones otherwise); {fix}"
    )


def cost_lines(cost: PlanCost) -> list[str]:
    """The plan summary's cost lines: every number with where it comes from."""
    lines = []
    for c in cost.launches:
        lines.append(
            f"  cost {c.cell}: start-up {c.startup_s.typical:.0f}-{c.startup_s.upper:.0f} s ({c.startup_s.source}), "
            f"{c.steps} steps x {c.step_s.typical:.3g}-{c.step_s.upper:.3g} s ({c.step_s.source}), {c.gpus} GPUs"
        )
    span = (cost.committed_repeats, cost.repeats) if cost.min_rounds else (cost.repeats,)
    for repeats in dict.fromkeys(span):
        label = f"{repeats} round(s)" if cost.min_rounds else f"{repeats} repeat(s)"
        lines.append(
            f"  cost, {label}: node wall time {cost.wall_s('typical', repeats) / 60:.0f}-"
            f"{cost.wall_s('upper', repeats) / 60:.0f} min, {cost.gpu_hours('typical', repeats):.1f}-"
            f"{cost.gpu_hours('upper', repeats):.1f} GPU-hours (typical-upper, start-ups included)"
        )
    return lines + [f"  cost note: {note}" for note in cost.notes]
