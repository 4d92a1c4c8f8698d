"""Which cells a run compares: its sides (candidate and reference) and the side of each cell.

- `run_sides(manifest, plan, frameworks)`: manifest.json's `sides`, else plan.json's, else rebuilt from the cells'
  frameworks for a folder written before sides existed (contracts.sides.sides_from_cells, with the framework
  registry's default pair and labels).
- `cell_side(entry, pair)`: a manifest cell's side name: its `side` field, else the side that runs its framework.

Caveats:
- A folder without sides whose frameworks are all in the registry's default pair gets both default sides, even
  when only one of them ran (its report still names the comparison it was part of).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from scripts.benchmark.contracts.sides import SidePair, sides_from_cells

from scripts.benchmark.frameworks.registry import DEFAULT_PAIR, label_of


def _label(name: str) -> str:
    return label_of(name)  # a framework the registry does not know: its name is its label


def run_sides(manifest: dict[str, Any], plan: dict[str, Any] | None, frameworks: Iterable[str]) -> SidePair:
    """The run's sides: from manifest.json, else plan.json, else one side per framework of the cells."""
    for source in (manifest, plan or {}):
        if isinstance(source.get("sides"), list) and source["sides"]:
            return SidePair.from_list(source["sides"])
    seen = list(dict.fromkeys(frameworks))
    if seen and set(seen) <= set(DEFAULT_PAIR):
        seen = list(DEFAULT_PAIR)
    return sides_from_cells(seen, tuple(DEFAULT_PAIR), {name: _label(name) for name in seen})


def cell_side(entry: dict[str, Any], pair: SidePair) -> str:
    """The side a manifest cell belongs to; a cell of a pre-sides folder belongs to the side of its framework."""
    if entry.get("side"):
        return str(entry["side"])
    side = next((s for s in pair.sides() if s.framework == entry["framework"]), None)
    return side.name if side is not None else str(entry["framework"])
