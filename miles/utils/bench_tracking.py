"""The benchmark's tracking backend: every `tracking.log` call of a process, as one JSON line in that process's own
file under the folder the harness names in BENCH_TRACKING_DIR_ENV.

Why a backend and not the console: the reader gets each logged value as logged (no regex over log lines, no Ray
prefixes, no wall-clock stamps standing in for durations), with the step key the caller named and the process that
logged it. Each process instance writes its own file (pid + a fresh id), so a restarted process is a new file, and
claims the folder's next creation sequence number as it opens it (an exclusive create in `.sequence/`), which orders
the attempts of a run by what the folder proves rather than by any clock.

The cost on the logging process is the write alone: one `os.write` of one line to a file opened with O_APPEND (a
line is whole or, after a crash inside the write, cut at the end of the file), no flush to disk, no device sync
(a tensor still on its device is written as a marker, never read back), no collective, no logging call.
Non-finite values are kept as the string markers "NaN", "Infinity", "-Infinity", so every line is strict JSON. A
value of several elements (a CPU tensor or array, a list, a dict) is written whole, nested as logged; one element is
written as its value.
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import uuid
from typing import Any

try:  # inside a Miles checkout: a registered backend; the harness alone only reads what it writes
    from miles.utils.tracking_utils.base import TrackingBackend
except ImportError:  # pragma: no cover - depends on the checkout
    TrackingBackend = object

BENCH_TRACKING_DIR_ENV = "BENCH_TRACKING_DIR"
"""Set by the harness to the cell's sink folder; without it the backend stays off."""
SEQUENCE_DIR = ".sequence"
"""Where each process claims its creation sequence number: one empty file per number, created exclusively."""
FORMAT = "bench-tracking-v1"
"""The `format` field of every line: how the reader tells these files from other JSON lines."""
DEVICE_TENSOR = "device-tensor"
"""Written in place of a value still on an accelerator: reading it would synchronise the device."""


def _role(primary: bool, kwargs: dict[str, Any]) -> str:
    """The process kind, from what its `init_tracking` call passes: the driver is primary, the rollout manager
    passes its router's address, the train ranks pass nothing."""
    if primary:
        return "main"
    return "rollout_manager" if "router_addr" in kwargs else "train"


def claim_sequence(folder: str) -> int:
    """The folder's next free creation sequence number, claimed by an exclusive create (no two processes share one,
    and a process that starts later gets a higher one than every process whose claim it could see)."""
    claims = os.path.join(folder, SEQUENCE_DIR)
    os.makedirs(claims, exist_ok=True)
    number = len(os.listdir(claims))
    while True:
        try:
            os.close(os.open(os.path.join(claims, f"{number:09d}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            return number
        except FileExistsError:
            number += 1


def encode_value(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    device = getattr(value, "device", None)
    if device is not None and getattr(device, "type", "cpu") != "cpu":
        return DEVICE_TENSOR
    if isinstance(value, (list, tuple)):
        return [encode_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): encode_value(item) for key, item in value.items()}
    if hasattr(value, "tolist"):  # a CPU tensor or a numpy array or scalar, of any shape
        values = value.tolist()
        while isinstance(values, list) and len(values) == 1:  # one element: its value, as `.item()` gives it
            values = values[0]
        return encode_value(values)
    return str(value)


class BenchTrackingBackend(TrackingBackend):
    """Appends `{"format", "process", "seq", "step_key", "step", "metrics"}` per log call to its own file."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._process: dict[str, Any] = {}
        self._seq = 0

    def init(self, args, *, primary: bool = True, **kwargs) -> None:
        folder = os.environ.get(BENCH_TRACKING_DIR_ENV)
        if not folder:
            return
        os.makedirs(folder, exist_ok=True)
        role = _role(primary, kwargs)
        instance = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._process = {"role": role, "host": socket.gethostname(), "pid": os.getpid(), "instance": instance}
        self._process |= {"sequence": claim_sequence(folder), "started": time.time()}
        path = os.path.join(folder, f"{role}-{instance}.jsonl")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def log(self, metrics: dict[str, Any], step: int | None = None, *, step_key: str | None = None, **kwargs) -> None:
        if self._fd is None:
            return
        self._seq += 1
        line = {
            "format": FORMAT,
            "process": self._process,
            "seq": self._seq,
            "step_key": step_key,
            "step": encode_value(step),
            "metrics": {str(k): encode_value(v) for k, v in metrics.items()},
        }
        os.write(self._fd, (json.dumps(line, allow_nan=False, separators=(",", ":")) + "\n").encode())

    def define_step_key_metric_group(self, prefix: str, step_key: str) -> None:
        """Every line carries its step key already."""

    def finish(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
