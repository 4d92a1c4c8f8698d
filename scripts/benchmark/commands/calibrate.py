"""`run.py calibrate`: measure this node's ceilings (bf16 peak, copy rate, training roofline, FLOPs check,
interconnect). The same command as `scripts/benchmark/calibrate.py`, which stays as the entry point for bare GPU
images that lack the harness's other dependencies."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    from scripts.benchmark.calibration.command import main

    app.command("calibrate", help="Measure this node's ceilings and write <output-dir>/<device key>.json.")(main)
