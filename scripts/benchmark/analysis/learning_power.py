"""How many repeats a side the learning guard needs to see the differences it is built for (each signal's `planted`
in bench_metrics.LEARNING_SIGNALS: a 10% lower solve rate, responses 20% longer, an entropy collapse, KL 3x, clip
fraction 2x) 9 times in 10: said before GPU time is spent (the plan summary of a learning run), on every report's
card, and by `ab` and `check`.

- `planted_effects(name, steps, drift_only)`: the planted difference's size on each quantity the guard tests over
  `steps` paired steps (window mean and last third, or the drift), in the test's units (log for relative signals).
- `power(...)`: the chance the guard calls it "different" with R runs a side when the spread between runs decides:
  a t test over the repeats (pooled spread, 2R - 2 degrees of freedom) whose 1 - 2 alpha / k interval (k: the
  judged signals x quantities, the report's Bonferroni) must clear the margin: 1 - F(t_crit; 2R - 2, noncentrality
  (|effect| - bound) / (spread x sqrt(2 / R))), the noncentral t.
- `repeats_needed(...)`: the fewest repeats a side (2 to `MAX_REPEATS`) at which the best tested quantity reaches
  `POWER`; None beyond.
- Spreads (`Spreads`: per quantity, the standard deviation of one run's quantity, and where it comes from): the
  run's own repeats (between_repeats), the history (`spread_from_runs` over recorded repeat values), or the
  registry's stated `run_spread`. A window-mean spread (history, stated) is taken sqrt(3) times larger for the last
  third and sqrt(6) for the drift: what white step noise gives them, more than a run's offset or slow drift does.

Caveats: the power is that of the best single quantity, not of their union (a lower bound); the history's and the
stated spreads are of a window mean over the runs they come from, not rescaled to another number of steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from scipy import special

from miles.utils.bench_metrics import LEARNING_SIGNALS

POWER = 0.90
MAX_REPEATS = 64
"""Beyond this many runs a side the guard is not the tool: the statement says "more than 64"."""
QUANTITY_SCALE = {"level": 1.0, "late": math.sqrt(3.0), "drift": math.sqrt(6.0)}
"""A window-mean spread's multiple for each quantity (module docstring)."""


@dataclass(frozen=True, kw_only=True)
class Spreads:
    by_quantity: dict[str, float]
    source: str
    """Where the spreads come from, in words ("this run's 3 repeats a side", "the history (4 runs)", ...)."""


def planted_effects(name: str, steps: int, *, drift_only: bool = False) -> dict[str, float]:
    """Quantity -> the size of the signal's planted difference on it over `steps` paired steps (module docstring);
    empty for a signal without one."""
    spec = LEARNING_SIGNALS[name]
    if spec.planted is None or steps < 1:
        return {}
    factors = np.asarray(spec.planted.factors(steps), dtype=float)
    if spec.margin_kind == "relative":
        d = np.log(factors)
    else:  # an absolute plant shifts the level: only meaningful for a signal with a fixed unit
        d = factors - 1.0
    third = max(1, steps // 3)
    if drift_only:
        return {"drift": float(d[-third:].mean() - d[:third].mean())}
    return {"level": float(d.mean()), "late": float(d[-third:].mean())}


def bound_of(name: str, margin: float) -> float:
    """The margin in the test's units."""
    return math.log1p(margin) if LEARNING_SIGNALS[name].margin_kind == "relative" else margin


def power(effect: float, bound: float, spread: float, repeats: int, *, alpha: float, family: int) -> float:
    """The chance of a "different" call with `repeats` runs a side (module docstring)."""
    if repeats < 2 or spread <= 0:
        return 1.0 if spread <= 0 and abs(effect) > bound else 0.0
    df = 2 * repeats - 2
    critical = float(special.stdtrit(df, 1 - alpha / max(1, family)))
    noncentrality = (abs(effect) - bound) / (spread * math.sqrt(2 / repeats))
    return float(1 - special.nctdtr(df, noncentrality, critical))


def repeats_needed(
    effects: dict[str, float], bound: float, spreads: Spreads, *, alpha: float, family: int
) -> int | None:
    """The fewest repeats a side at which some quantity is called "different" with `POWER`; None past MAX_REPEATS."""
    for repeats in range(2, MAX_REPEATS + 1):
        if best_power(effects, bound, spreads, repeats, alpha=alpha, family=family) >= POWER:
            return repeats
    return None


def best_power(
    effects: dict[str, float], bound: float, spreads: Spreads, repeats: int, *, alpha: float, family: int
) -> float:
    tested = [q for q in effects if q in spreads.by_quantity]
    return max(
        (power(effects[q], bound, spreads.by_quantity[q], repeats, alpha=alpha, family=family) for q in tested),
        default=0.0,
    )


def stated_spreads(name: str) -> Spreads:
    """The registry's assumed run-to-run spread of a window mean, scaled per quantity."""
    spread = LEARNING_SIGNALS[name].run_spread
    return Spreads(
        by_quantity={q: spread * scale for q, scale in QUANTITY_SCALE.items()},
        source="the stated default spread between runs (no measured one)",
    )


def run_spreads(
    name: str, between: dict[str, tuple[float, float, int]], tested: dict[str, dict], counts: list[int]
) -> Spreads:
    """Per quantity, the spread of one run's quantity as this run measured it: between its repeats (`between`,
    what the guard's error is then made of); with one repeat a side, the stated spread between runs and this run's
    step noise together. `tested`: the guard's calls, each with its `step_error` (taken out here)."""
    step = {q: call.pop("step_error") / math.sqrt(2) for q, call in tested.items() if "step_error" in call}
    if not between:
        stated = stated_spreads(name)
        spreads = {q: math.hypot(v, step.get(q, 0.0)) for q, v in stated.by_quantity.items()}
        return Spreads(by_quantity=spreads, source=stated.source + " and this run's step noise")
    spreads = {}
    for q, (error, df, fewest) in between.items():
        most = df + 2 - fewest
        spreads[q] = error / math.sqrt(1 / fewest + 1 / most)
    return Spreads(
        by_quantity=spreads, source=f"the spread between this run's repeats ({' and '.join(map(str, counts))})"
    )


def spread_from_runs(name: str, runs: Iterable[list[float]]) -> tuple[float, int] | None:
    """(pooled standard deviation between the repeats of a run, runs used) from each recorded run's per-repeat
    window means (log scale for relative signals); None without a run of two or more usable repeats."""
    spec = LEARNING_SIGNALS[name]
    squares, df, used = 0.0, 0, 0
    for values in runs:
        x = [v for v in values if v is not None and math.isfinite(v)]
        if spec.margin_kind == "relative":
            x = [math.log(spec.level(v)) for v in x if spec.level(v) > 0]
        if len(x) < 2:
            continue
        squares += float(np.sum((np.asarray(x) - np.mean(x)) ** 2))
        df += len(x) - 1
        used += 1
    return (math.sqrt(squares / df), used) if df else None


def history_spreads(name: str, runs: Iterable[list[float]]) -> Spreads | None:
    """Spreads from recorded runs' repeat values (`spread_from_runs`), scaled per quantity; None without any."""
    found = spread_from_runs(name, runs)
    if found is None:
        return None
    spread, used = found
    return Spreads(
        by_quantity={q: spread * scale for q, scale in QUANTITY_SCALE.items()},
        source=f"the spread between repeats of {used} recorded run(s)",
    )


def power_statement(
    name: str,
    steps: int,
    margin: float | None,
    spreads: Spreads,
    *,
    alpha: float,
    family: int,
    repeats: int,
    drift_only: bool = False,
) -> dict | None:
    """What the guard can see on `name` over `steps` paired steps: the planted difference, its power with `repeats`
    runs a side, and the repeats a side it needs (None past MAX_REPEATS); None for a signal without a plant or a
    margin. `family`: the judged signals, as the report counts them (times the quantities tested)."""
    spec = LEARNING_SIGNALS[name]
    effects = planted_effects(name, steps, drift_only=drift_only)
    if spec.planted is None or margin is None or not effects:
        return None
    bound, k = bound_of(name, margin), max(1, family) * len(effects)
    return {
        "planted": spec.planted.words,
        "repeats": repeats,
        "power": best_power(effects, bound, spreads, repeats, alpha=alpha, family=k),
        "repeats_needed": repeats_needed(effects, bound, spreads, alpha=alpha, family=k),
        "spread_source": spreads.source,
    }
