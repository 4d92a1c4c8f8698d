"""VERL: its data conversion, launch, parity knobs, sink and own checks; `ADAPTER` is what the registry holds."""

from scripts.benchmark.frameworks.verl.adapter import ADAPTER

__all__ = ["ADAPTER"]
