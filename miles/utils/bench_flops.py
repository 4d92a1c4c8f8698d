"""The one FLOPs model of the benchmark, and the per-device peak table that turns it into MFU.

- `ModelArch` holds the architecture facts of a Qwen3 dense (`qwen3`) or Qwen3 MoE (`qwen3_moe`) model, read from its
  HF config.json (`ModelArch.from_hf_config`, `ModelArch.from_config_path`).
- `forward_flops(arch, seq_len)` counts the matmul FLOPs the model requires for one sequence, as MLPerf counts model
  FLOPs: Q/K/V projections (GQA), causal attention scores and values (half of the full s x s products), the output
  projection as heads*head_dim x hidden, the SwiGLU MLP, for MoE layers the router plus the top-k routed experts plus
  any shared experts, and the LM head. One multiply-add is 2 FLOPs. `flops_breakdown` gives the terms.
- `train_flops = 3 * forward_flops` (forward + backward of activations + backward of weights); recompute is not
  counted, so this is model FLOPs, not hardware FLOPs. `batch_train_flops` sums it over sequences.
- `miles_native_*` and `verl_native_*` reproduce each framework's own formula (as documented in its source), only to
  report how far its logged TFLOPs/MFU are from this model.
- `peak_tflops_for_device(name)` is the dense BF16 peak of one device, matched on `torch.cuda.get_device_name()`.

Caveats:
- Norms, rotary embeddings, softmax, activations and the embedding lookup are not matmuls and are not counted.
- Causal attention is counted as exactly half of the full products (s^2/2 per head and matrix, not s(s+1)/2), as
  Miles and MLPerf do; the difference is O(s) and far below 0.1% for s >= 128.
- No torch import: this module runs on the driver and in CI without a GPU stack.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_MODEL_TYPES: tuple[str, ...] = ("qwen3", "qwen3_moe")


@dataclass(frozen=True, kw_only=True)
class ModelArch:
    """Architecture facts that decide the matmul FLOPs of a decoder-only transformer."""

    model_type: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    """FFN width of the dense MLP layers (all layers of a dense model, the `mlp_only_layers` of a MoE model)."""
    vocab_size: int
    tie_word_embeddings: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    moe_layers: tuple[bool, ...] = ()
    """One entry per layer: True where the layer's MLP is a sparse MoE block."""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim", "vocab_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ModelArch.{name} must be > 0, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        if len(self.moe_layers) != self.num_layers:
            raise ValueError(f"moe_layers has {len(self.moe_layers)} entries, expected num_layers={self.num_layers}")
        if any(self.moe_layers) and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok {self.num_experts_per_tok} must be in 1..num_experts ({self.num_experts})"
            )

    @property
    def is_moe(self) -> bool:
        return any(self.moe_layers)

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any]) -> ModelArch:
        """Read a HF config.json dict; an unsupported `model_type` or a missing key raises ValueError naming it."""
        model_type = config.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            supported = ", ".join(SUPPORTED_MODEL_TYPES)
            raise ValueError(f"unsupported model_type {model_type!r} for the FLOPs model (supported: {supported})")
        num_layers = _require(config, "num_hidden_layers")
        hidden_size = _require(config, "hidden_size")
        num_heads = _require(config, "num_attention_heads")
        common = dict(
            model_type=model_type,
            hidden_size=hidden_size,
            num_layers=num_layers,
            num_heads=num_heads,
            num_kv_heads=config.get("num_key_value_heads") or num_heads,
            head_dim=config.get("head_dim") or hidden_size // num_heads,
            intermediate_size=_require(config, "intermediate_size"),
            vocab_size=_require(config, "vocab_size"),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
        )
        if model_type == "qwen3":
            return cls(**common, moe_layers=(False,) * num_layers)
        num_experts = _require(config, "num_experts", "num_local_experts")
        moe_layers = moe_layer_flags(config)
        return cls(
            **common,
            num_experts=num_experts,
            num_experts_per_tok=_require(config, "num_experts_per_tok"),
            moe_intermediate_size=_require(config, "moe_intermediate_size"),
            shared_expert_intermediate_size=config.get("shared_expert_intermediate_size") or 0,
            moe_layers=moe_layers,
        )

    @classmethod
    def from_config_path(cls, path: str | Path) -> ModelArch:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read HF config {path}: {exc}") from exc
        return cls.from_hf_config(config)


def moe_layer_flags(config: Mapping[str, Any]) -> tuple[bool, ...]:
    """Which decoder layers are sparse (MoE), by transformers' Qwen3MoeDecoderLayer rule: every
    `decoder_sparse_step`-th layer unless listed in `mlp_only_layers`. The one copy of the rule (FLOPs model,
    parameter count, Megatron's --moe-layer-freq)."""
    num_layers = _require(config, "num_hidden_layers")
    if config.get("model_type") != "qwen3_moe":
        return (False,) * num_layers
    # transformers 5 writes `num_local_experts` where the published config.json says `num_experts`.
    num_experts = _require(config, "num_experts", "num_local_experts")
    mlp_only = set(config.get("mlp_only_layers") or [])
    sparse_step = config.get("decoder_sparse_step", 1)
    return tuple(
        i not in mlp_only and num_experts > 0 and sparse_step > 0 and (i + 1) % sparse_step == 0
        for i in range(num_layers)
    )


def _require(config: Mapping[str, Any], key: str, *aliases: str) -> int:
    for name in (key, *aliases):
        if config.get(name) is not None:
            return int(config[name])
    raise ValueError(f"HF config of model_type {config.get('model_type')!r} lacks {' / '.join((key, *aliases))!r}")


def flops_breakdown(arch: ModelArch, seq_len: int, *, causal: bool = True) -> dict[str, float]:
    """Forward matmul FLOPs of one sequence, per term, summed over layers. `causal=False` counts attention in full."""
    if seq_len <= 0:
        raise ValueError(f"seq_len must be > 0, got {seq_len}")
    s, h, d = seq_len, arch.hidden_size, arch.head_dim
    num_moe = sum(arch.moe_layers)
    num_dense = arch.num_layers - num_moe
    attention_fraction = 0.5 if causal else 1.0
    return {
        "qkv_proj": arch.num_layers * 2.0 * s * h * (arch.num_heads + 2 * arch.num_kv_heads) * d,
        # QK^T and AV: two s x s x d products per head.
        "attention": arch.num_layers * 2 * 2.0 * s * s * d * arch.num_heads * attention_fraction,
        "o_proj": arch.num_layers * 2.0 * s * arch.num_heads * d * h,
        "mlp": num_dense * 3 * 2.0 * s * h * arch.intermediate_size,
        "router": num_moe * 2.0 * s * h * arch.num_experts,
        "routed_experts": num_moe * 3 * 2.0 * s * h * arch.moe_intermediate_size * arch.num_experts_per_tok,
        "shared_experts": num_moe * 3 * 2.0 * s * h * arch.shared_expert_intermediate_size,
        "lm_head": 2.0 * s * h * arch.vocab_size,
    }


def forward_flops(arch: ModelArch, seq_len: int, *, causal: bool = True) -> float:
    """Matmul FLOPs of one forward pass over one sequence of `seq_len` tokens."""
    return sum(flops_breakdown(arch, seq_len, causal=causal).values())


def train_flops(arch: ModelArch, seq_len: int) -> float:
    """Model FLOPs of one training pass (forward + backward) over one sequence: 3x forward, recompute excluded."""
    return 3.0 * forward_flops(arch, seq_len)


def batch_train_flops(arch: ModelArch, seq_lens: Iterable[int]) -> float:
    """`train_flops` summed over sequences, from sum(s) and sum(s^2): attention is the one term quadratic in s, every
    other term is linear, so a 200-step run's tens of thousands of samples cost two integer sums, not a dict each."""
    lens = list(seq_lens)
    bad = next((s for s in lens if s <= 0), None)
    if bad is not None:
        flops_breakdown(arch, bad)  # raises, naming the length
    terms = flops_breakdown(arch, 1)
    quadratic = terms.pop("attention")
    return 3.0 * (sum(terms.values()) * sum(lens) + quadratic * sum(s * s for s in lens))


def miles_native_forward_flops(arch: ModelArch, seq_len: int) -> float:
    """Miles's `calculate_fwd_flops` for one sequence, as documented: o-proj as hidden x hidden, no router."""
    s, h, d = seq_len, arch.hidden_size, arch.head_dim
    total = 0.0
    for is_moe in arch.moe_layers:
        ffn = (
            arch.moe_intermediate_size * arch.num_experts_per_tok + arch.shared_expert_intermediate_size
            if is_moe
            else arch.intermediate_size
        )
        total += 2.0 * s * h * arch.num_heads * d + 4.0 * s * h * arch.num_kv_heads * d
        total += 2 * (arch.num_heads * s * s * d)  # QK^T and AV, each nh*s^2*d (causal)
        total += 2.0 * s * h * h + 6.0 * s * h * ffn
    return total + 2.0 * s * h * arch.vocab_size


def miles_native_train_flops(arch: ModelArch, seq_lens: Iterable[int]) -> float:
    """What Miles's `perf/actor_train_tflops` multiplies out to for a batch: 3 x its forward count, from sum(s) and
    sum(s^2) (its forward count is a s + b s^2: b from the attention products, a the rest at s = 1)."""
    lens = list(seq_lens)
    quadratic = 2.0 * arch.num_heads * arch.head_dim * arch.num_layers
    linear = miles_native_forward_flops(arch, 1) - quadratic
    return 3.0 * (linear * sum(lens) + quadratic * sum(s * s for s in lens))


def verl_native_train_flops(arch: ModelArch, seq_lens: Iterable[int]) -> float:
    """VERL's `FlopsCounter` estimate (qwen2-style dense / qwen2-moe-style MoE) for a batch, as documented.

    6 x N x tokens with N = per-layer MLP (or top-k experts + router) and attention linear parameters, plus
    2 x vocab x hidden for embedding and LM head even when tied; plus 6 x sum(s^2) x head_dim x heads x layers.
    VERL treats every layer of a MoE model as MoE and has no shared-expert term.
    """
    seq_lens = list(seq_lens)
    h, d = arch.hidden_size, arch.head_dim
    q = arch.num_heads * d
    k = v = arch.num_kv_heads * d
    if arch.is_moe:
        mlp_n = h * arch.num_experts_per_tok * arch.moe_intermediate_size * 3 + h * arch.num_experts
    else:
        mlp_n = h * arch.intermediate_size * 3
    attn_linear_n = h * (q + k + v + arch.num_heads * d)
    dense_n = (mlp_n + attn_linear_n) * arch.num_layers + 2 * arch.vocab_size * h
    attention = 6.0 * sum(s * s for s in seq_lens) * d * arch.num_heads * arch.num_layers
    return 6.0 * dense_n * sum(seq_lens) + attention


# Dense (no sparsity) BF16 tensor-core peak per device, TFLOP/s, from the vendors' data sheets.
PEAK_TFLOPS_BF16_DENSE: dict[str, float] = {
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.0,
    "H20": 148.0,
    "H100": 989.0,  # SXM (get_device_name: "NVIDIA H100 80GB HBM3")
    "H100 PCIE": 756.0,
    "H100 NVL": 835.0,
    "H800": 989.0,
    "H800 PCIE": 756.0,
    "H200": 989.0,
    "H200 NVL": 835.0,
    "GH200": 989.0,
    "B200": 2250.0,
    "B300": 2250.0,
    "GB200": 2500.0,
    "GB300": 2500.0,
    "MI300X": 1307.4,
    "MI325X": 1307.4,
}


def _normalize_device_name(name: str) -> str:
    return " " + " ".join(re.sub(r"[^A-Za-z0-9]+", " ", name).upper().split()) + " "


def match_device(name: str) -> str | None:
    """The peak-table key for a device name: whole words, longest key first, so "H200" is never read as "H20"."""
    normalized = _normalize_device_name(name)
    for key in sorted(PEAK_TFLOPS_BF16_DENSE, key=len, reverse=True):
        if f" {key} " in normalized:
            return key
    return None


def peak_tflops_for_device(name: str) -> float | None:
    """Dense BF16 peak of one device in TFLOP/s, or None for a device outside both tables (never inf).

    Inside a Miles checkout, Miles's own table (`miles.utils.device_flops`) answers first, so the benchmark's MFU and
    Miles's own MFU use one peak; this module's table is the fallback (standalone use, devices Miles does not list).
    """
    miles_peak = _miles_device_peak(name)
    if miles_peak is not None:
        return miles_peak
    key = match_device(name)
    return None if key is None else PEAK_TFLOPS_BF16_DENSE[key]


def _miles_device_peak(name: str) -> float | None:
    try:
        from miles.utils.device_flops import peak_bf16_tflops
    except ImportError:  # not inside a Miles checkout
        return None
    return peak_bf16_tflops(name)
