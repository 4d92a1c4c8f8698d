"""Staleness read from the runs: the policy lag each framework logs per step (`StepRecord.policy_lag`), against the
bound the launches set (the parity row `max_policy_lag`) and against the other side of the pair.

- `observed_lag(columns)`: over every step of every repeat, the mean of the step means, the largest step maximum and
  the steps that logged it; None when no step did (a sink without staleness records).
- `lag_pairs(cells, parity, candidate, reference)`: per backend x layout with both sides' cells, both observed lags,
  the bound each launch set, and flags: `<side>:exceeds_bound` (a logged maximum above that side's bound),
  `<side>:not_logged`, `observed_lag_differs` (the two maxima differ). Both are the training policy's version minus
  the oldest weight version of what it trains, each from its own versions: VERL's the oldest weights a trajectory
  used, Miles's the version each sample finished under (docs/benchmark/report.md, Policy lag).
- `bound_versions(value)`: a parity row's lag bound as a number of versions (a row may say on which versions it is
  counted after the number); None when unbounded or unknown.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from scripts.benchmark.analysis.step_columns import StepColumns
from scripts.benchmark.contracts.parity import ParityFile


def observed_lag(columns: list[StepColumns]) -> dict[str, float | int] | None:
    means = [c.values["policy_lag.mean"] for c in columns if "policy_lag.mean" in c.values]
    maxima = [c.values["policy_lag.max"] for c in columns if "policy_lag.max" in c.values]
    mean = np.concatenate(means) if means else np.zeros(0)
    top = np.concatenate(maxima) if maxima else np.zeros(0)
    mean, top = mean[np.isfinite(mean)], top[np.isfinite(top)]
    if not len(mean) and not len(top):
        return None
    return {
        "mean": float(mean.mean()) if len(mean) else None,
        "max": float(top.max()) if len(top) else None,
        "steps": int(max(len(mean), len(top))),
    }


def _bounds(parity: ParityFile | None, backend: str, layout: str) -> tuple[Any, Any]:
    pair = parity.pair(backend, layout) if parity is not None else None
    row = next((r for r in pair.rows if r.knob == "max_policy_lag"), None) if pair is not None else None
    return (row.candidate, row.reference) if row is not None else (None, None)


def bound_versions(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    found = re.match(r"(\d+)\b", value) if isinstance(value, str) else None
    return int(found.group(1)) if found else None


def _side_flags(name: str, lag: dict | None, bound: Any) -> list[str]:
    if lag is None or lag["max"] is None:
        return [f"{name}:not_logged"]
    versions = bound_versions(bound)
    if versions is not None and lag["max"] > versions:
        return [f"{name}:exceeds_bound"]
    return []


def lag_pairs(cells: list[dict[str, Any]], parity: ParityFile | None, candidate: str, reference: str) -> list[dict]:
    by_key = {(c["side"], c["backend"], c["layout"]): c for c in cells}
    rows = []
    for backend, layout in sorted({(c["backend"], c["layout"]) for c in cells}):
        a, b = by_key.get((candidate, backend, layout)), by_key.get((reference, backend, layout))
        if a is None or b is None:
            continue
        lag_a, lag_b = a.get("policy_lag"), b.get("policy_lag")
        bound_a, bound_b = _bounds(parity, backend, layout)
        flags = _side_flags(candidate, lag_a, bound_a) + _side_flags(reference, lag_b, bound_b)
        maxima = [lag["max"] for lag in (lag_a, lag_b) if lag is not None and lag["max"] is not None]
        if len(maxima) == 2 and maxima[0] != maxima[1]:
            flags.append("observed_lag_differs")
        rows.append(
            {
                "backend": backend,
                "layout": layout,
                "bound": {candidate: bound_a, reference: bound_b},
                "observed": {candidate: lag_a, reference: lag_b},
                "flags": flags,
            }
        )
    return rows
