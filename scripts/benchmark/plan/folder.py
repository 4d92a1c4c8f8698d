"""Where a plan is written: never over another plan or a run, and all at once (no stale script, no empty folder).

- `check_plan_folder(out, spec_hash, force=...)`: refuses (UserError, exit 2) a file, a folder holding a run
  (manifest.json) or a plan of another spec, and a non-empty folder that is not a plan folder. `--force` moves a run
  or another plan aside (`<out>.replaced-<time>`); nothing is ever deleted but the previous scripts of the same plan.
- `write_plan_atomically(out, write)`: `write(tmp)` fills a fresh sibling folder; then the plan files replace the
  old ones (cells/ as a whole, so a cell that left the plan leaves no script behind). On any error the sibling is
  removed and `out` is as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from scripts.benchmark.errors import UserError

PLAN_FILES = ("plan.json", "parity.json", "parity.md")
SYSTEM_TREES = (Path("/proc"), Path("/sys"))


def _stored_spec_hash(out: Path) -> str | None:
    try:
        return json.loads((out / "plan.json").read_text()).get("spec_hash")
    except (OSError, ValueError, AttributeError):
        return None


def _move_aside(out: Path) -> Path:
    aside = out.with_name(f"{out.name}.replaced-{time.strftime('%Y%m%dT%H%M%S')}")
    out.rename(aside)
    return aside


def check_plan_folder(out: Path, spec_hash: str, *, force: bool) -> Path | None:
    """Refuse a folder the plan must not overwrite; with force, move it aside and return where it went."""
    if any(out == tree or tree in out.parents for tree in SYSTEM_TREES):
        raise UserError(f"--output-dir {out}: a system folder, not a place for a plan")
    if out.exists() and not out.is_dir():
        raise UserError(f"--output-dir {out} is a file, not a folder")
    if not out.is_dir() or not any(out.iterdir()):
        return None
    holds_run = (out / "manifest.json").exists()
    if not holds_run and not (out / "plan.json").exists():
        raise UserError(f"--output-dir {out} is not empty and holds no plan: choose a new or empty folder")
    if not holds_run and _stored_spec_hash(out) == spec_hash:
        return None  # the same plan again: its files are replaced
    what = "a run (manifest.json)" if holds_run else f"the plan of another spec ({_stored_spec_hash(out)})"
    if not force:
        hint = f"; resume it with `run.py execute --resume {out}`" if holds_run else ""
        raise UserError(f"--output-dir {out} already holds {what}{hint}; pass --force to move it aside")
    return _move_aside(out)


def _replace_plan_files(tmp: Path, out: Path) -> None:
    old_cells = out / "cells"
    if old_cells.is_dir():
        if any(not p.is_file() or p.suffix != ".sh" for p in old_cells.iterdir()):
            raise UserError(f"--output-dir {out}: cells/ holds more than cell scripts; pass --force")
        graveyard = out / f".cells-old-{os.getpid()}"
        old_cells.rename(graveyard)
        shutil.rmtree(graveyard)
    (tmp / "cells").rename(old_cells)
    for name in PLAN_FILES:
        (tmp / name).replace(out / name)


def write_plan_atomically(out: Path, write: Callable[[Path], list[Path]]) -> list[Path]:
    """Run `write` into a sibling temp folder, then move its files into `out`; returns the final paths."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.planning-", dir=out.parent))
    except OSError as exc:
        raise UserError(f"--output-dir {out}: cannot create it ({exc.strerror or exc})") from exc
    try:
        written = write(tmp)
        if not out.exists():
            tmp.rename(out)
        else:
            _replace_plan_files(tmp, out)
    except OSError as exc:
        raise UserError(f"--output-dir {out}: cannot write the plan ({exc.strerror or exc})") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [out / path.relative_to(tmp) for path in written]
