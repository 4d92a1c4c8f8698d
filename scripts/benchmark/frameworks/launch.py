"""What a framework builder hands to the plan: one cell's launch, plus how a launch is rendered as text.

- `FrameworkLaunch`: framework, backend, layout, `argv` (the framework command), `launch_argv` (what the harness
  executes), `env` (no secrets), `sink` ({"format", "path"}), optional `ray_head_argv` (the private Ray head a
  Ray job submission needs), `blocks` (the named argv blocks, for review), `side` (the side it belongs to: the
  prefix of its cell id; the framework's name when empty).
- `uses_ray_job_submit(argv)`: the launch submits a Ray job.
- `render_argv(argv)`: one flag per line (a flag and its value share a line), shell-quoted, for goldens and scripts.
- `RecordingPass`: a train-only plan's recorded rollout as a launch sees it: `record` (generate as usual and dump every
  step's rollout with the framework's own switch) or `replay` (train on the recording, no generation), and `root`,
  the recording's folder on the GPU node (each framework keeps its own format in its own subfolder).
- `BENCH_CELL_DIR`: the literal placeholder the runner replaces by the absolute folder of one cell repeat.
- `ray_shell_problem(path)` / `ray_entrypoint_guard()`: a Ray job submission (`-- CMD...`) joins CMD into one /bin/sh line
  (subprocess.list2cmdline, which quotes spaces only), so a path with a shell character cannot pass through it
  intact; such a run folder is refused (by the runner before anything starts, by the cell script before the submit).

Caveats:
- argv stays a list[str] until `render_argv`; nothing here runs a shell.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

BENCH_CELL_DIR = "${BENCH_CELL_DIR}"
RAY_SHELL_SAFE = "A-Za-z0-9 _.,:=@%+/-"
"""The characters a path may hold to reach a Ray job's entrypoint unchanged."""


@dataclass(frozen=True)
class RecordingPass:
    role: Literal["record", "replay"]
    root: str


@dataclass(frozen=True)
class FrameworkLaunch:
    framework: str
    backend: str
    layout: str
    argv: list[str]
    launch_argv: list[str]
    env: dict[str, str]
    sink: dict[str, str]
    ray_head_argv: list[str] | None = None
    blocks: dict[str, list[str]] = field(default_factory=dict)
    side: str = ""

    @property
    def cell_id(self) -> str:
        return f"{self.side or self.framework}-{self.backend}-{self.layout}"


def quote(token: str) -> str:
    """Shell-quote, but keep ${BENCH_CELL_DIR} expandable (double quotes) so the cell script can define it."""
    if BENCH_CELL_DIR in token:
        escaped = token.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`")
        escaped = escaped.replace("$", "\\$").replace("\\${BENCH_CELL_DIR}", "${BENCH_CELL_DIR}")
        return f'"{escaped}"'
    return shlex.quote(token)


def render_argv(argv: list[str], indent: str = "  ") -> list[str]:
    """Lines of a command: the program words first, then one `--flag [value ...]` (or override) per line."""
    lines: list[str] = []
    for token in argv:
        starts_line = token.startswith("--") or ("=" in token and not token.startswith("-")) or token == "--"
        if lines and not starts_line:
            lines[-1] += " " + quote(token)
        else:
            lines.append(quote(token))
    return [lines[0]] + [indent + line for line in lines[1:]] if lines else []


def uses_ray_job_submit(argv: Sequence[str]) -> bool:
    """The launch submits a Ray job (it needs a Ray head and a run folder Ray's entrypoint shell can carry)."""
    words = list(argv)
    return any(words[i : i + 2] == ["job", "submit"] for i in range(len(words) - 1))


def ray_shell_problem(path: str) -> str | None:
    """Why `path` cannot pass through Ray's job entrypoint shell line, or None."""
    bad = sorted(set(re.sub(f"[{RAY_SHELL_SAFE}]", "", path)))
    if not bad:
        return None
    return (
        f"{path!r} holds {''.join(bad)!r}: a Ray job submission runs the job's command as a /bin/sh line, where these "
        f"characters would be interpreted; use a folder of [{RAY_SHELL_SAFE}] only"
    )


def ray_entrypoint_guard() -> list[str]:
    """Bash lines that stop a cell script (exit 2) when its cell folder could not pass through a Ray job submission."""
    pattern = RAY_SHELL_SAFE.replace(" ", "\\ ")
    message = (
        "error: BENCH_CELL_DIR=${BENCH_CELL_DIR} holds characters that a Ray job submission would pass to /bin/sh; "
        f"use a folder of [{RAY_SHELL_SAFE}] only"
    )
    return [f'case "${{BENCH_CELL_DIR}}" in *[!{pattern}]*) echo {quote(message)} >&2; exit 2 ;; esac']
