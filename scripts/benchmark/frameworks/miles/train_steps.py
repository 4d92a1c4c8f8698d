"""Miles's optimizer-step metrics (`train/*`) -> per-rollout means, for the learning signals.

The train rank logs one `train/*` dict per optimizer step: `step N: {...}` on stdout (N = the train step; Megatron
prints every such line twice) and, in the event log and the tracking backend's files, a log call keyed by `train/step`
instead of `rollout/step`.
The rollout readers (sink.py) skip both. Train step t belongs to rollout t // optimizer_steps_per_step, i.e. schema
step t // optimizer_steps_per_step + 1 (the same shift as the timers).

Caveats:
- A train step logged again (Megatron's double print, a restart re-running it) keeps its last value: identical for
  the double print, the surviving attempt for a restart.
- A critic's `critic-step N:` lines and events from a critic process are not the actor's and are skipped.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from miles.utils.bench_metrics import is_finite_number
from miles.utils.bench_tracking import FORMAT as TRACKING_FORMAT

MILES_TRAIN_STEP_KEY = "train/step"
_STDOUT_TRAIN_LINE = re.compile(r"(?<![\w-])step (?P<id>\d+): (?P<d>\{.*\})")


def _is_critic(obj: dict[str, Any]) -> bool:
    source = obj.get("source")
    return isinstance(source, dict) and source.get("component") == "critic"


def _jsonl_train_steps(path: Path) -> dict[int, dict[str, Any]]:
    steps: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").split("\n"):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue  # empty, truncated or corrupt: the rollout reader flags it
        if not isinstance(obj, dict) or _is_critic(obj):
            continue
        if obj.get("type") != "metric" and obj.get("format") != TRACKING_FORMAT:  # event log, tracking backend
            continue
        metrics = obj.get("metrics") or {}
        step = metrics.get(MILES_TRAIN_STEP_KEY)
        if is_finite_number(step) and "rollout/step" not in metrics:
            steps[int(step)] = metrics
    return steps


def _stdout_train_steps(path: Path) -> dict[int, dict[str, Any]]:
    from scripts.benchmark.frameworks.miles.sink import _literal_dict

    steps: dict[int, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").split("\n"):
        match = _STDOUT_TRAIN_LINE.search(line)
        if match is None:
            continue
        try:
            metrics = _literal_dict(match.group("d"))
        except (ValueError, SyntaxError):
            continue
        if any(k.startswith("train/") for k in metrics):
            steps[int(match.group("id"))] = metrics
    return steps


def read_train_steps(paths: Iterable[Path]) -> dict[int, dict[str, Any]]:
    """Every optimizer step's `train/*` metrics by train step, from event logs and stdout files alike."""
    steps: dict[int, dict[str, Any]] = {}
    for path in paths:
        head = path.read_text(encoding="utf-8", errors="replace").lstrip()[:1]
        steps.update(_jsonl_train_steps(path) if head == "{" else _stdout_train_steps(path))
    return steps


def infer_optimizer_steps(train_steps: dict[int, Any], num_rollouts: int) -> int | None:
    """Optimizer steps per rollout from the counts, when the context does not give it and they divide evenly."""
    if not train_steps or num_rollouts <= 0:
        return None
    count = max(train_steps) + 1
    return count // num_rollouts if count % num_rollouts == 0 else None


def train_means_by_step(
    train_steps: dict[int, dict[str, Any]], optimizer_steps_per_step: int
) -> dict[int, tuple[dict[str, float], int]]:
    """Schema step -> (mean of each finite numeric `train/*` value over its optimizer steps, optimizer steps seen)."""
    grouped: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for train_step, metrics in train_steps.items():
        grouped[train_step // optimizer_steps_per_step + 1].append(metrics)
    out: dict[int, tuple[dict[str, float], int]] = {}
    for step, dicts in grouped.items():
        values: dict[str, list[float]] = defaultdict(list)
        for metrics in dicts:
            for key, value in metrics.items():
                if key.startswith("train/") and key != MILES_TRAIN_STEP_KEY and is_finite_number(value):
                    values[key].append(float(value))
        out[step] = ({k: math.fsum(v) / len(v) for k, v in values.items()}, len(dicts))
    return out
