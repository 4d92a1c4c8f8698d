"""SGLang's own key names per release: the launches spell them for the version each framework runs.

- `version_tuple("0.5.16rc1") -> (0, 5, 16)`; `cuda_graph_max_bs_key(version)`: the ServerArgs field capping the
  decode CUDA-graph batch (renamed in 0.5.14). Each framework spells that field its own way (its adapter).
- `prefill_graphs_off_key(version)`: the ServerArgs bool that turns prefill CUDA graphs off
  (`disable_piecewise_cuda_graph` up to 0.5.13, `disable_prefill_cuda_graph` from 0.5.14, when per-phase backends
  came in); `graph_key_in(key, version)`: what that version calls the setting `key` names.
"""

from __future__ import annotations

from scripts.benchmark.spec.pins import version_tuple  # noqa: F401  (re-exported)

SGLANG_DECODE_GRAPH_RENAME = (0, 5, 14)
"""The SGLang release that renamed ServerArgs.cuda_graph_max_bs to cuda_graph_max_bs_decode."""


def cuda_graph_max_bs_key(sglang_version: str) -> str:
    """The ServerArgs field that caps the decode CUDA-graph batch size in this SGLang version."""
    renamed = version_tuple(sglang_version) >= SGLANG_DECODE_GRAPH_RENAME
    return "cuda_graph_max_bs_decode" if renamed else "cuda_graph_max_bs"


def prefill_graphs_off_key(sglang_version: str) -> str:
    """The ServerArgs field that turns prefill CUDA graphs off: before 0.5.14 the only prefill graphs were the
    piecewise ones (`disable_piecewise_cuda_graph`, default False); 0.5.14 folded them into per-phase backends."""
    renamed = version_tuple(sglang_version) >= SGLANG_DECODE_GRAPH_RENAME
    return "disable_prefill_cuda_graph" if renamed else "disable_piecewise_cuda_graph"


_SAME_SETTING = (
    ("cuda_graph_max_bs", "cuda_graph_max_bs_decode", cuda_graph_max_bs_key),
    ("disable_piecewise_cuda_graph", "disable_prefill_cuda_graph", prefill_graphs_off_key),
)


def graph_key_in(key: str, sglang_version: str) -> str:
    """The name this SGLang version gives the CUDA-graph setting `key` names (`key` itself when it is not one)."""
    for old, new, spelled in _SAME_SETTING:
        if key in (old, new):
            return spelled(sglang_version)
    return key
