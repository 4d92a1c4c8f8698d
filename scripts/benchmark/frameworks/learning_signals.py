"""The `learning` block of each step record, from the native metrics the readers keep in `StepRecord.raw`.

Every framework logs what its policy learns; its adapter maps its keys onto `LEARNING_SIGNALS` (bench_metrics.py)
in one unit per signal (docs/benchmark/metrics.md, "Learning signals", has the table and the reasons). The key maps
live with each framework (`frameworks/<name>/learning.py`); this module holds what they share:

- `first_present(metrics, keys)`: the first of `keys` present in `metrics`, as a finite float or None.
- `learning_from_keys(metrics, keys)`: every signal read through a key map (signal -> native keys, first wins).
- `set_learning(record, learning, flags)`: sets the block, flags each signal that is None
  (`learning_missing:<signal>`) and merges the reader's flags (`learning_unknown:<signal>:<why>`, ...).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from miles.utils.bench_metrics import LEARNING_SIGNALS, StepRecord, finite_or_none


def first_present(metrics: Mapping[str, Any], keys: Sequence[str]) -> float | None:
    for key in keys:
        if key in metrics:
            return finite_or_none(metrics[key])
    return None


def learning_from_keys(metrics: Mapping[str, Any], keys: Mapping[str, Sequence[str]]) -> dict[str, float | None]:
    return {name: first_present(metrics, keys.get(name, ())) for name in LEARNING_SIGNALS}


def set_learning(record: StepRecord, learning: dict[str, float | None], flags: list[str]) -> StepRecord:
    """The record with `learning` set and its flags merged (missing signals flagged); the same object."""
    learning = {name: learning.get(name) for name in LEARNING_SIGNALS}
    flags = flags + [f"learning_missing:{name}" for name, value in learning.items() if value is None]
    record.learning = learning
    record.flags = list(dict.fromkeys([*record.flags, *flags]))
    return record
