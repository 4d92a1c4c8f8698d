"""The recording a train-only run replays, checked against its kept digest every time a cell is about to use it.

A prepare step is skipped when its output exists, so a recording damaged after it was made (a file truncated or
deleted, a conversion edited) would be replayed as it is. Before each replay cell, the folder that cell reads (the
recorder's dump or the conversion for its framework and backend) is read whole and its digest compared with the
digest file beside the recording; a folder already proven in this run is read again only when one of its files
changed (names, sizes, modification times).

- `RecordingCheck(plan)`: `check(cell)` returns the digest the cell replays, or raises `RecordingDamaged` naming the
  folder or file and the fix; `digest()` is the kept digest (for the manifest and the report).

Caveats:
- Reading a recording needs the `recording` extra (torch), as its prepare steps do.
- The check depends on the plan's `recording` section (its root and digest file), never on how its key is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.benchmark.errors import MissingExtra, UserError
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.recording import recording_digest
from scripts.benchmark.spec import BenchmarkSpec


class RecordingDamaged(Exception):
    """A replay cell's recording is missing, unreadable or not the recording its digest names."""


def _signature(folder: Path) -> tuple:
    """Every file under `folder` by name, size and modification time: what a change to the recording changes."""
    files = sorted(path for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else []
    return tuple((str(path.relative_to(folder)), path.stat().st_size, path.stat().st_mtime_ns) for path in files)


class RecordingCheck:
    def __init__(self, plan: dict[str, Any]):
        self.section = plan["recording"]
        self.spec = BenchmarkSpec.model_validate(plan["spec"])
        self.digest_file = Path(self.section["digest_file"])
        self._proven: dict[Path, tuple] = {}

    def digest(self) -> str:
        """The recording's kept digest; RecordingDamaged when its file is missing or empty."""
        fix = f"delete {self.section['root']} so that the next run records and digests it again"
        try:
            kept = self.digest_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise RecordingDamaged(f"recording digest {self.digest_file} cannot be read ({exc}); {fix}") from None
        if not kept:
            raise RecordingDamaged(f"recording digest {self.digest_file} is empty (damaged); {fix}")
        return kept

    def check(self, cell: dict[str, Any]) -> str:
        """The digest of the recording `cell` replays, proven against the kept one (see the module docstring)."""
        framework = cell["framework"]
        folder = registry.get(framework).recording_path(
            self.spec, cell["backend"], cell["layout"], self.section["root"]
        )
        kept = self.digest()
        folder = Path(folder)
        signature = _signature(folder)
        if self._proven.get(folder) == signature and signature:
            return kept
        if str(folder) == self.section["source"]:
            redo = f"delete {self.section['root']} so that the next run records it again"
        else:
            redo = f"delete {folder} so that the next run converts the recording again"
        try:
            found = recording_digest(folder, framework)
        except MissingExtra as exc:
            raise RecordingDamaged(f"the recording {cell['id']} replays cannot be checked: {exc}") from None
        except UserError as exc:
            raise RecordingDamaged(f"the recording {cell['id']} replays is damaged: {exc}; {redo}") from None
        if found != kept:
            raise RecordingDamaged(
                f"the recording at {folder} has digest {found}, not the {kept} kept in {self.digest_file}: it changed "
                f"after it was made; {redo}"
            )
        self._proven[folder] = signature
        return kept
