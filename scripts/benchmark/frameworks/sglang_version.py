"""SGLang's own key names per release: the launches spell them for the version each framework runs.

- `version_tuple("0.5.16rc1") -> (0, 5, 16)`; `cuda_graph_max_bs_key(version)`: the ServerArgs field capping the
  decode CUDA-graph batch (renamed in 0.5.14). Each framework spells that field its own way (its adapter).
"""

from __future__ import annotations

from scripts.benchmark.spec.pins import version_tuple  # noqa: F401  (re-exported)

SGLANG_DECODE_GRAPH_RENAME = (0, 5, 14)
"""The SGLang release that renamed ServerArgs.cuda_graph_max_bs to cuda_graph_max_bs_decode."""


def cuda_graph_max_bs_key(sglang_version: str) -> str:
    """The ServerArgs field that caps the decode CUDA-graph batch size in this SGLang version."""
    renamed = version_tuple(sglang_version) >= SGLANG_DECODE_GRAPH_RENAME
    return "cuda_graph_max_bs_decode" if renamed else "cuda_graph_max_bs"
