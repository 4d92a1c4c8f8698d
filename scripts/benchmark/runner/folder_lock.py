"""One owner per run folder: an exclusive advisory lock on DIR/run.lock, held by the harness for the whole run.

- `hold_run_lock(run_dir)` (a context manager) takes the lock without waiting, writes the holder into the file
  (pid, host, start time of the process, when it started) and yields a `RunLock`; on exit the file is removed and
  the lock released, so a finished run folder holds no lock file. Only its holder ever deletes the file, while
  holding it; a harness that locked the deleted file meanwhile sees that and locks the new one, so two harnesses
  never hold two different files of one name.
- A second harness on the same folder (a second `execute`, or `--resume` while the run is alive) gets `RunError`
  (exit 2) naming the live holder's pid and host.
- A lock left by a harness that died is free at the file-system level (the kernel drops the lock with its holder):
  it is taken over, and `RunLock.taken_over` describes the dead holder, for the manifest's warnings. As a second
  check, a holder recorded on this host whose pid still runs with the recorded start time is never taken over.

Caveats:
- Advisory: a process that does not take the lock (anything but this harness) is not kept out.
- Across hosts the lock is only as good as the file system's flock (local disks and NFSv4 honour it; some network
  file systems do not).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from scripts.benchmark.contracts.manifest import HarnessRecord, utc_now
from scripts.benchmark.runner.options import RunError
from scripts.benchmark.runner.process import boot_id, is_alive, read_proc_info

LOCK_NAME = "run.lock"


@dataclass
class RunLock:
    path: Path
    fd: int
    holder: HarnessRecord
    taken_over: HarnessRecord | None = None
    """The dead harness whose stale lock this one replaced, if any."""


def this_harness() -> HarnessRecord:
    info = read_proc_info(os.getpid())
    return HarnessRecord(
        pid=os.getpid(),
        host=socket.gethostname(),
        start_time=info.start_time if info else None,
        started_at=utc_now(),
        boot_id=boot_id(),
    )


def _read_holder(fd: int) -> HarnessRecord | None:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 65536).decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        return HarnessRecord.model_validate(json.loads(text))
    except ValueError:
        return None


def _still_running_here(holder: HarnessRecord) -> bool:
    """The recorded holder runs on this host (same boot) with its recorded start time: a live run."""
    if holder.host != socket.gethostname() or holder.start_time is None or holder.boot_id != boot_id():
        return False
    return holder.pid != os.getpid() and is_alive(holder.pid, holder.start_time)


def refuse_a_live_previous_harness(run_dir: Path, previous: HarnessRecord | None) -> None:
    """Before a resume stops what a run left: the harness its manifest names must be gone, whatever the lock file
    says (a lock file removed by hand lets a second harness lock a new one while the first still runs)."""
    if previous is not None and _still_running_here(previous):
        raise _refusal(run_dir, previous)


def _refusal(run_dir: Path, holder: HarnessRecord | None) -> RunError:
    if holder is None:
        return RunError(f"{run_dir} is in use by another harness (its lock {run_dir / LOCK_NAME} is held)")
    return RunError(
        f"{run_dir} is in use by a live run: harness pid {holder.pid} on host {holder.host}, "
        f"started {holder.started_at}; wait for it to end, or stop it (kill -INT {holder.pid} on {holder.host})"
    )


def _is_the_file_at(fd: int, path: Path) -> bool:
    """The locked file is still the one at PATH: its holder may have removed it while we waited for it."""
    try:
        here, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def _lock_the_file(run_dir: Path) -> int:
    """An fd holding the flock of the file now at DIR/run.lock; RunError naming the holder when it is held."""
    path = run_dir / LOCK_NAME
    for _ in range(10):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise RunError(f"cannot create {path}: {exc.strerror or exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            raise _refusal(run_dir, holder) from None
        if _is_the_file_at(fd, path):
            return fd
        os.close(fd)  # locked a file its holder had just removed: lock the one there now
    raise RunError(f"{path} keeps being replaced by another harness; is another harness starting on {run_dir}?")


def acquire_run_lock(run_dir: Path) -> RunLock:
    """Take DIR/run.lock or raise RunError naming the live holder (see the module docstring)."""
    path = run_dir / LOCK_NAME
    fd = _lock_the_file(run_dir)
    previous = _read_holder(fd)
    if previous is not None and _still_running_here(previous):
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        raise _refusal(run_dir, previous)
    holder = this_harness()
    try:
        _write_holder(fd, holder)
    except OSError as exc:
        os.close(fd)
        raise RunError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return RunLock(path=path, fd=fd, holder=holder, taken_over=previous)


def _write_holder(fd: int, holder: HarnessRecord | None) -> None:
    os.ftruncate(fd, 0)
    if holder is not None:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, (holder.model_dump_json() + "\n").encode())
        os.fsync(fd)


def release_run_lock(lock: RunLock) -> None:
    """Remove the file and release the lock: removed while still held (a harness that locks it meanwhile sees it
    gone and locks the new one), so only the holder ever removes it and no empty lock file stays behind."""
    try:
        _write_holder(lock.fd, None)
        if _is_the_file_at(lock.fd, lock.path):
            lock.path.unlink()
    except OSError:
        pass  # an unwritable folder: the kernel lock below is what counts
    fcntl.flock(lock.fd, fcntl.LOCK_UN)
    os.close(lock.fd)


@contextmanager
def hold_run_lock(run_dir: Path) -> Iterator[RunLock]:
    lock = acquire_run_lock(run_dir)
    try:
        yield lock
    finally:
        release_run_lock(lock)
