"""Training-step roofline of a preset model on one device, and the check of the FLOPs model against PyTorch's counter.

- `build_causal_lm(config, ...)` random-initialises the real transformers model class of an HF config.json dict
  (Qwen3 dense or Qwen3 MoE; nothing is downloaded), optionally cut to fewer decoder layers, directly on the device.
- `packed_train_step(model, batch)` is forward + backward (no optimizer) over one packed row of sequences
  (`packed.pack_batch`), as both Miles backends run a micro-batch; `train_step(model, sequences)` is the same pack as
  one batch-of-one call per sequence (kept for the counter check with eager attention).
- `measure_roofline(...)` times the packed step with and without gradient checkpointing (`step_timing.time_step`:
  GPU kernel time as the headline, wall time beside it) and converts it to TFLOP/s with the project's one FLOPs
  model (`miles.utils.bench_flops.batch_train_flops`, model FLOPs: recompute is not counted).
- `count_step_flops(...)` runs a step under `torch.utils.flop_counter.FlopCounterMode`;
  `compare_with_counter(...)` sets it against the FLOPs model counted as the counter counts: attention in full
  (non-causal) for every kernel, plus the score recompute the counter charges to the fused attention backward.

Caveats:
- The counter does not see the CPU SDPA kernel or grouped-mm experts, so the
  CPU check runs attention "eager" and MoE experts "eager"; on a GPU the timed packed step itself is counted too.
- A MoE model cut to fewer layers is timed as cut: its rate is that of the cut model (its LM-head share is larger).
- A packed row keeps every sequence's activations at once: without checkpointing the largest budgets do not fit
  one GPU and record "out of memory" for that mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from scripts.benchmark.calibration.packed import PACKED_ATTENTION, pack_batch, register_packed_attention
from scripts.benchmark.calibration.peak import read_gpu_state
from scripts.benchmark.calibration.spread import mode_figures
from scripts.benchmark.calibration.step_timing import time_step

from miles.utils.bench_flops import ModelArch, batch_train_flops, flops_breakdown

ATTENTION_DESCRIPTION = "packed row, PyTorch varlen flash attention (causal per sequence)"
TIMING_DESCRIPTION = "GPU kernel time per step (profiler), wall time per step (CUDA events) beside it"

_CONFIG_KEYS_NOT_FOR_CONSTRUCTOR = ("model_type", "architectures", "torch_dtype", "dtype")


def cut_config(config: Mapping[str, Any], num_layers: int | None) -> dict[str, Any]:
    """The HF config with only the first `num_layers` decoder layers (None: unchanged)."""
    full = int(config["num_hidden_layers"])
    if num_layers is None or num_layers == full:
        return dict(config)
    if not 0 < num_layers < full:
        raise ValueError(f"num_layers must be in 1..num_hidden_layers={full}, got {num_layers}")
    cut = dict(config, num_hidden_layers=num_layers)
    if cut.get("mlp_only_layers"):
        cut["mlp_only_layers"] = [i for i in cut["mlp_only_layers"] if i < num_layers]
    return cut


def build_causal_lm(
    config: Mapping[str, Any],
    *,
    device: Any,
    attn_implementation: str = "sdpa",
    experts_implementation: str | None = None,
    dtype: Any = None,
) -> Any:
    """Random-initialised transformers causal LM of `config`, created on `device` in `dtype` (default bf16)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kwargs = {k: v for k, v in config.items() if k not in _CONFIG_KEYS_NOT_FOR_CONSTRUCTOR}
    hf_config = AutoConfig.for_model(config["model_type"], **kwargs)
    extra = {} if experts_implementation is None else {"experts_implementation": experts_implementation}
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            hf_config, dtype=dtype or torch.bfloat16, attn_implementation=attn_implementation, **extra
        )
    model.train()
    return model


def set_activation_checkpointing(model: Any, enabled: bool) -> None:
    """Per-layer activation (gradient) checkpointing on or off; transformers >= 5.2x renamed the methods."""
    if enabled:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    elif hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    else:
        model.gradient_checkpointing_disable()


def make_sequences(seq_lens: Sequence[int], vocab_size: int, device: Any, seed: int = 0) -> list[Any]:
    """One random token row [1, s] per sequence length."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    return [torch.randint(0, vocab_size, (1, s), generator=generator).to(device) for s in seq_lens]


def train_step(model: Any, sequences: Sequence[Any]) -> None:
    """Forward + backward over every sequence of the pack; gradients accumulate, nothing is stepped."""
    for input_ids in sequences:
        out = model(input_ids=input_ids, labels=input_ids, use_cache=False)
        out.loss.backward()


def packed_train_step(model: Any, batch: Mapping[str, Any]) -> None:
    """Forward + backward over one packed row (see `packed.pack_batch`); gradients accumulate, nothing is stepped."""
    model(**batch).loss.backward()


def _measure_shape(model: Any, arch: ModelArch, seq_lens: Sequence[int], device: Any, **timing: Any) -> dict:
    import torch

    batch = pack_batch(seq_lens, arch.vocab_size, device)
    step_flops = batch_train_flops(arch, seq_lens)
    modes = {}
    for grad_ckpt in timing.pop("grad_ckpt_modes"):
        set_activation_checkpointing(model, grad_ckpt)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        try:
            times = time_step(lambda: packed_train_step(model, batch), device, **timing)
        except torch.cuda.OutOfMemoryError as exc:
            modes["on" if grad_ckpt else "off"] = {"error": f"out of memory: {str(exc).splitlines()[0]}"}
            model.zero_grad(set_to_none=True)
            continue
        memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
        modes["on" if grad_ckpt else "off"] = mode_figures(
            step_flops,
            sum(seq_lens),
            times["kernel_s"],
            times["wall_s"],
            kernels_per_step=times["kernels"],
            peak_memory_gib=memory,
            gpu_state_after=read_gpu_state(device),
        )
    set_activation_checkpointing(model, False)
    model.zero_grad(set_to_none=True)
    return {
        "seq_lens": list(seq_lens),
        "tokens": sum(seq_lens),
        "model_train_flops_per_step": step_flops,
        "grad_ckpt": modes,
    }


def measure_roofline(
    config: Mapping[str, Any],
    shapes: Mapping[str, Sequence[int]],
    *,
    device: Any,
    num_layers: int | None = None,
    warmup: int = 2,
    wall_repeats: int = 3,
    kernel_repeats: int = 5,
    grad_ckpt_modes: Sequence[bool] = (False, True),
) -> dict[str, Any]:
    """Kernel time (headline) and wall time of forward + backward of one packed row, per shape and grad-ckpt mode."""
    import torch

    for name, seq_lens in shapes.items():
        if not seq_lens or min(seq_lens) <= 0:
            raise ValueError(f"shape {name!r}: seq_lens must be positive token counts, got {list(seq_lens)}")
    run_config = cut_config(config, num_layers)
    arch = ModelArch.from_hf_config(run_config)
    model = build_causal_lm(run_config, device=device, attn_implementation=register_packed_attention())
    result = {
        "model_type": run_config["model_type"],
        "num_layers_run": arch.num_layers,
        "num_layers_full": int(config["num_hidden_layers"]),
        "layers_cut": arch.num_layers != int(config["num_hidden_layers"]),
        "num_params_run": sum(p.numel() for p in model.parameters()),
        "attention": (
            ATTENTION_DESCRIPTION if device.type == "cuda" else "packed row, one causal SDPA call per sequence"
        ),
        "timing": TIMING_DESCRIPTION if device.type == "cuda" else "host clock (no kernel time off a GPU)",
        "experts_implementation": getattr(model.config, "_experts_implementation", None) if arch.is_moe else None,
        "dtype": str(model.dtype).removeprefix("torch."),
        "shapes": {},
    }
    timing = {"warmup": warmup, "wall_repeats": wall_repeats, "kernel_repeats": kernel_repeats}
    measured: dict[tuple[int, ...], dict[str, Any]] = {}
    for name, seq_lens in shapes.items():
        if tuple(seq_lens) not in measured:  # two backends with one budget share one measurement
            measured[tuple(seq_lens)] = _measure_shape(
                model, arch, seq_lens, device, grad_ckpt_modes=grad_ckpt_modes, **timing
            )
        result["shapes"][name] = measured[tuple(seq_lens)]
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def _expand_kv_heads(query_shape: Sequence[int], kv_shape: Sequence[int]) -> tuple[int, ...]:
    b, h_q = query_shape[0], query_shape[1]
    return (b, h_q, *kv_shape[2:])


def gqa_sdpa_flop_formulas() -> dict[Any, Any]:
    """FlopCounterMode formulas for the SDPA and varlen flash kernels with grouped K/V heads (GQA).

    The counter of torch < 2.12 asserts equal query and key heads; grouped heads cost what the query heads cost
    (each query head attends over its group's keys), so the shapes are counted with K/V expanded to the query heads.
    """
    import torch
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    aten = torch.ops.aten

    def forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        k, v = _expand_kv_heads(query_shape, key_shape), _expand_kv_heads(query_shape, value_shape)
        return sdpa_flop_count(query_shape, k, v)

    def backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        k, v = _expand_kv_heads(query_shape, key_shape), _expand_kv_heads(query_shape, value_shape)
        return sdpa_backward_flop_count(grad_out_shape, query_shape, k, v)

    def varlen_shapes(query, key, value, cum_seq_q, cum_seq_k):  # one (q, k, v) shape per packed sequence
        heads, lens_q, lens_k = query.shape[1], cum_seq_q.diff().tolist(), cum_seq_k.diff().tolist()
        for s_q, s_k in zip(lens_q, lens_k, strict=True):
            yield (1, heads, s_q, query.shape[2]), (1, heads, s_k, key.shape[2]), (1, heads, s_k, value.shape[2])

    def varlen_forward(query, key, value, cum_seq_q, cum_seq_k, *args, **kwargs) -> int:
        return sum(sdpa_flop_count(*shapes) for shapes in varlen_shapes(query, key, value, cum_seq_q, cum_seq_k))

    def varlen_backward(grad_out, query, key, value, out, lse, cum_seq_q, cum_seq_k, *args, **kwargs) -> int:
        shapes = varlen_shapes(query, key, value, cum_seq_q, cum_seq_k)
        return sum(sdpa_backward_flop_count(q, q, k, v) for q, k, v in shapes)

    varlen_forward._get_raw = varlen_backward._get_raw = True  # the counter passes tensors: lengths are values
    kernels = ("flash", "efficient", "cudnn")
    formulas = {getattr(aten, f"_scaled_dot_product_{k}_attention"): forward for k in kernels}
    formulas.update({getattr(aten, f"_scaled_dot_product_{k}_attention_backward"): backward for k in kernels})
    formulas.update({aten._flash_attention_forward: varlen_forward, aten._flash_attention_backward: varlen_backward})
    return formulas


def count_step_flops(model: Any, sequences: Sequence[Any], packed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """FLOPs PyTorch's FlopCounterMode sees over one train_step (one packed step when `packed` is the batch)."""
    from torch.utils.flop_counter import FlopCounterMode

    model.zero_grad(set_to_none=True)
    counter = FlopCounterMode(display=False, custom_mapping=gqa_sdpa_flop_formulas())
    with counter:
        if packed is None:
            train_step(model, sequences)
        else:
            packed_train_step(model, packed)
    by_op = {str(op).removeprefix("aten."): int(n) for op, n in counter.get_flop_counts()["Global"].items()}
    return {"total": int(counter.get_total_flops()), "by_op": by_op}


def compare_with_counter(
    arch: ModelArch, seq_lens: Sequence[int], counted_total: float, *, sdpa_kernel: bool = False
) -> dict[str, Any]:
    """Counter total vs the FLOPs model, with attention counted as the counter counts it.

    The counter charges attention for the full s x s products (not causal); for the fused SDPA kernels it also
    charges the backward for recomputing the scores (5 products where the model counts 4), i.e. half of the full
    forward attention once more.
    """
    model_causal = batch_train_flops(arch, seq_lens)
    breakdowns = [flops_breakdown(arch, s, causal=False) for s in seq_lens]
    model_full = sum(3.0 * sum(b.values()) for b in breakdowns)
    recompute = sum(0.5 * b["attention"] for b in breakdowns) if sdpa_kernel else 0.0
    expected = model_full + recompute
    ratio = counted_total / expected
    return {
        "counter_total": counted_total,
        "model_train_flops_causal": model_causal,
        "model_train_flops_full_attention": model_full,
        "sdpa_backward_recompute_flops": recompute,
        "counter_over_model_as_counted": ratio,
        "counter_over_model_causal": counted_total / model_causal,
        "agrees_within_1pct": abs(ratio - 1.0) <= 0.01,
    }


def crosscheck_flops(
    config: Mapping[str, Any],
    seq_lens: Sequence[int],
    *,
    device: Any,
    attn_implementation: str,
    num_layers: int | None = None,
    dtype: Any = None,
) -> dict[str, Any]:
    """Build the model with a counter-visible attention (and eager experts for MoE), count one step, compare."""
    if attn_implementation == PACKED_ATTENTION:
        register_packed_attention()
    run_config = cut_config(config, num_layers)
    arch = ModelArch.from_hf_config(run_config)
    model = build_causal_lm(
        run_config,
        device=device,
        attn_implementation=attn_implementation,
        experts_implementation="eager" if arch.is_moe else None,
        dtype=dtype,
    )
    packed = pack_batch(seq_lens, arch.vocab_size, device) if attn_implementation == PACKED_ATTENTION else None
    counted = count_step_flops(model, make_sequences(seq_lens, arch.vocab_size, device), packed)
    result = {
        "device": str(device),
        "attention": attn_implementation,
        "num_layers_run": arch.num_layers,
        "seq_lens": list(seq_lens),
        "counter_by_op": counted["by_op"],
        **compare_with_counter(
            arch, seq_lens, counted["total"], sdpa_kernel=attn_implementation in ("sdpa", PACKED_ATTENTION)
        ),
    }
    del model
    return result
