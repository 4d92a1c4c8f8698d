"""Is GPU memory back to where it was before the matrix started? Checked between cells via nvidia-smi.

- `read_used_mib()`: used memory per GPU index, or None when nvidia-smi is absent or fails.
- `wait_until_released(baseline, timeout_s)`: polls until every GPU uses at most baseline + slack; returns None when
  released (or when there is no nvidia-smi), else a message naming the GPUs and numbers still held.

Caveats:
- Memory held by a process outside the harness after the baseline was taken looks like a leak of the previous cell.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

from scripts.benchmark.runner.process import capture_output

SLACK_MIB = 1024.0


def read_used_mib() -> dict[int, float] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = capture_output(
        ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"], timeout_s=30
    )
    if out is None:
        return None
    used: dict[int, float] = {}
    for line in out.strip().splitlines():
        index, value = (part.strip() for part in line.split(",")[:2])
        used[int(index)] = float(value)
    return used


def wait_until_released(
    baseline: dict[int, float] | None,
    *,
    timeout_s: float,
    poll_s: float = 2.0,
    slack_mib: float = SLACK_MIB,
    should_stop: Callable[[], bool] = lambda: False,
) -> str | None:
    if baseline is None:
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        used = read_used_mib()
        if used is None:
            return None
        held = {i: mib for i, mib in used.items() if mib > baseline.get(i, 0.0) + slack_mib}
        if not held:
            return None
        if time.monotonic() >= deadline or should_stop():
            detail = ", ".join(
                f"GPU {i}: {mib:.0f} MiB (before the run: {baseline.get(i, 0.0):.0f})" for i, mib in held.items()
            )
            return f"GPU memory not released {timeout_s:.0f} s after the cell stopped: {detail}"
        time.sleep(poll_s)
