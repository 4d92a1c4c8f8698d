"""The training shapes a preset gives one GPU, for the roofline: its token budget per GPU packed with its lengths.

- `read_preset_shapes(name)` reads `presets/<name>.yaml` without spec validation (the calibration runs on bare GPU
  images without pydantic) and takes the same values as `spec.BenchmarkSpec`: `model.config`, `lengths.max_prompt`,
  `lengths.max_response`, and per backend `megatron|fsdp.max_tokens_per_gpu`, else `batch.max_tokens_per_gpu`
  (tests check the two readings agree on every preset).
- `pack_sequences(budget, max_prompt, max_response)` fills the budget exactly: sequences of a full prompt plus 3/8,
  2/8 and 1/8 of the longest response, repeated while they fit, then one sequence of the remaining tokens.
- Shapes of one preset: "max_len" (one prompt + longest response) and one mixed pack per backend budget.

Caveats:
- The response mix is a fixed stand-in for an RL step's length distribution (the real one depends on the policy).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.benchmark.model_config import BACKENDS, read_preset_yaml

RESPONSE_FRACTIONS: tuple[float, ...] = (3 / 8, 2 / 8, 1 / 8)


@dataclass(frozen=True, kw_only=True)
class PresetShapes:
    name: str
    model_config: str
    max_prompt: int
    max_response: int
    max_tokens_per_gpu: dict[str, int]
    """Backend -> token budget of one GPU's micro-batch."""

    def shapes(self) -> dict[str, list[int]]:
        """Shape name -> sequence lengths: "max_len" plus one mixed pack per backend."""
        longest = min(self.max_prompt + self.max_response, min(self.max_tokens_per_gpu.values()))
        packs = {
            backend: pack_sequences(budget, self.max_prompt, self.max_response)
            for backend, budget in self.max_tokens_per_gpu.items()
        }
        return {"max_len": [longest], **packs}


def pack_sequences(budget: int, max_prompt: int, max_response: int) -> list[int]:
    """Sequence lengths filling `budget` tokens exactly (see the module docstring for the mix)."""
    if min(budget, max_prompt, max_response) <= 0:
        raise ValueError(
            f"budget {budget}, max_prompt {max_prompt} and max_response {max_response} must all be > 0 tokens"
        )
    cycle = [max_prompt + max(1, int(max_response * f)) for f in RESPONSE_FRACTIONS]
    lengths: list[int] = []
    while True:
        nxt = cycle[len(lengths) % len(cycle)]
        if sum(lengths) + nxt > budget:
            break
        lengths.append(nxt)
    remainder = budget - sum(lengths)
    return lengths + ([remainder] if remainder else [])


def _field(raw: dict[str, Any], path: str, source: Path) -> Any:
    node: Any = raw
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"{source}: preset lacks {path!r}")
        node = node[part]
    return node


def read_preset_shapes(name: str, presets_dir: Path | None = None) -> PresetShapes:
    """Model config, lengths and per-backend token budget of a preset YAML."""
    raw = read_preset_yaml(name, presets_dir)
    path = Path(f"{name}.yaml")
    default_budget = int(_field(raw, "batch.max_tokens_per_gpu", path))
    budgets = {b: int((raw.get(b) or {}).get("max_tokens_per_gpu") or default_budget) for b in BACKENDS}
    return PresetShapes(
        name=name,
        model_config=str(_field(raw, "model.config", path)),
        max_prompt=int(_field(raw, "lengths.max_prompt", path)),
        max_response=int(_field(raw, "lengths.max_response", path)),
        max_tokens_per_gpu=budgets,
    )
