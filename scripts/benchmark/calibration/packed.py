"""One packed micro-batch per step, as both Miles backends run it: every sequence in one row, attention per sequence.

Megatron (THD, `--qkv-format thd`) and Miles's FSDP backend (`flash_attention_2/3` with packed sequences) run a
micro-batch as one row of all its tokens, with cumulative sequence lengths telling the attention kernel where each
sequence starts: the matmuls see every token at once and attention stays causal inside each sequence.

- `pack_batch(seq_lens, vocab_size, device)` is that row: random token ids, positions restarting at 0 per sequence
  (what the rotary embedding sees), and the `cu_seq_lens_*` / `max_length_*` keywords transformers passes down to
  its attention function.
- `register_packed_attention()` adds `PACKED_ATTENTION` to transformers' attention functions: on a GPU PyTorch's own
  varlen flash-attention kernel (`aten._flash_attention_forward`, grouped K/V heads handled by the kernel, causal per
  sequence, with its backward); elsewhere one causal SDPA call per sequence (same result, used by the CPU tests).

Caveats:
- transformers builds no attention mask for an implementation it does not know, so the only sequence boundaries are
  the `cu_seq_lens_*` keywords: a call without them is refused rather than attending across sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PACKED_ATTENTION = "packed_varlen"


def pack_batch(seq_lens: Sequence[int], vocab_size: int, device: Any, seed: int = 0) -> dict[str, Any]:
    """Model keyword arguments of one packed row holding every sequence of `seq_lens`."""
    import torch

    if not seq_lens or min(seq_lens) <= 0:
        raise ValueError(f"seq_lens must be positive token counts, got {list(seq_lens)}")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    input_ids = torch.randint(0, vocab_size, (1, sum(seq_lens)), generator=generator)
    positions = torch.cat([torch.arange(s) for s in seq_lens]).unsqueeze(0)
    bounds = torch.tensor([0, *seq_lens], dtype=torch.int32).cumsum(0, dtype=torch.int32)
    cu_seq_lens = bounds.to(device)
    return {
        "input_ids": input_ids.to(device),
        "labels": input_ids.to(device),
        "position_ids": positions.to(device),
        "cu_seq_lens_q": cu_seq_lens,
        "cu_seq_lens_k": cu_seq_lens,
        "max_length_q": int(max(seq_lens)),
        "max_length_k": int(max(seq_lens)),
        "use_cache": False,
    }


def _flash_varlen(query: Any, key: Any, value: Any, cu_seq_lens: Any, max_len: int, scaling: float | None) -> Any:
    """[tokens, heads, dim] in and out; PyTorch's flash kernel takes fewer K/V heads than query heads as they are."""
    import torch

    return torch.ops.aten._flash_attention_forward(
        query, key, value, cu_seq_lens, cu_seq_lens, max_len, max_len, 0.0, True, False, scale=scaling
    )[0]


def _per_sequence_sdpa(query: Any, key: Any, value: Any, cu_seq_lens: Any, scaling: float | None) -> Any:
    """The same attention as one causal SDPA call per sequence (reference and CPU path)."""
    import torch
    import torch.nn.functional as F

    groups = query.shape[1] // key.shape[1]
    bounds = cu_seq_lens.tolist()
    outputs = []
    for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
        q, k, v = (t[begin:end].transpose(0, 1).unsqueeze(0) for t in (query, key, value))
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        outputs.append(F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling)[0].transpose(0, 1))
    return torch.cat(outputs, dim=0)


def packed_attention_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers attention function: query [1, heads, tokens, dim] in, [1, tokens, heads, dim] out."""
    cu_seq_lens = kwargs.get("cu_seq_lens_q")
    if cu_seq_lens is None or query.shape[0] != 1:
        raise ValueError(f"{PACKED_ATTENTION} needs one packed row and cu_seq_lens_q (see pack_batch)")
    if dropout:
        raise ValueError(f"{PACKED_ATTENTION} is timed without attention dropout, got dropout={dropout}")
    q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))
    if q.is_cuda:
        out = _flash_varlen(q, k, v, cu_seq_lens, int(kwargs["max_length_q"]), scaling)
    else:
        out = _per_sequence_sdpa(q, k, v, cu_seq_lens, scaling)
    return out.unsqueeze(0), None


def register_packed_attention() -> str:
    """Make `PACKED_ATTENTION` a valid `attn_implementation`; returns its name."""
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_ATTENTION, packed_attention_forward)
    return PACKED_ATTENTION
