"""The committed calibration results, read for reports: measured peak, training roofline and weight-sync floors.

- One JSON per GPU model in `calibration/results/<device key>.json`, written by `calibrate.py` on that GPU; the key
  is the `torch.cuda.get_device_name()` lower-cased with runs of other characters turned into "-"
  ("NVIDIA H200" -> "nvidia-h200"), so a report on that GPU finds it from its environment alone.
- `load_calibration(device_name)`, `measured_peak_tflops(device_name)`, `measured_copy_gb_per_s(device_name)`,
  `roofline_tflops(device_name, preset, grad_ckpt)`, `roofline_spread(...)` (its p10/p90 and run-to-run spread) and
  `weight_sync_floor_s(device_name, model, path)` return None (never 0 or inf) when the GPU or the number was not
  measured.
- `grad_ckpt_by_backend(plan)` and `roofline_model_key(plan)` read what the roofline needs from plan.json (the
  report's calibration view and the plan's cost estimate).
- `parameter_count(config)` counts a Qwen3 / Qwen3 MoE model's parameters from its HF config.json (checked in the
  tests against the real transformers model); weight-sync floors move `bf16 bytes = 2 * parameter_count`.

Caveats:
- Roofline entries are keyed by preset name; a model config name (`model_configs/<name>.json`) finds the first
  preset of that model.
- The floors are lower bounds from bandwidth alone: no framework overhead, bucketing or resharding is included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scripts.benchmark.model_config import resolve_model_config

from miles.utils.bench_flops import moe_layer_flags

CALIBRATION_DIR = Path(__file__).resolve().parent / "results"
SCHEMA_VERSION = 1
WEIGHT_SYNC_PATHS: tuple[str, ...] = ("d2d_copy", "broadcast", "all_gather")


def device_key(device_name: str) -> str:
    """File key of a GPU model: "NVIDIA H200" -> "nvidia-h200"."""
    key = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    if not key:
        raise ValueError(f"device name {device_name!r} has no letters or digits to build a calibration key from")
    return key


def load_calibration(device_name: str, directory: Path | None = None) -> dict[str, Any] | None:
    """The calibration of a GPU model (by device name or key), or None when that GPU was never calibrated."""
    path = (directory or CALIBRATION_DIR) / f"{device_key(device_name)}.json"
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema_version {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    return data


def measured_peak_tflops(device_name: str, directory: Path | None = None) -> float | None:
    """Achieved dense bf16 matmul TFLOP/s: median over GPUs of each GPU's best-shape median."""
    data = load_calibration(device_name, directory)
    return None if data is None or not data.get("peak") else float(data["peak"]["bf16_tflops_median"])


def measured_copy_gb_per_s(device_name: str, directory: Path | None = None) -> float | None:
    """Device-to-device copy GB/s (bytes read + written), median over GPUs."""
    data = load_calibration(device_name, directory)
    return None if data is None or not data.get("peak") else float(data["peak"]["d2d_copy_gb_per_s_median"])


def _roofline_entry(data: Mapping[str, Any], preset: str) -> Mapping[str, Any] | None:
    entries = data.get("roofline") or {}
    if preset in entries:
        return entries[preset]
    return next((e for e in entries.values() if e.get("config") == preset), None)


def _roofline_mode(
    device_name: str, preset: str, grad_ckpt: bool, backend: str, shape: str | None, directory: Path | None
) -> Mapping[str, Any] | None:
    data = load_calibration(device_name, directory)
    entry = None if data is None else _roofline_entry(data, preset)
    if entry is None or "shapes" not in entry:
        return None
    if shape is None:
        if backend not in entry["headline_shape"]:
            raise ValueError(f"backend must be one of {sorted(entry['headline_shape'])}, got {backend!r}")
        shape = entry["headline_shape"][backend]
    mode = entry["shapes"].get(shape, {}).get("grad_ckpt", {}).get("on" if grad_ckpt else "off")
    return None if not mode or "tflops" not in mode else mode


def roofline_tflops(
    device_name: str,
    preset: str,
    grad_ckpt: bool,
    *,
    backend: str = "megatron",
    shape: str | None = None,
    directory: Path | None = None,
) -> float | None:
    """Median model TFLOP/s of one forward + backward of the preset's model on one GPU.

    The shape is that backend's token budget per GPU packed with the preset's lengths, unless `shape` names another
    ("max_len": one prompt plus the longest response). `preset` may also be a model config name.
    """
    mode = _roofline_mode(device_name, preset, grad_ckpt, backend, shape, directory)
    return None if mode is None else float(mode["tflops"]["median"])


def roofline_spread(
    device_name: str,
    preset: str,
    grad_ckpt: bool,
    *,
    backend: str = "megatron",
    shape: str | None = None,
    directory: Path | None = None,
) -> dict[str, float | None] | None:
    """The spread of `roofline_tflops`: p10 and p90 over repeats, and the run-to-run spread in percent.

    `run_to_run_pct` is None for a calibration written before back-to-back runs were recorded.
    """
    mode = _roofline_mode(device_name, preset, grad_ckpt, backend, shape, directory)
    if mode is None:
        return None
    runs = mode.get("run_to_run_pct") or {}
    return {
        "p10": float(mode["tflops"]["p10"]),
        "p90": float(mode["tflops"]["p90"]),
        "run_to_run_pct": None if runs.get("tflops") is None else float(runs["tflops"]),
    }


def parameter_count(config: Mapping[str, Any]) -> int:
    """Parameters of a Qwen3 dense or Qwen3 MoE model, as transformers instantiates it (tied embeddings once)."""
    model_type = config.get("model_type")
    if model_type not in ("qwen3", "qwen3_moe"):
        raise ValueError(f"parameter_count supports model_type qwen3 and qwen3_moe, got {model_type!r}")
    h, vocab = int(config["hidden_size"]), int(config["vocab_size"])
    num_heads = int(config["num_attention_heads"])
    num_kv = int(config.get("num_key_value_heads") or num_heads)
    head_dim = int(config.get("head_dim") or h // num_heads)
    attention = h * head_dim * (2 * num_heads + 2 * num_kv) + 2 * head_dim  # q,k,v,o + q_norm, k_norm
    dense_mlp = 3 * h * int(config["intermediate_size"])
    layers = 0
    for is_moe in moe_layer_flags(config):
        mlp = dense_mlp
        if is_moe:
            experts = int(config.get("num_experts") or config.get("num_local_experts"))
            mlp = experts * 3 * h * int(config["moe_intermediate_size"]) + experts * h
            mlp += 3 * h * int(config.get("shared_expert_intermediate_size") or 0)
        layers += attention + mlp + 2 * h  # + input and post-attention RMSNorm
    embeddings = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return layers + embeddings + h  # + final norm


def _saturated_algbw_gb_per_s(data: Mapping[str, Any], collective: str) -> float | None:
    """Algorithm bandwidth of the largest message measured for that collective (the saturated rate)."""
    rows = [r for r in (data.get("interconnect") or {}).get("table", []) if r["collective"] == collective]
    return max(rows, key=lambda r: r["message_bytes"])["algbw_gb_per_s"] if rows else None


def weight_sync_floor_s(
    device_name: str,
    model: str | Path | Mapping[str, Any],
    path: str = "broadcast",
    *,
    directory: Path | None = None,
) -> float | None:
    """Seconds to move every bf16 parameter once at the measured bandwidth: a floor for one full weight sync.

    path "d2d_copy": one on-GPU copy of all weights (colocated engines on the same GPU; bytes read + written);
    "broadcast": one NCCL broadcast of all weights from one rank to the others on the node;
    "all_gather": gathering the full weights from equal shards on every GPU of the node (FSDP's unshard).
    """
    if path not in WEIGHT_SYNC_PATHS:
        raise ValueError(f"weight-sync path must be one of {', '.join(WEIGHT_SYNC_PATHS)}, got {path!r}")
    data = load_calibration(device_name, directory)
    if data is None:
        return None
    param_bytes = 2 * parameter_count(resolve_model_config(model))
    if path == "d2d_copy":
        copy = measured_copy_gb_per_s(device_name, directory)
        return None if copy is None else 2 * param_bytes / (copy * 1e9)
    algbw = _saturated_algbw_gb_per_s(data, path)
    return None if algbw is None else param_bytes / (algbw * 1e9)


def grad_ckpt_by_backend(plan: dict[str, Any] | None) -> dict[str, bool]:
    """Whether each backend recomputes activations, from the resolved spec in plan.json (absent when unknown)."""
    spec = (plan or {}).get("spec") or {}
    found: dict[str, bool] = {}
    fsdp, megatron = spec.get("fsdp"), spec.get("megatron")
    if isinstance(fsdp, dict) and "gradient_checkpointing" in fsdp:
        found["fsdp"] = bool(fsdp["gradient_checkpointing"])
    if isinstance(megatron, dict) and "recompute" in megatron:
        found["megatron"] = megatron["recompute"] not in (None, False, "none")
    return found


def roofline_model_key(plan: dict[str, Any] | None) -> str | None:
    """The calibration roofline is keyed by model config name (spec.model.config); the preset name otherwise."""
    plan = plan or {}
    config = ((plan.get("spec") or {}).get("model") or {}).get("config")
    return config if isinstance(config, str) else plan.get("preset")
