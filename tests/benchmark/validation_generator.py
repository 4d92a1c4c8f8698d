"""Generated benchmark runs whose truth is known, for validating the statistics (not the report's fixtures).

- Built independently of synthetic_runs.py (the report's fixtures): step times are AR(1) across steps (lag-1
  correlation `phi` 0.5, marginal CV 2%), every run has its own offset (CV 1%, what a node, a placement or a
  compilation cache changes between runs), and a warm-up of 3-8 steps that decays geometrically from 50-200% slower
  to 5-15% slower at its last step (so each warm-up step is at least 2.5 step SDs slower than the steady state).
- `generate_runs(rng, ...)` returns `GeneratedRuns`: step times (runs x steps), the five phases (generate, train,
  old_logprob, weight_sync, other) as shares of each step that sum to it exactly, token counts, and the true warm-up
  length per run. `gap` multiplies the steady level (a true Miles/VERL gap), `gap_phase` puts it in one phase.
- `drifting_runs` makes runs without a steady state: the level keeps growing linearly over the whole run.
- `write_generated_folder(root, ...)` writes a run folder (manifest.json, metrics.jsonl, environment.json, and the
  plan's parity.json layout so that pairs are compared) from such runs, for the cost benchmark.

Caveats:
- Test and benchmark code: the numbers are generated, never presented as measurements of a framework.
- "The true warm-up" is the steps whose mean is above the steady level; the generator makes the last of them at least
  5% slower, because a step 1% slower than its neighbours under 2% noise is not a warm-up anyone can see.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tests.benchmark.synthetic_runs import SyntheticCell, matched_parity

from miles.utils.bench_metrics import SCHEMA_VERSION

PHASE_SHARES = {"generate": 0.55, "train": 0.30, "old_logprob": 0.08, "weight_sync": 0.04, "other": 0.03}
"""Mean share of the step per phase; ref_logprob is not run (0), as in a run without a reference model."""
PHASE_SHARE_CV = 0.03
RESPONSE_TOKENS = 3000.0 * 256
PROMPT_TOKENS = 200.0 * 256
LEVEL_S = 100.0


@dataclass(frozen=True, kw_only=True)
class GeneratedRuns:
    step_time: np.ndarray
    """(runs, steps) seconds."""
    phases: dict[str, np.ndarray]
    """Phase name -> (runs, steps) seconds; the phases of a step sum to its step time."""
    response_tokens: np.ndarray
    warmup: np.ndarray
    """(runs,) true warm-up length in steps."""
    level: float
    """The true steady-state mean step time (without the per-run offsets)."""


def ar1(rng: np.random.Generator, shape: tuple[int, ...], sd: float, phi: float) -> np.ndarray:
    """Stationary AR(1) along the last axis with marginal standard deviation `sd`."""
    out = np.empty(shape)
    out[..., 0] = rng.normal(0.0, sd, shape[:-1])
    innovation_sd = sd * np.sqrt(1 - phi**2)
    for k in range(1, shape[-1]):
        out[..., k] = phi * out[..., k - 1] + rng.normal(0.0, innovation_sd, shape[:-1])
    return out


def warmup_excess(rng: np.random.Generator, runs: int, steps: int, lengths: tuple[int, int]) -> tuple[np.ndarray, ...]:
    """(runs, steps) relative excess of the warm-up steps (0 after them) and the (runs,) warm-up lengths."""
    warmup = rng.integers(lengths[0], lengths[1] + 1, runs)
    first = rng.uniform(0.5, 2.0, runs)
    last = rng.uniform(0.05, 0.15, runs)
    rate = np.log(last / first) / np.maximum(warmup - 1, 1)
    k = np.arange(steps)[None, :]
    excess = first[:, None] * np.exp(rate[:, None] * k)
    return np.where(k < warmup[:, None], excess, 0.0), warmup


def generate_runs(
    rng: np.random.Generator,
    runs: int,
    *,
    steps: int = 24,
    cv: float = 0.02,
    phi: float = 0.5,
    run_cv: float = 0.01,
    warmup_lengths: tuple[int, int] = (3, 8),
    gap: float = 1.0,
    gap_phase: str | None = None,
    drift: float = 0.0,
) -> GeneratedRuns:
    """`runs` independent runs of `steps` steps; `drift` is the relative growth of the level over the whole run."""
    excess, warmup = warmup_excess(rng, runs, steps, warmup_lengths)
    offset = rng.normal(0.0, run_cv, runs)[:, None]
    trend = drift * np.arange(steps)[None, :] / max(steps - 1, 1)
    base = LEVEL_S * (1 + offset) * (1 + trend) * (1 + excess) * (1 + ar1(rng, (runs, steps), cv, phi))
    shares = {p: s * (1 + rng.normal(0.0, PHASE_SHARE_CV, (runs, steps))) for p, s in PHASE_SHARES.items()}
    total = sum(shares.values())
    phases = {p: base * s / total for p, s in shares.items()}
    if gap_phase is not None:
        # The whole gap lands in one phase: that phase grows by (gap - 1) x the step's level.
        phases[gap_phase] = phases[gap_phase] + (gap - 1) * base
    else:
        phases = {p: v * gap for p, v in phases.items()}
    step_time = sum(phases.values())
    response = RESPONSE_TOKENS * (1 + ar1(rng, (runs, steps), 0.01, phi))
    return GeneratedRuns(
        step_time=step_time, phases=phases, response_tokens=response, warmup=warmup, level=LEVEL_S * gap
    )


def records_of(runs: GeneratedRuns, index: int, framework: str) -> list[dict]:
    """Record dicts (the current schema) of one generated run (no per-step objects needed to write them); runs are
    synchronous, so the trainer waits for the whole generation (rollout_wait = generate)."""
    out = []
    for k in range(runs.step_time.shape[1]):
        step_time = float(runs.step_time[index, k])
        phases = {p: float(v[index, k]) for p, v in runs.phases.items()}
        response = float(runs.response_tokens[index, k])
        train_tokens = response + PROMPT_TOKENS
        tflops = 6 * 1.7e9 * train_tokens / phases["train"] / 8 / 1e12
        out.append(
            {
                "schema_version": SCHEMA_VERSION,
                "framework": framework,
                "step": k,
                "step_time_s": step_time,
                "phases_s": {**phases, "ref_logprob": None, "rollout_wait": phases["generate"]},
                "tokens": {"prompt": PROMPT_TOKENS, "response": response},
                "samples": 256,
                "train_tflops_per_gpu": tflops,
                "train_mfu": tflops / 989.0,
                "train_tokens_per_s": train_tokens / phases["train"],
                "rollout_tokens_per_gpu_s": response / phases["generate"] / 8,
                "wait_ratio": 1 - phases["train"] / step_time,
                "overlap_s": None,
                "flags": [],
                "raw": {},
                "learning": learning_of(runs, index, k, response),
            }
        )
    return out


def learning_of(runs: GeneratedRuns, index: int, step: int, response: float) -> dict[str, float]:
    """A learning block for one step: smooth trends plus noise drawn from the step's own step time, so both sides
    learn alike and every value is reproducible from the run."""
    wiggle = float(runs.step_time[index, step] / runs.level - 1)
    progress = step / max(1, runs.step_time.shape[1] - 1)
    return {
        "reward_mean": 0.3 + 0.3 * progress + wiggle,
        "response_length_mean": response / 256,
        "truncation_fraction": 0.02 + 0.1 * abs(wiggle),
        "entropy": 0.5 - 0.2 * progress + wiggle / 10,
        "clip_fraction": 0.01 + abs(wiggle) / 10,
        "approx_kl": 5e-4 + abs(wiggle) / 100,
        "grad_norm": 0.3 + wiggle,
        "policy_loss": wiggle,
    }


def write_generated_folder(
    root: Path, *, steps: int, pairs: list[tuple[str, str]], repeats: int = 1, seed: int = 0, gap: float = 1.0
) -> Path:
    """A run folder with a Miles and a VERL cell per (backend, layout) in `pairs`; Miles is `gap` times slower."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for backend, layout in pairs:
        for framework in ("miles", "verl"):
            cell_id = f"{framework}-{backend}-{layout}"
            runs = generate_runs(rng, repeats, steps=steps, gap=gap if framework == "miles" else 1.0)
            for repeat in range(repeats):
                rel = f"cells/{cell_id}/rep-{repeat}"
                folder = root / rel
                folder.mkdir(parents=True, exist_ok=True)
                lines = [json.dumps(r) for r in records_of(runs, repeat, framework)]
                (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
                environment = {"gpu_model": "NVIDIA H200", "gpu_count": 8, "hostname": f"node-{repeat}"}
                (folder / "environment.json").write_text(json.dumps(environment), encoding="utf-8")
                entries.append(
                    {
                        "id": cell_id,
                        "framework": framework,
                        "backend": backend,
                        "layout": layout,
                        "repeat": repeat,
                        "state": "complete",
                        "reason": None,
                        "dir": rel,
                        "metrics": f"{rel}/metrics.jsonl",
                    }
                )
    manifest = {"schema_version": 1, "plan": "plan.json", "cells": entries}
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    cells = [SyntheticCell(framework=f, backend=b, layout=lay) for b, lay in pairs for f in ("miles", "verl")]
    (root / "parity.json").write_text(json.dumps(matched_parity(cells)), encoding="utf-8")
    return root
