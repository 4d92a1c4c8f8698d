"""What the runner executes for one cell repeat: the plan's launch_argv made concrete for this machine.

- `${BENCH_CELL_DIR}` in argv, env values and the sink path becomes the absolute folder of the cell repeat.
- `FrameworkRuntime` (from --side-python / --side-prefix NAME=..., by the cell's side or framework): every bare
  `python` or `python3` word of launch_argv becomes the side's interpreter, and a leading bare `ray` becomes the
  `ray` next to that interpreter when one exists; a prefix (e.g. `docker exec -i miles`) is put in front, and the
  plan's env then travels as `env K=V ...` after the prefix (a container does not inherit the harness's
  environment).
- Ray: the cell's RAY_ADDRESS is the cluster's GCS address for `ray.init` users (VERL) and the dashboard URL for
  a Ray job submission (Miles); an `--address` already in a job submission's argv is replaced by the cluster's, and a
  `--submission-id` is added so the harness can `ray job stop` exactly its job.

Caveats:
- Only bare interpreter words are replaced: a plan that names `/usr/bin/python3.11` keeps it (edit the plan instead).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.benchmark.frameworks.launch import uses_ray_job_submit
from scripts.benchmark.runner.ray_head import RayTarget

CELL_DIR_PLACEHOLDER = "${BENCH_CELL_DIR}"
_BARE_PYTHONS = frozenset({"python", "python3"})


@dataclass(frozen=True)
class FrameworkRuntime:
    python: str | None = None
    prefix: tuple[str, ...] = ()

    @classmethod
    def from_options(cls, python: str | None, prefix: str | None) -> FrameworkRuntime:
        return cls(python=python, prefix=tuple(shlex.split(prefix)) if prefix else ())

    def interpreter_argv(self) -> list[str]:
        return [*self.prefix, self.python or "python3"]

    def ray_argv(self) -> list[str]:
        """The `ray` CLI of this framework's environment (Ray versions of head and clients must match)."""
        return [*self.prefix, self._ray_word()]

    def _ray_word(self) -> str:
        if self.python:
            sibling = Path(self.python).parent / "ray"
            if "/" in self.python and sibling.exists():
                return str(sibling)
        return "ray"


def framework_interpreter_argv(launch_argv: Sequence[str], runtime: FrameworkRuntime) -> list[str]:
    """The interpreter that runs the framework: --side-python's, else the first python word of launch_argv."""
    if runtime.python:
        return runtime.interpreter_argv()
    found = next((w for w in launch_argv if re.fullmatch(r"python[0-9.]*", Path(w).name)), "python3")
    return [*runtime.prefix, found]


def substitute_cell_dir(value: str, cell_dir: Path) -> str:
    return value.replace(CELL_DIR_PLACEHOLDER, str(cell_dir))


def _rewrite_ray_job_submit(argv: list[str], target: RayTarget, submission_id: str) -> list[str]:
    """Point the Ray job submission at the cluster and give it a known submission id (only the part before `--`)."""
    split = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:split], argv[split:]
    out: list[str] = []
    skip = False
    for word in head:
        if skip:
            skip = False
            continue
        if word == "--address":
            skip = True
            continue
        if word.startswith("--address="):
            continue
        out.append(word)
    submit_at = next(i for i in range(len(out) - 1) if out[i : i + 2] == ["job", "submit"]) + 2
    extra = [f"--address={target.dashboard_url}"]
    if not any(w == "--submission-id" or w.startswith("--submission-id=") for w in out):
        extra.append(f"--submission-id={submission_id}")
    return out[:submit_at] + extra + out[submit_at:] + tail


def submission_id_of(argv: Sequence[str]) -> str | None:
    words = list(argv)
    for index, word in enumerate(words):
        if word.startswith("--submission-id="):
            return word.split("=", 1)[1]
        if word == "--submission-id" and index + 1 < len(words):
            return words[index + 1]
    return None


@dataclass(frozen=True)
class CellCommand:
    argv: list[str]
    """What is executed (prefix included)."""
    plan_env: dict[str, str]
    """The plan's env with placeholders resolved, plus what the runner adds (BENCH_CELL_DIR, RAY_ADDRESS)."""
    process_env: dict[str, str] = field(repr=False, default_factory=dict)
    """The full environment of the launched process (the harness's environment + plan_env unless prefixed)."""
    submission_id: str | None = None


def build_cell_command(
    cell: Mapping[str, Any],
    *,
    cell_dir: Path,
    runtime: FrameworkRuntime,
    ray: RayTarget | None,
    submission_id: str,
    base_env: Mapping[str, str],
) -> CellCommand:
    argv = [substitute_cell_dir(str(w), cell_dir) for w in cell["launch_argv"]]
    if runtime.python:
        argv = [runtime.python if w in _BARE_PYTHONS else w for w in argv]
        if argv and argv[0] == "ray":
            argv[0] = runtime.ray_argv()[-1]
    plan_env = {str(k): substitute_cell_dir(str(v), cell_dir) for k, v in (cell.get("env") or {}).items()}
    plan_env["BENCH_CELL_DIR"] = str(cell_dir)
    plan_env.setdefault("PYTHONUNBUFFERED", "1")
    job_id = None
    if ray is not None:
        if uses_ray_job_submit(argv):
            argv = _rewrite_ray_job_submit(argv, ray, submission_id)
            job_id = submission_id_of(argv)
            plan_env["RAY_ADDRESS"] = ray.dashboard_url
        else:
            plan_env["RAY_ADDRESS"] = ray.gcs_address
    if runtime.prefix:
        argv = [*runtime.prefix, "env", *(f"{k}={v}" for k, v in plan_env.items()), *argv]
        process_env = dict(base_env)
    else:
        process_env = {**base_env, **plan_env}
    return CellCommand(argv=argv, plan_env=plan_env, process_env=process_env, submission_id=job_id)


def find_executable_problem(argv: Sequence[str]) -> str | None:
    """Why argv[0] cannot be started here, or None (checked before any cell runs)."""
    if not argv:
        return "launch_argv is empty"
    first = argv[0]
    if "/" in first:
        path = Path(first)
        if not path.exists():
            return f"{first} does not exist"
        if not path.is_file() or not os.access(path, os.X_OK):
            return f"{first} is not an executable file"
        return None
    if shutil.which(first) is None:
        return f"{first!r} is not on PATH"
    return None
