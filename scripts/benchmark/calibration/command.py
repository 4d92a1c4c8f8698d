"""`calibrate`: a node's ceilings: achieved bf16 peak, copy bandwidth, training-step roofline, FLOPs check.

Writes `<output-dir>/<device key>.json` (schema in docs/benchmark.md, read back by `calibration/results.py`);
commit it under `scripts/benchmark/calibration/results/` so reports on that GPU model use it. Each part is
recorded as it finishes (a part that fails records its error and the rest still run).

Prerequisites: torch and transformers; on the GPU path, a CUDA node (every GPU of it is measured). Nothing is
downloaded: models are random-initialised from `scripts/benchmark/model_configs/<name>.json`.

Examples:
    python scripts/benchmark/calibrate.py --output-dir scripts/benchmark/calibration/results
    python scripts/benchmark/calibrate.py --tiny --output-dir /tmp/calibration   # CPU path, what CI runs

Caveats:
- Roofline shapes come from each preset (calibration_presets): its per-GPU token budget of each backend packed with
  its prompt and response lengths, and one longest sequence. One GPU runs the whole model (no TP/EP split).
- NVLink multicast stays off in every process started here (see calibration/interconnect.py, MULTICAST_OFF_ENV).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from scripts.benchmark.calibration.interconnect import apply_multicast_off_env
from scripts.benchmark.calibration.results import SCHEMA_VERSION, device_key
from scripts.benchmark.calibration.shapes import BACKENDS, read_preset_shapes
from scripts.benchmark.model_config import preset_names, resolve_model_config

from miles.utils.bench_metrics import write_text_atomic

# Eager attention materialises s x s scores per layer and head: a shorter pack that fits one GPU.
EAGER_CROSSCHECK_SEQ_LENS: list[int] = [2048, 1024, 1024]
PARTS: tuple[str, ...] = ("peak", "roofline", "crosscheck", "interconnect")
TINY_CONFIG: dict[str, Any] = {
    "model_type": "qwen3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 512,
    "tie_word_embeddings": True,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "hidden_act": "silu",
    "attention_bias": False,
}
TINY_SHAPES: dict[str, list[int]] = {"max_len": [144], "megatron": [64, 48, 32], "fsdp": [64, 48, 32, 64, 48, 32]}


@dataclass(kw_only=True)
class CalibrationPlan:
    """Everything one calibration run measures; validated before any device work starts."""

    output_dir: Path
    device: str
    rooflines: dict[str, dict[str, Any]]
    """Preset name -> {"model": config name, "config": HF config dict, "shapes": {shape name: seq lens}}."""
    moe_num_layers: int | None
    matmul_shapes: list[tuple[int, int, int]]
    copy_bytes: int
    repeats: int
    step_repeats: int
    """Profiled (kernel-time) steps per shape and mode in one roofline run."""
    wall_repeats: int
    roofline_runs: int
    eager_seq_lens: list[int]
    interconnect: dict[str, Any]
    parts: list[str] = field(default_factory=lambda: list(PARTS))

    def __post_init__(self) -> None:
        if self.device not in ("cuda", "cpu"):
            raise ValueError(f"device must be 'cuda' or 'cpu', got {self.device!r}")
        unknown = set(self.parts) - set(PARTS)
        if unknown:
            raise ValueError(f"unknown parts {sorted(unknown)}; expected some of {', '.join(PARTS)}")
        for preset, entry in self.rooflines.items():
            missing = [b for b in BACKENDS if b not in entry["shapes"]]
            if missing:
                raise ValueError(f"preset {preset!r}: shapes lack the backend pack(s) {missing}")
            for name, seq_lens in {**entry["shapes"], "eager": self.eager_seq_lens}.items():
                if not seq_lens or min(seq_lens) <= 0:
                    raise ValueError(
                        f"preset {preset!r} shape {name!r} needs positive sequence lengths, got {seq_lens}"
                    )
        if self.repeats < 3 or min(self.step_repeats, self.wall_repeats, self.roofline_runs) < 1:
            raise ValueError(
                f"repeats must be >= 3 and step_repeats, wall_repeats, roofline_runs >= 1, got {self.repeats}, "
                f"{self.step_repeats}, {self.wall_repeats}, {self.roofline_runs}"
            )


def describe_environment(device: str) -> dict[str, Any]:
    """GPU model and count, driver, CUDA, NCCL and package versions of this node."""
    import platform

    import torch
    import transformers

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "cuda": torch.version.cuda,
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(
            gpu_name=torch.cuda.get_device_name(0),
            gpu_count=torch.cuda.device_count(),
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            sm_count=props.multi_processor_count,
            nccl=".".join(map(str, torch.cuda.nccl.version())),
            driver=_nvidia_smi("driver_version"),
            gpu_names=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        )
    else:
        env.update(gpu_name="cpu", gpu_count=0, driver=None)
    return env


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.splitlines()[0].strip() if out.strip() else None


def _run_part(result: dict, name: str, fn: Callable[[], Any], write: Callable[[], None]) -> None:
    """Run one part, record its value or its error, and write the JSON so far."""
    print(f"[calibrate] {name} ...", flush=True)
    try:
        result[name] = fn()
    except Exception as exc:  # noqa: BLE001 - a failed part is recorded; the remaining parts still run
        result[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=6)}
        print(result[name]["traceback"], file=sys.stderr, flush=True)
    write()


def _roofline_run(plan: CalibrationPlan, torch_device: Any, run: int) -> dict[str, Any]:
    from scripts.benchmark.calibration.roofline import measure_roofline

    entries = {}
    for preset, spec in plan.rooflines.items():
        config = spec["config"]
        num_layers = plan.moe_num_layers if config["model_type"] == "qwen3_moe" else None
        layers = num_layers or config["num_hidden_layers"]
        print(f"[calibrate]   roofline run {run + 1}/{plan.roofline_runs}: {preset} (layers {layers})", flush=True)
        try:
            measured = measure_roofline(
                config,
                spec["shapes"],
                device=torch_device,
                num_layers=num_layers,
                wall_repeats=plan.wall_repeats,
                kernel_repeats=plan.step_repeats,
            )
        except Exception as exc:  # noqa: BLE001 - one model failing (e.g. out of memory) keeps the others
            measured = {"error": f"{type(exc).__name__}: {exc}"}
            print(traceback.format_exc(limit=6), file=sys.stderr, flush=True)
        entries[preset] = {"config": spec["model"], "headline_shape": {b: b for b in BACKENDS}, **measured}
    return entries


def _roofline(plan: CalibrationPlan, torch_device: Any) -> dict[str, Any]:
    """Every preset measured `roofline_runs` times back to back, pooled with the run-to-run spread."""
    from scripts.benchmark.calibration.spread import merge_runs

    return merge_runs([_roofline_run(plan, torch_device, run) for run in range(plan.roofline_runs)])


def _crosscheck(plan: CalibrationPlan, torch_device: Any) -> list[dict[str, Any]]:
    """Counter vs FLOPs model: the timed (packed) step of the largest dense model on a GPU, and eager attention."""
    from scripts.benchmark.calibration.packed import PACKED_ATTENTION
    from scripts.benchmark.calibration.roofline import crosscheck_flops

    def size(preset: str) -> int:
        return int(plan.rooflines[preset]["config"]["hidden_size"]) * int(
            plan.rooflines[preset]["config"]["num_hidden_layers"]
        )

    dense = [p for p, e in plan.rooflines.items() if e["config"]["model_type"] == "qwen3"]
    moe = [p for p, e in plan.rooflines.items() if e["config"]["model_type"] == "qwen3_moe"]
    runs = []
    if dense:
        largest = max(dense, key=size)
        if plan.device == "cuda":
            shapes = plan.rooflines[largest]["shapes"]
            unique = {tuple(v): k for k, v in reversed(list(shapes.items()))}
            runs += [(largest, PACKED_ATTENTION, name, list(seq_lens)) for seq_lens, name in unique.items()]
        runs.append((largest, "eager", "eager", plan.eager_seq_lens))
    if moe:
        runs.append((moe[0], "eager", "eager", plan.eager_seq_lens))
    checks = []
    for preset, attention, shape, seq_lens in runs:
        config = plan.rooflines[preset]["config"]
        num_layers = plan.moe_num_layers if config["model_type"] == "qwen3_moe" else None
        print(f"[calibrate]   crosscheck {preset} {attention} {seq_lens}", flush=True)
        try:
            check = crosscheck_flops(
                config, seq_lens, device=torch_device, attn_implementation=attention, num_layers=num_layers
            )
        except Exception as exc:  # noqa: BLE001
            check = {"error": f"{type(exc).__name__}: {exc}", "attention": attention, "seq_lens": seq_lens}
        checks.append({"preset": preset, "config": plan.rooflines[preset]["model"], "shape": shape, **check})
        if plan.device == "cuda":
            import torch

            torch.cuda.empty_cache()
    return checks


def _interconnect(plan: CalibrationPlan, gpu_count: int) -> dict[str, Any]:
    from scripts.benchmark.calibration.interconnect import measure_collectives

    if plan.device == "cuda":
        if gpu_count < 2:
            return {"skipped": f"{gpu_count} GPU on this node: collectives need at least 2"}
        return measure_collectives(gpu_count, backend="nccl", **plan.interconnect)
    return measure_collectives(2, backend="gloo", **plan.interconnect)


def calibrate_impl(plan: CalibrationPlan) -> dict[str, Any]:
    """Measure every requested part, writing `<output_dir>/<device key>.json` after each one."""
    apply_multicast_off_env()
    import torch

    from scripts.benchmark.calibration.peak import measure_device_ceilings

    if plan.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda was asked for but torch sees no CUDA device")
    environment = describe_environment(plan.device)
    key = device_key(environment["gpu_name"])
    result: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device_key": key,
        "environment": environment,
        "settings": {
            "presets": {p: {"config": e["model"], "shapes": e["shapes"]} for p, e in plan.rooflines.items()},
            "moe_num_layers": plan.moe_num_layers,
            "eager_crosscheck_seq_lens": plan.eager_seq_lens,
            "matmul_shapes": plan.matmul_shapes,
            "copy_bytes": plan.copy_bytes,
            "repeats": plan.repeats,
            "step_repeats": plan.step_repeats,
            "wall_repeats": plan.wall_repeats,
            "roofline_runs": plan.roofline_runs,
        },
    }
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    out_path = plan.output_dir / f"{key}.json"

    def write() -> None:  # whole after every part: a crash or a full disk never leaves a torn result
        write_text_atomic(out_path, json.dumps(result, indent=2) + "\n")

    torch_device = torch.device("cuda", 0) if plan.device == "cuda" else torch.device("cpu")
    gpu_indices = list(range(environment["gpu_count"])) if plan.device == "cuda" else None
    if "peak" in plan.parts:
        _run_part(
            result,
            "peak",
            lambda: measure_device_ceilings(
                gpu_indices, shapes=plan.matmul_shapes, copy_bytes=plan.copy_bytes, repeats=plan.repeats
            ),
            write,
        )
    if "roofline" in plan.parts:
        _run_part(result, "roofline", lambda: _roofline(plan, torch_device), write)
    if "crosscheck" in plan.parts:
        _run_part(result, "flops_crosscheck", lambda: _crosscheck(plan, torch_device), write)
    if "interconnect" in plan.parts:
        _run_part(result, "interconnect", lambda: _interconnect(plan, environment["gpu_count"]), write)
    result["output_path"] = str(out_path)
    return result


def _preset_roofline(name: str) -> dict[str, Any]:
    shapes = read_preset_shapes(name)
    return {
        "model": shapes.model_config,
        "config": resolve_model_config(shapes.model_config),
        "shapes": shapes.shapes(),
    }


def build_calibration_plan(
    *,
    output_dir: Path,
    device: str,
    tiny: bool,
    presets: Sequence[str],
    moe_num_layers: int,
    parts: Sequence[str],
    roofline_runs: int = 2,
) -> CalibrationPlan:
    """The full GPU plan, or with `tiny` the CPU path CI runs (tiny GEMMs, a 2-layer Qwen3, gloo collectives)."""
    from scripts.benchmark.calibration.interconnect import GPU_MESSAGE_BYTES
    from scripts.benchmark.calibration.peak import GPU_COPY_BYTES, GPU_MATMUL_SHAPES

    if tiny:
        return CalibrationPlan(
            output_dir=output_dir,
            device="cpu",
            rooflines={"tiny": {"model": "tiny-qwen3", "config": dict(TINY_CONFIG), "shapes": dict(TINY_SHAPES)}},
            moe_num_layers=None,
            matmul_shapes=[(64, 64, 64), (128, 128, 128)],
            copy_bytes=1 << 20,
            repeats=5,
            step_repeats=1,
            wall_repeats=1,
            roofline_runs=roofline_runs,
            eager_seq_lens=[64, 32],
            interconnect={"message_bytes": [1 << 12, 1 << 16], "rounds": 2, "budget_bytes": 1 << 18},
            parts=list(parts),
        )
    return CalibrationPlan(
        output_dir=output_dir,
        device=device,
        rooflines={name: _preset_roofline(name) for name in presets},
        moe_num_layers=moe_num_layers,
        matmul_shapes=list(GPU_MATMUL_SHAPES),
        copy_bytes=GPU_COPY_BYTES,
        repeats=50,
        step_repeats=5,
        wall_repeats=3,
        roofline_runs=roofline_runs,
        eager_seq_lens=list(EAGER_CROSSCHECK_SEQ_LENS),
        interconnect={"message_bytes": list(GPU_MESSAGE_BYTES)},
        parts=list(parts),
    )


def main(
    output_dir: Annotated[Path, typer.Option(help="folder for <device key>.json")] = Path("."),
    device: Annotated[str, typer.Option(help="cuda (every GPU of the node) or cpu")] = "cuda",
    tiny: Annotated[bool, typer.Option(help="CPU path on a tiny config (what CI runs); ignores --presets")] = False,
    presets: Annotated[str, typer.Option(help="comma-separated preset names (default: every preset)")] = "",
    moe_num_layers: Annotated[int, typer.Option(help="decoder layers kept for a MoE model (all need >1 GPU)")] = 16,
    parts: Annotated[str, typer.Option(help="comma-separated parts to measure")] = ",".join(PARTS),
    roofline_runs: Annotated[int, typer.Option(help="back-to-back roofline runs, pooled with their spread")] = 2,
) -> None:
    plan = build_calibration_plan(
        output_dir=output_dir,
        device=device,
        tiny=tiny,
        presets=[p for p in presets.split(",") if p] or preset_names(),
        moe_num_layers=moe_num_layers,
        parts=[p for p in parts.split(",") if p],
        roofline_runs=roofline_runs,
    )
    result = calibrate_impl(plan)
    print(f"[calibrate] wrote {result['output_path']}")
