"""Write errors in the run folder (a full disk, a quota, a read-only remount): end the run cleanly, never half-way.

- `RunFolderWriteError(path, error)`: what the runner's writers raise when the run folder refuses a write; the
  runner ends the running cell `failed` with `str(error)` as reason, stops the matrix and exits 1 (resumable).
- `write_error_in(exc)`: the RunFolderWriteError, or an OSError of a write errno (ENOSPC, EDQUOT, EFBIG, EROFS,
  EIO), found in an exception or its causes; None for anything else.
- `SpaceReserve(run_dir)`: a small file written when the run starts and deleted on the first write error, so that the
  final manifest (the cell's failure and its reason) still fits on a full disk. Deleted at the end of the run.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})
RESERVE_NAME = ".space-reserve"
RESERVE_BYTES = 256 * 1024


class RunFolderWriteError(Exception):
    def __init__(self, path: Path | str, error: OSError):
        self.path = Path(path)
        self.error = error
        super().__init__(f"cannot write {self.path}: {error.strerror or error}")


def write_error_in(exc: BaseException | None) -> BaseException | None:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RunFolderWriteError):
            return exc
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def describe_write_error(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename:
        return f"cannot write {exc.filename}: {exc.strerror or exc}"
    return str(exc)


@dataclass
class SpaceReserve:
    run_dir: Path

    @property
    def path(self) -> Path:
        return self.run_dir / RESERVE_NAME

    def claim(self) -> bool:
        """Write the reserve (False, and nothing left behind, when even that does not fit)."""
        try:
            with open(self.path, "wb") as handle:
                handle.write(b"\0" * RESERVE_BYTES)
                handle.flush()
                os.fsync(handle.fileno())
            return True
        except OSError:
            self.release()
            return False

    def release(self) -> None:
        try:
            self.path.unlink()
        except OSError:
            pass
