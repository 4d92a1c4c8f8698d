"""Measure a node's ceilings (calibration/command.py): the entry point for bare GPU images that lack the harness's
other dependencies (it needs torch, transformers, typer and PyYAML, not pydantic).

Examples:
    python scripts/benchmark/calibrate.py --output-dir scripts/benchmark/calibration/results
    python scripts/benchmark/calibrate.py --tiny --output-dir /tmp/calibration   # CPU path, what CI runs
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[2]
if str(_REPO_ROOT) not in sys.path:  # run as a script from anywhere: make `scripts.` and `miles.` importable
    sys.path.insert(0, str(_REPO_ROOT))
# This checkout's `scripts` is a namespace package, which loses to any regular `scripts` package on sys.path (VERL's
# wheel installs one): bind the name to this checkout's folder before anything imports it.
if str(_REPO_ROOT / "scripts") not in getattr(sys.modules.get("scripts"), "__path__", []):
    sys.modules["scripts"] = types.ModuleType("scripts")
    sys.modules["scripts"].__path__ = [str(_REPO_ROOT / "scripts")]

import typer  # noqa: E402

from scripts.benchmark.calibration.command import main  # noqa: E402

if __name__ == "__main__":
    typer.run(main)
