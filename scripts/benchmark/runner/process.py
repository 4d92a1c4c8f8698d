"""Launch and stop exactly the processes the harness started: one session (process group) per command.

- `ManagedProcess(argv, env=..., cwd=..., log_path=..., redactor=...)`: `start()` runs argv in a new session
  (`start_new_session=True`), stdout and stderr merged, every line redacted and appended to `log_path` as it arrives.
  A write error on the log (a full disk) is kept in `log_error` and the output is still drained, so the command
  never blocks on a full pipe; the runner ends the cell with that error.
- `track()` (called from the runner's poll loop) records every process that belongs to the command: members of its
  process group or session, their descendants by parent pid, and orphans re-parented to the harness (the harness is
  a child subreaper on Linux, see `become_child_subreaper`), each identified by (pid, start time). `describe()` is
  that record for the manifest, with the command's token: a random value put into its environment as
  BENCH_PROCESS_TOKEN, which every descendant inherits (`carries_token`), so a process that escaped between two
  polls is still found by --resume, and an unrelated process never is.
- `stop(grace_s)`: `stop_until_gone`: SIGTERM to the group and every tracked process, again to any that appears,
  up to grace_s; then SIGKILL, scanning again and again until the group, the session and every tracked descendant
  are gone or `KILL_WINDOW_S` passed; whatever is left is returned as survivors (pid, start time). Never kills by
  name; a pid is only signalled through a pidfd opened before its start time is checked, so a reused pid is never hit.

Caveats:
- Exact tracking of escaped descendants (double fork + setsid) needs Linux (/proc and PR_SET_CHILD_SUBREAPER).
  Elsewhere only the process group is stopped, and a descendant that left it survives.
- A process that escapes while the harness is not running (e.g. after the harness was SIGKILLed) is out of reach;
  what the manifest recorded before is found again by --resume (runner/leftovers.py).
- Through a launch prefix such as `docker exec`, the group stopped is the local client's; stopping the process inside
  the container is up to the container runtime (documented in docs/benchmark.md).
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.benchmark.common.redaction import Redactor
from scripts.benchmark.contracts.manifest import CellProcesses, ProcessRecord

_PR_SET_CHILD_SUBREAPER = 36
PROCESS_TOKEN_VAR = "BENCH_PROCESS_TOKEN"
_PROC = Path("/proc")
# Leaders the harness launched itself: orphans re-parented to the harness are any other child.
_LAUNCHED_LEADERS: set[int] = set()


def become_child_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process instead of init, so they can be found and stopped."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class ProcInfo:
    ppid: int
    pgid: int
    sid: int
    start_time: int
    state: str


def carries_token(pid: int, token: str) -> bool:
    """The process's environment holds PROCESS_TOKEN_VAR=token (False when it cannot be read: another user's)."""
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return f"{PROCESS_TOKEN_VAR}={token}".encode() in environ.split(b"\0")


def read_proc_table() -> dict[int, ProcInfo]:
    """Every process of the host from /proc/<pid>/stat (empty where /proc does not exist)."""
    table: dict[int, ProcInfo] = {}
    if not _PROC.is_dir():
        return table
    for entry in _PROC.iterdir():
        if entry.name.isdigit() and (info := read_proc_info(int(entry.name))) is not None:
            table[int(entry.name)] = info
    return table


def read_proc_info(pid: int) -> ProcInfo | None:
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may contain spaces; fields after the last ')' are fixed.
    fields = stat[stat.rfind(")") + 2 :].split()
    return ProcInfo(
        state=fields[0], ppid=int(fields[1]), pgid=int(fields[2]), sid=int(fields[3]), start_time=int(fields[19])
    )


def is_alive(pid: int, start_time: int | None = None) -> bool:
    """True while pid runs (a zombie is dead) and, when given, still has the start time it was tracked with."""
    info = read_proc_info(pid)
    if info is None:
        if _PROC.is_dir():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return info.state != "Z" and (start_time is None or info.start_time == start_time)


def boot_id() -> str | None:
    """This boot of this host: start times from /proc compare only within one boot."""
    try:
        return (_PROC / "sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def signal_exact(pid: int, start_time: int, sig: signal.Signals) -> bool:
    """Send sig to pid only while it still has start_time; the pidfd pins the process between check and signal."""
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except (OSError, AttributeError):
        pidfd = None
    try:
        if not is_alive(pid, start_time):
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


KILL_WINDOW_S = 10.0
"""How long SIGKILL and the rescans go on before what is left is reported as survivors."""


def stop_until_gone(
    scan: Callable[[], dict[int, int]],
    *,
    grace_s: float,
    kill_window_s: float = KILL_WINDOW_S,
    on_signal: Callable[[signal.Signals], None] = lambda sig: None,
    reap: Callable[[], None] = lambda: None,
) -> tuple[bool, dict[int, int]]:
    """SIGTERM all that `scan()` finds (pid -> start time), again whenever something new appears, for up to grace_s;
    then SIGKILL and rescan until nothing is found or kill_window_s passed. Returns (SIGKILL needed, survivors)."""
    termed: set[tuple[int, int]] = set()
    deadline = time.monotonic() + grace_s
    while True:
        live = scan()
        if not live:
            return False, {}
        if any(item not in termed for item in live.items()):
            on_signal(signal.SIGTERM)
        for pid, start in live.items():
            if (pid, start) not in termed and signal_exact(pid, start, signal.SIGTERM):
                termed.add((pid, start))
        reap()
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    kill_deadline = time.monotonic() + kill_window_s
    while live:
        on_signal(signal.SIGKILL)
        for pid, start in live.items():
            signal_exact(pid, start, signal.SIGKILL)
        time.sleep(0.02)
        reap()
        live = scan()
        if time.monotonic() >= kill_deadline:
            break
    return True, live


@dataclass(frozen=True)
class StopOutcome:
    exit_code: int | None
    killed: bool
    """True when SIGKILL was needed (something ignored SIGTERM for the whole grace period)."""
    survivors: tuple[tuple[int, int], ...]
    """(pid, start time) of tracked processes still alive after the SIGKILL window (should be empty)."""


@dataclass
class ManagedProcess:
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: Path
    log_path: Path
    redactor: Redactor = field(default_factory=Redactor)
    on_line: Callable[[str], None] | None = None
    popen: subprocess.Popen | None = None
    tracked: dict[int, int] = field(default_factory=dict)
    """pid -> start time of every process seen belonging to this command."""
    log_error: OSError | None = None
    """The first error writing log_path (the output is still drained, then dropped)."""
    _reader: threading.Thread | None = None
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    """Put into the command's environment (PROCESS_TOKEN_VAR): every descendant inherits it, so one that escaped
    before any poll saw it is still found by --resume (`token_carriers`)."""

    @property
    def pid(self) -> int:
        assert self.popen is not None, "not started"
        return self.popen.pid

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.popen = subprocess.Popen(
            list(self.argv),
            env={**self.env, PROCESS_TOKEN_VAR: self.token},
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _LAUNCHED_LEADERS.add(self.popen.pid)
        info = read_proc_info(self.popen.pid)
        if info is not None:
            self.tracked[self.popen.pid] = info.start_time
        self._reader = threading.Thread(target=self._copy_output, name=f"log-{self.popen.pid}", daemon=True)
        self._reader.start()

    def _copy_output(self) -> None:
        assert self.popen is not None and self.popen.stdout is not None
        log = None
        try:
            log = open(self.log_path, "a", encoding="utf-8")  # closed after draining, or at the first write error
        except OSError as exc:
            self.log_error = exc
        for raw in iter(self.popen.stdout.readline, b""):
            line = self.redactor.redact_text(raw.decode("utf-8", errors="replace"))
            if log is not None:
                try:
                    log.write(line)
                    log.flush()
                except OSError as exc:  # a full disk: keep draining so the command never blocks on its pipe
                    self.log_error = self.log_error or exc
                    log = _close_quietly(log)
            if self.on_line is not None:
                self.on_line(line)
        _close_quietly(log)

    def poll(self) -> int | None:
        assert self.popen is not None, "not started"
        return self.popen.poll()

    def track(self) -> None:
        """Add the command's current processes (group, session, descendants, orphans) to `tracked`."""
        if self.popen is None:
            return
        table = read_proc_table()
        leader = self.popen.pid
        me = os.getpid()
        members = {
            pid
            for pid, info in table.items()
            if info.state != "Z"
            and (
                info.pgid == leader
                or info.sid == leader
                or self.tracked.get(pid) == info.start_time
                or (info.ppid == me and pid not in _LAUNCHED_LEADERS)
            )
        }
        grew = True
        while grew:  # close over descendants of known members by parent pid
            children = {pid for pid, info in table.items() if info.ppid in members and info.state != "Z"}
            grew = not children <= members
            members |= children
        for pid in members:
            if pid not in self.tracked or self.tracked[pid] == table[pid].start_time:
                self.tracked[pid] = table[pid].start_time

    def live_tracked(self) -> list[int]:
        return [pid for pid, start in self.tracked.items() if is_alive(pid, start)]

    def describe(self) -> CellProcesses:
        """The manifest's record of this command: group, session and every tracked process with its start time."""
        assert self.popen is not None, "not started"
        leader = self.popen.pid
        return CellProcesses(
            host=socket.gethostname(),
            boot_id=boot_id(),
            leader=ProcessRecord(pid=leader, start_time=self.tracked.get(leader, 0)),
            pgid=leader,
            sid=leader,
            members=[ProcessRecord(pid=p, start_time=t) for p, t in sorted(self.tracked.items()) if p != leader],
            token=self.token,
        )

    def _scan(self) -> dict[int, int]:
        self.track()
        self._reap()
        return {pid: start for pid, start in self.tracked.items() if is_alive(pid, start)}

    def stop(self, grace_s: float) -> StopOutcome:
        """`stop_until_gone` over the group, the session and every tracked process (module docstring)."""
        assert self.popen is not None, "not started"
        killed, survivors = stop_until_gone(self._scan, grace_s=grace_s, on_signal=self._signal_group, reap=self._reap)
        self._reap()
        self.close()
        return StopOutcome(exit_code=self.popen.poll(), killed=killed, survivors=tuple(sorted(survivors.items())))

    def finish(self, grace_s: float) -> StopOutcome:
        """After the leader exited by itself: stop whatever it left behind (children that outlived it)."""
        self.track()
        if self.live_tracked():
            return self.stop(grace_s)
        self._reap()
        self.close()
        assert self.popen is not None
        return StopOutcome(exit_code=self.popen.poll(), killed=False, survivors=())

    def close(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        if self.popen is not None:
            _LAUNCHED_LEADERS.discard(self.popen.pid)

    def _signal_group(self, sig: signal.Signals) -> None:
        """killpg reaches members forked after the last scan; only while a tracked member still holds the group."""
        assert self.popen is not None
        leader = self.popen.pid
        table = read_proc_table()
        ours = any(
            info.pgid == leader and info.state != "Z" and self.tracked.get(pid) == info.start_time
            for pid, info in table.items()
        )
        if ours or (self.popen.poll() is None):
            try:
                os.killpg(leader, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def _reap(self) -> None:
        """Collect exit statuses of tracked orphans that were re-parented to the harness (no zombies left)."""
        assert self.popen is not None
        self.popen.poll()
        for pid in self.tracked:
            if pid == self.popen.pid:
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _close_quietly(handle: Any) -> None:
    if handle is not None:
        try:
            handle.close()
        except OSError:
            pass


def run_to_completion(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    log_path: Path,
    redactor: Redactor,
    timeout_s: float,
    should_stop: Callable[[], bool] = lambda: False,
) -> int:
    """Run an auxiliary command (a preparation step) in its own group; stop it at timeout_s or when asked."""
    process = ManagedProcess(argv=argv, env=env, cwd=cwd, log_path=log_path, redactor=redactor)
    process.start()
    deadline = time.monotonic() + timeout_s
    while process.poll() is None:
        if time.monotonic() > deadline or should_stop():
            process.stop(grace_s=5.0)
            return -1
        process.track()
        time.sleep(0.05)
    outcome = process.finish(grace_s=5.0)
    return outcome.exit_code if outcome.exit_code is not None else -1


def capture_output(argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None = None) -> str | None:
    """stdout of a short probe (nvidia-smi, an interpreter), or None when it cannot run, fails or times out."""
    try:
        popen = subprocess.Popen(
            list(argv),
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        return None
    _LAUNCHED_LEADERS.add(popen.pid)  # a probe is not an orphan of a cell
    try:
        out, _ = popen.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        popen.wait()
        return None
    finally:
        _LAUNCHED_LEADERS.discard(popen.pid)
    return out.decode("utf-8", errors="replace") if popen.returncode == 0 else None


def run_capturing(argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(exit status, stdout and stderr) of a short command whose output matters when it fails (`ray job stop`);
    -1 with the reason when it cannot run or times out (then its group is killed)."""
    try:
        popen = subprocess.Popen(
            list(argv),
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return -1, f"cannot run {argv[0]}: {exc.strerror or exc}"
    _LAUNCHED_LEADERS.add(popen.pid)
    try:
        out, _ = popen.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        popen.wait()
        return -1, f"timed out after {timeout_s:.0f} s"
    finally:
        _LAUNCHED_LEADERS.discard(popen.pid)
    return popen.returncode, out.decode("utf-8", errors="replace")
