"""Which processes a test started: every one carries an environment mark that its descendants inherit (a Ray node's
GCS, raylet, workers and job drivers included), and each is identified by (pid, start time).

- `new_mark()`: {MARK_VAR: <random>} to put into the environment of whatever the test starts.
- `marked_processes(mark)`: {pid: start time} of the live processes carrying it (zombies are dead).
- `wait_until_none(mark, timeout_s)`: polls until none is left; returns the survivors (empty when all are gone).
- `stop_marked(processes, grace_s)`: SIGTERM, grace, SIGKILL to exactly those (pid, start time) pairs still alive.

Caveats:
- Needs Linux /proc and the right to read other processes' environ (the tests run as the owner of what they start).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

from scripts.benchmark.runner.process import is_alive, read_proc_info

MARK_VAR = "BENCH_TEST_PROCESS_MARK"


def new_mark() -> dict[str, str]:
    return {MARK_VAR: uuid.uuid4().hex}


def marked_processes(mark: str) -> dict[int, int]:
    needle = f"{MARK_VAR}={mark}".encode()
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and (info := read_proc_info(int(entry.name))) and info.state != "Z":
            found[int(entry.name)] = info.start_time
    return found


def wait_until_none(mark: str, timeout_s: float) -> dict[int, int]:
    deadline = time.monotonic() + timeout_s
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def stop_marked(processes: dict[int, int], grace_s: float) -> None:
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for pid, start in processes.items():
            if is_alive(pid, start):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait_s
        while any(is_alive(pid, start) for pid, start in processes.items()) and time.monotonic() < deadline:
            time.sleep(0.1)
