"""Miles: its launch, flags, targets, parity knobs, sinks and own parser; `ADAPTER` is what the registry holds."""

from scripts.benchmark.frameworks.miles.adapter import ADAPTER

__all__ = ["ADAPTER"]
