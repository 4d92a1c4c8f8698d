"""Test helper: write run folders with schema-v2 records whose truth is known.

- `SyntheticCell` describes one cell: per-phase mean seconds, noise (coefficient of variation, AR(1) coefficient),
  a warm-up of `warmup_steps` steps that start `warmup_factor` times slower and decay linearly to 1, repeats, and
  faults (NaN steps, phases not reported, a failed repeat).
- `write_run_folder(root, cells, parity=...)` writes manifest.json, plan.json, parity.json and, per repeat,
  metrics.jsonl (through bench_metrics.write_records) and environment.json.

Caveats:
- Test code only: the numbers are generated, never presented as measurements of a framework.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scripts.benchmark.analysis.compare import PairKey
from scripts.benchmark.contracts.sides import Side

from miles.utils.bench_metrics import PHASES, STEP_PHASES, StepRecord, write_records

SAMPLES_PER_STEP = 256
PROMPT_TOKENS_PER_SAMPLE = 200
DATASHEET_PEAK_TFLOPS = 989.0
TRAIN_GPUS = 8


@dataclass(kw_only=True)
class SyntheticCell:
    framework: str
    backend: str = "fsdp"
    layout: str = "colocate"
    phase_means: dict[str, float] = field(
        default_factory=lambda: {"generate": 60.0, "old_logprob": 8.0, "ref_logprob": 0.0, "train": 30.0}
    )
    other_s: float = 2.0
    response_length: float = 3000.0
    num_steps: int = 80
    repeats: int = 1
    cv: float = 0.03
    ar: float = 0.5
    warmup_steps: int = 0
    warmup_factor: float = 3.0
    seed: int = 0
    nan_steps: tuple[int, ...] = ()
    unreported_phases: tuple[str, ...] = ()
    failed_repeats: tuple[int, ...] = ()
    gpu_model: str = "NVIDIA H200"
    side: str | None = None
    """The side's name (the cell id's prefix); None: named after its framework, as before sides existed."""

    @property
    def id(self) -> str:
        return f"{self.side or self.framework}-{self.backend}-{self.layout}"


def ar1_noise(rng: np.random.Generator, n: int, cv: float, ar: float) -> np.ndarray:
    """Multiplicative AR(1) noise with marginal standard deviation `cv` around 1."""
    innovations = rng.normal(0.0, cv * np.sqrt(1 - ar**2), size=n)
    out = np.empty(n)
    out[0] = rng.normal(0.0, cv)
    for t in range(1, n):
        out[t] = ar * out[t - 1] + innovations[t]
    return 1.0 + out


def warmup_multiplier(cell: SyntheticCell, step: int) -> float:
    if step >= cell.warmup_steps:
        return 1.0
    return 1.0 + (cell.warmup_factor - 1.0) * (1.0 - step / cell.warmup_steps)


def build_records(cell: SyntheticCell, repeat: int) -> list[StepRecord]:
    rng = np.random.default_rng([cell.seed, repeat])
    noise = {p: ar1_noise(rng, cell.num_steps, cell.cv, cell.ar) for p in [*PHASES, "response"]}
    records = []
    for step in range(cell.num_steps):
        slow = warmup_multiplier(cell, step)
        # Synchronous cells: the trainer waits for the whole generation, so rollout_wait is the generation time.
        mean = {**cell.phase_means, "rollout_wait": cell.phase_means.get("generate", 0.0), "other": cell.other_s}
        true_phases = {p: mean.get(p, 0.0) * slow * noise[p][step] for p in STEP_PHASES}
        step_time = sum(true_phases.values())
        true_phases["generate"] = true_phases["rollout_wait"]
        phases = {p: None if p in cell.unreported_phases else true_phases[p] for p in PHASES}
        response = int(cell.response_length * SAMPLES_PER_STEP * noise["response"][step])
        prompt = PROMPT_TOKENS_PER_SAMPLE * SAMPLES_PER_STEP
        train = phases["train"]
        tflops = None if train is None else 6 * 1.7e9 * (prompt + response) / train / TRAIN_GPUS / 1e12
        generate = phases["generate"]
        record = StepRecord(
            framework=cell.framework,
            step=step,
            step_time_s=float("nan") if step in cell.nan_steps else step_time,
            phases_s=phases,
            tokens={"prompt": prompt, "response": response},
            samples=SAMPLES_PER_STEP,
            train_tflops_per_gpu=tflops,
            train_mfu=None if tflops is None else tflops / DATASHEET_PEAK_TFLOPS,
            train_tokens_per_s=None if train is None else (prompt + response) / train,
            rollout_tokens_per_gpu_s=None if generate is None else response / generate / TRAIN_GPUS,
            wait_ratio=None if train is None else 1 - train / step_time,
            overlap_s=None if generate is None else 0.0,
            flags=["nonfinite:step_time"] if step in cell.nan_steps else [],
            raw={
                "response_length/min": 10.0,
                "response_length/max": float(cell.response_length * 2.5),
            },
        )
        records.append(record)
    return records


def environment_record(cell: SyntheticCell, repeat: int) -> dict[str, Any]:
    """The runner's environment.json layout (scripts/benchmark/runner/environment_record.py)."""
    gpus = [
        {"index": i, "name": cell.gpu_model, "memory_total_mib": 143771.0, "driver": "570.86.15"}
        for i in range(TRAIN_GPUS)
    ]
    return {
        "framework": cell.framework,
        "hostname": f"node-{repeat}",
        "gpu_model": cell.gpu_model,
        "gpu_count": TRAIN_GPUS,
        "gpus": gpus,
        "driver": "570.86.15",
        "cuda_driver": "12.8",
        "cuda_runtime": "12.8",
        "nccl": "2.26.2",
        "packages": {
            "torch": {"version": "2.7.1", "commit": None},
            "sglang": {"version": "0.4.9", "commit": None},
            cell.framework: {"version": "0.0.0", "commit": "0123456789abcdef"},
        },
        "missing": {},
    }


def matched_parity(cells: list[SyntheticCell], spec_hash: str = "0123456789ab") -> dict[str, Any]:
    """The plan's parity.json layout (scripts/benchmark/plan/parity.py): one table per backend/layout pair."""
    pairs = []
    for backend, layout in sorted({(c.backend, c.layout) for c in cells}):
        rows = [
            {"knob": "lr", "group": "optimizer", "miles": 1e-6, "verl": 1e-6, "status": "matched", "note": ""},
            {
                "knob": "completion_wait",
                "group": "rollout",
                "miles": "event",
                "verl": "poll 2 s",
                "status": "asymmetry",
                "note": "VERL's generate phase ends up to 2 s late per step",
            },
        ]
        pairs.append(
            {
                "backend": backend,
                "layout": layout,
                "miles_cell": f"miles-{backend}-{layout}",
                "verl_cell": f"verl-{backend}-{layout}",
                "error": None,
                "counts": {"matched": 1, "asymmetry": 1, "MISMATCH": 0},
                "rows": rows,
            }
        )
    return {"schema_version": 1, "spec_hash": spec_hash, "pairs": pairs}


def matched_parity_v2(cells: list[SyntheticCell], sides: list[dict[str, Any]]) -> dict[str, Any]:
    """parity.json version 2 (candidate/reference keys) for a run with explicit sides: every knob matched."""
    names = {s["role"]: s["name"] for s in sides}
    pairs = []
    for backend, layout in sorted({(c.backend, c.layout) for c in cells}):
        row = {"knob": "lr", "group": "optimizer", "candidate": 1e-6, "reference": 1e-6, "status": "matched"}
        pairs.append(
            {
                "backend": backend,
                "layout": layout,
                "candidate_cell": f"{names['candidate']}-{backend}-{layout}",
                "reference_cell": f"{names['reference']}-{backend}-{layout}",
                "counts": {"matched": 1, "asymmetry": 0, "MISMATCH": 0},
                "rows": [row],
            }
        )
    return {"schema_version": 2, "spec_hash": "0123456789ab", "pairs": pairs}


def write_run_folder(
    root: Path,
    cells: list[SyntheticCell],
    *,
    parity: dict[str, Any] | None = None,
    write_parity: bool = True,
    sides: list[dict[str, Any]] | None = None,
) -> Path:
    """A complete run folder under `root`; returns `root`. With `sides` (contracts.sides.Side dicts) manifest.json
    and plan.json carry them and every cell its `side`, as the runner writes them; parity.json is then version 2."""
    root.mkdir(parents=True, exist_ok=True)
    entries = []
    for cell in cells:
        for repeat in range(cell.repeats):
            rel = f"cells/{cell.id}/rep-{repeat}"
            state = "failed" if repeat in cell.failed_repeats else "complete"
            entries.append(
                {
                    "id": cell.id,
                    "framework": cell.framework,
                    **({"side": cell.side or cell.framework} if sides else {}),
                    "backend": cell.backend,
                    "layout": cell.layout,
                    "repeat": repeat,
                    "state": state,
                    "reason": "exit code 1" if state == "failed" else None,
                    "started_at": "2026-01-01T00:00:00Z",
                    "ended_at": "2026-01-01T01:00:00Z",
                    "dir": rel,
                    "metrics": f"{rel}/metrics.jsonl",
                }
            )
            folder = root / rel
            folder.mkdir(parents=True, exist_ok=True)
            records = build_records(cell, repeat)
            if state == "failed":
                records = records[: cell.num_steps // 3]
            write_records(folder / "metrics.jsonl", records)
            (folder / "environment.json").write_text(json.dumps(environment_record(cell, repeat)))
    manifest = {"schema_version": 1, "plan": "plan.json", "cells": entries} | ({"sides": sides} if sides else {})
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    spec = {
        "model": {"hf_checkpoint": "/models/Qwen3-1.7B-Base", "config": "qwen3-1.7b-base"},
        "fsdp": {"gradient_checkpointing": True},
        "megatron": {"recompute": "none"},
    }
    plan = {"schema_version": 1, "spec": spec, "spec_hash": "0123456789ab", "preset": "qwen3-1.7b-base", "cells": []}
    plan |= {"sides": sides} if sides else {}
    (root / "plan.json").write_text(json.dumps(plan))
    if write_parity:
        if parity is None:
            parity = matched_parity(cells) if not sides else matched_parity_v2(cells, sides)
        (root / "parity.json").write_text(json.dumps(parity))
    return root


def gap_pair(
    miles_extra_s: dict[str, float],
    *,
    backend: str = "fsdp",
    layout: str = "colocate",
    num_steps: int = 600,
    cv: float = 0.03,
    seed: int = 0,
) -> list[SyntheticCell]:
    """A Miles/VERL pair on the default 100 s step, Miles slower by `miles_extra_s` seconds per phase; VERL does not
    report ref_logprob (as in real runs), both warm up for 5 steps."""
    phases = {p: v + miles_extra_s.get(p, 0.0) for p, v in SyntheticCell(framework="verl").phase_means.items()}
    common = {"backend": backend, "layout": layout, "num_steps": num_steps, "warmup_steps": 5, "cv": cv}
    verl = SyntheticCell(framework="verl", seed=seed + 1, unreported_phases=("ref_logprob",), **common)
    return [SyntheticCell(framework="miles", phase_means=phases, seed=seed, **common), verl]


def pair_key(backend: str = "fsdp", layout: str = "colocate") -> PairKey:
    """The Miles-vs-VERL pair of a backend and layout, as the analysis names it to `compare_sides`."""
    candidate = Side(role="candidate", name="miles", framework="miles", label="Miles")
    reference = Side(role="reference", name="verl", framework="verl", label="VERL")
    return PairKey(
        backend=backend,
        layout=layout,
        candidate=candidate,
        reference=reference,
        candidate_cell=candidate.cell_id(backend, layout),
        reference_cell=reference.cell_id(backend, layout),
    )
