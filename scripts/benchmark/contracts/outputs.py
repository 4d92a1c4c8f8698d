"""Where a command may write: never over its own inputs, nor over a run folder's (or a plan folder's) own files.

A run folder is what the runner and the report keep of a run: overwritten, its manifest, plan, parity proof, report
or a cell's metrics are lost, and with them the run. Every command that writes a file checks it first.

- `refuse_overwrite(output, option, inputs=(), instead=None)`: UserError naming the option, the file and the fix
  when `output` is (or lies inside) one of `inputs`, or is a file a run or plan folder owns: plan.json,
  manifest.json, parity.json/.md, report.json/.md/.html, headline.md, run.lock, anything under cells/, prepare/,
  plots/ or recording/ of a folder holding a manifest.json or a plan.json. A command's own derived files there
  (check.md, ab.md, ci-record.jsonl) may be written again.

Caveats:
- Paths are compared resolved (symbolic links followed) and by identity when both exist (a hard link too).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from scripts.benchmark.contracts.manifest import MANIFEST_NAME
from scripts.benchmark.errors import UserError

PLAN_NAME = "plan.json"
OWN_FILES = frozenset(
    {PLAN_NAME, MANIFEST_NAME, "parity.json", "parity.md", "report.json", "report.md", "report.html", "headline.md"}
    | {"run.lock", ".space-reserve"}
)
OWN_FOLDERS = frozenset({"cells", "prepare", "plots", "recording"})


def output_among_inputs(output: Path, inputs: Iterable[Path]) -> Path | None:
    """The input that `output` is (or lies inside, for a folder of inputs), else None."""
    target = output.expanduser().resolve()
    for source in inputs:
        where = source.expanduser().resolve()
        if target == where or where in target.parents:
            return source
        if target.exists() and where.exists() and target.samefile(where):
            return source
    return None


def owning_folder(output: Path) -> tuple[Path, str] | None:
    """(the run or plan folder, the path inside it) when `output` is one of that folder's own files, else None."""
    target = output.expanduser().resolve()
    for folder in target.parents:
        if (folder / MANIFEST_NAME).is_file() or (folder / PLAN_NAME).is_file():
            inside = target.relative_to(folder).parts
            owned = inside[0] in OWN_FOLDERS if len(inside) > 1 else inside[0] in OWN_FILES
            return (folder, "/".join(inside)) if owned else None
    return None


def refuse_overwrite(output: Path, option: str, inputs: Iterable[Path] = (), instead: str | None = None) -> None:
    """UserError when writing `output` would overwrite an input or a run folder's own file (module docstring)."""
    fix = f"write it elsewhere{f' (e.g. {instead})' if instead else ''}"
    clash = output_among_inputs(output, inputs)
    if clash is not None:
        raise UserError(f"{option} {output} would write over the input {clash}: {fix}")
    owned = owning_folder(output)
    if owned is not None:
        folder, name = owned
        raise UserError(f"{option} {output} would write over {name}, a file of the run folder {folder}: {fix}")
