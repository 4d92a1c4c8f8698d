"""The files that describe one cell repeat beside its metrics: command.sh and env.json (what was executed),
environment.json (what it ran on) and a copy of a sink the plan pointed outside the cell folder. All redacted."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

from scripts.benchmark.common.redaction import Redactor
from scripts.benchmark.contracts.manifest import write_json_atomic
from scripts.benchmark.runner import environment_record
from scripts.benchmark.runner.cell_command import (
    CellCommand,
    FrameworkRuntime,
    framework_interpreter_argv,
    substitute_cell_dir,
)

from miles.utils.bench_metrics import write_text_atomic


def write_command_record(cell_dir: Path, command: CellCommand, redactor: Redactor) -> None:
    """command.sh (runnable: cd to the cell folder, the plan's env, exec the argv) and env.json, redacted."""
    redacted_env = redactor.redact_env(command.plan_env)
    exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in redacted_env.items())
    script = (
        "#!/usr/bin/env bash\n"
        "# The exact command the benchmark runner executed for this cell repeat (secrets redacted).\n"
        "set -euo pipefail\n"
        f"cd {shlex.quote(str(cell_dir))}\n"
        f"{exports}\n"
        f"exec {shlex.join(redactor.redact_argv(command.argv))}\n"
    )
    write_text_atomic(cell_dir / "command.sh", script)
    (cell_dir / "command.sh").chmod(0o755)
    inherited = {k: v for k, v in command.process_env.items() if k not in command.plan_env}
    write_json_atomic(
        cell_dir / "env.json",
        {"plan_and_runner": redacted_env, "inherited": redactor.redact_env(inherited)},
    )


def write_environment(
    cell: dict[str, Any],
    cell_dir: Path,
    runtime: FrameworkRuntime,
    command: CellCommand,
    redactor: Redactor,
    packages_cache: dict[tuple, dict[str, Any]],
) -> None:
    """environment.json; the package probe runs once per (framework, interpreter, PYTHONPATH) of the run."""
    interpreter = framework_interpreter_argv(cell["launch_argv"], runtime)
    key = (cell["framework"], tuple(interpreter), command.plan_env.get("PYTHONPATH"))
    if key not in packages_cache:
        packages_cache[key] = environment_record.probe_packages(interpreter, env=command.process_env)
    record = environment_record.build_environment_record(
        framework=cell["framework"], interpreter_argv=interpreter, packages=packages_cache[key]
    )
    write_json_atomic(cell_dir / "environment.json", redactor.redact_json(record))


def copy_outside_sink(cell: dict[str, Any], cell_dir: Path) -> None:
    """Keep the raw sink in the cell folder even when the plan pointed it elsewhere."""
    sink = Path(substitute_cell_dir(cell["sink"]["path"], cell_dir))
    if not sink.exists() or cell_dir.resolve() in sink.resolve().parents:
        return
    destination = cell_dir / "sink" / sink.name
    if sink.is_dir():
        shutil.copytree(sink, destination, dirs_exist_ok=True)
    else:
        shutil.copy2(sink, destination)
