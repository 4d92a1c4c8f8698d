"""Canonical values of the parity table that both framework parsers produce (one spelling per meaning).

Each framework's `parity_knobs` module reads its own launch back into these values, so a row compares like with
like: on/off switches, recompute settings, KL estimator names, offload states.
"""

from __future__ import annotations

NEUTRAL_DUAL_CLIP_MIN = 1.0e8
"""A dual-clip bound so large that it never clips: how 'dual clip off' reads on a side that always applies one."""
MIB = 1024 * 1024


def on_off(flag: bool) -> str:
    return "on" if flag else "off"


def recompute(granularity, method, layers) -> str:
    return "none" if granularity in (None, "None") else f"{granularity}/{method}/{layers}"


def kl_type(value: str | None) -> str | None:
    return {"kl": "k1", "mse": "k2"}.get(value, value)


def offload_state(param: bool, optimizer: bool) -> str:
    if param and optimizer:
        return "params+optimizer during rollout"
    return "params only during rollout" if param else ("optimizer only during rollout" if optimizer else "resident")
