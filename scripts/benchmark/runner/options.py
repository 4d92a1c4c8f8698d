"""How a plan is executed on this machine: the execute options (stored in the manifest, reused by --resume),
and the decisions that follow from them alone (a private Ray head per cell, the interpreter of harness steps)."""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from scripts.benchmark.frameworks.launch import uses_ray_job_submit
from scripts.benchmark.runner.cell_command import FrameworkRuntime
from scripts.benchmark.runner.watchdog import WatchdogLimits

RayMode = Literal["auto", "private", "external", "none"]


class RunError(ValueError):
    """Bad input found before anything was started (exit 2)."""

    exit_code = 2


class CannotExecute(RunError):
    """This machine lacks what the plan needs (GPUs, frameworks, data): found by the preflight (exit 4)."""

    exit_code = 4


@dataclass(kw_only=True)
class ExecuteOptions:
    repeats: int = 1
    fail_fast: bool = False
    skip_prepare: bool = False
    pythons: dict[str, str] = field(default_factory=dict)
    """Side or framework name -> the interpreter of its cells (--side-python NAME=PATH)."""
    prefixes: dict[str, str] = field(default_factory=dict)
    """Side or framework name -> the launch prefix of its cells (--side-prefix NAME=CMD, e.g. `docker exec -i c`)."""
    cell_timeout_s: float = WatchdogLimits.cell_timeout_s
    first_step_timeout_s: float = WatchdogLimits.first_step_timeout_s
    stall_timeout_s: float = WatchdogLimits.stall_timeout_s
    grace_s: float = 30.0
    ray: RayMode = "auto"
    ray_address: str | None = None
    ray_dashboard_url: str | None = None
    gpu_release_timeout_s: float = 120.0
    prepare_timeout_s: float = 4 * 3600.0
    poll_interval_s: float = 0.2
    preflight: bool = True
    """False when the run was started with --no-preflight: --resume remembers it (it checks the machine only when
    the run it resumes did)."""
    budget_s: float | None = None
    """--budget-minutes in seconds, counted from the start of the execution: no launch starts that would end past
    it, and a running one is stopped at it (runner/rounds.py)."""

    def runtime(self, cell: Mapping[str, Any]) -> FrameworkRuntime:
        """A cell's interpreter and prefix: those given for its side, else for its framework (every side of it)."""
        python, prefix = (table.get(given_name(table, cell) or "") for table in (self.pythons, self.prefixes))
        return FrameworkRuntime.from_options(python, prefix)

    def limits(self) -> WatchdogLimits:
        return WatchdogLimits(
            cell_timeout_s=self.cell_timeout_s,
            first_step_timeout_s=self.first_step_timeout_s,
            stall_timeout_s=self.stall_timeout_s,
        )


def given_name(table: Mapping[str, str], cell: Mapping[str, Any]) -> str | None:
    """The name under which `table` (pythons or prefixes) holds the cell's value: its side's, else its framework's."""
    side = cell.get("side") or cell["framework"]
    return next((name for name in (side, cell["framework"]) if name in table), None)


def needs_private_head(cell: Mapping[str, Any], options: ExecuteOptions) -> bool:
    """--ray private: every cell; --ray auto without RAY_ADDRESS: cells that submit a Ray job."""
    if options.ray == "private":
        return True
    return options.ray == "auto" and not options.ray_address and uses_ray_job_submit(cell["launch_argv"])


def harness_argv(argv: list[str]) -> list[str]:
    """A preparation step is harness work (download, data conversion): a bare python runs as this interpreter."""
    return [sys.executable if word in ("python", "python3") else word for word in argv]


_PER_FRAMEWORK = re.compile(r"(?P<framework>[a-z][a-z0-9_]*)_(?P<kind>python|prefix)")
"""`<name>_python` / `<name>_prefix`: how manifests written before `pythons`/`prefixes` existed stored them (by
framework, which the lookup by side falls back to)."""


def options_from_manifest(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The options a run was started with (what --resume reuses unless overridden on the command line)."""
    known = set(ExecuteOptions.__dataclass_fields__)
    options = {k: v for k, v in stored.items() if k in known and v != "<redacted>"}
    for key, value in stored.items():
        match = _PER_FRAMEWORK.fullmatch(key)
        if match and value is not None and value != "<redacted>":
            kind = "pythons" if match["kind"] == "python" else "prefixes"
            options[kind] = {**options.get(kind, {}), match["framework"]: value}
    if isinstance(options.get("prefixes"), dict):
        options["prefixes"] = {k: v for k, v in options["prefixes"].items() if v != "<redacted>"}
    return options
