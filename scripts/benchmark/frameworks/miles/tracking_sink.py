"""The benchmark tracking backend's files (miles/utils/bench_tracking.py) -> native events of the Miles reader.

One file per process instance: every `tracking.log` call as logged, with its step key, so nothing is parsed out
of console lines. A file is a process's life, so the first step it logs is marked as a new process (a restart,
a resume with --load), which `normalize_miles_steps` keeps out of the step before it. Files are ordered by the time
their process started.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from scripts.benchmark.frameworks.native_events import NativeEvent, SinkIssue, read_json_lines

from miles.utils.bench_tracking import FORMAT

STEP_KEY = "rollout/step"
_MARKERS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def is_tracking_file(path: Path) -> bool:
    """Does the file's first line come from the tracking backend?"""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline()
        return json.loads(first).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def started(path: Path) -> float | None:
    """When the file's process started (its lines' `process.started`)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            value = json.loads(handle.readline())["process"]["started"]
        return float(value)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _decoded(value: Any) -> Any:
    return _MARKERS.get(value, value) if isinstance(value, str) else value


def tracking_events(path: Path, issues: list[SinkIssue], offset: int) -> list[NativeEvent]:
    """The file's rollout-keyed log calls, in the order they were made; the first one marks a new process."""
    first_issue = len(issues)
    lines = read_json_lines(path, path.stem, issues, offset=offset)
    source = next((str(obj["process"]["role"]) for _, obj in lines if _has_role(obj)), path.stem)
    for issue in issues[first_issue:]:
        issue.source = source
    events: list[NativeEvent] = []
    for line, obj in lines:
        if not isinstance(obj, dict) or obj.get("format") != FORMAT:
            issues.append(SinkIssue(source=source, order=offset + line, flag=f"foreign_line:{path.name}:{line}"))
            continue
        metrics = {str(k): _decoded(v) for k, v in (obj.get("metrics") or {}).items()}
        step = metrics.get(STEP_KEY)
        if not isinstance(step, (int, float)) or isinstance(step, bool):
            continue
        event = NativeEvent(source=source, order=offset + line, step=int(step), metrics=metrics)
        event.new_process = not events
        events.append(event)
    return events


BACKEND_SIGNS: tuple[tuple[str, str | None], ...] = (
    ("miles/utils/bench_tracking.py", None),
    ("miles/utils/tracking_utils/tracking.py", "BenchTrackingBackend"),
    ("miles/utils/arguments.py", "use_bench_tracking"),
)
"""What the patch series puts into a Miles checkout for the backend: the file, its registry entry, its switch."""


def backend_problems(miles_root: Path) -> list[str]:
    """Why a Miles checkout would not write the tracking sink ([] when it has the backend), read from its files
    before any GPU time: without it the cell would run to the end and then fail on an empty sink."""
    lacking = []
    for relative, sign in BACKEND_SIGNS:
        path = miles_root / relative
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            lacking.append(f"no {relative}")
            continue
        if sign is not None and sign not in text:
            lacking.append(f"{relative} does not name {sign}")
    if not lacking:
        return []
    return [
        f"Miles at {miles_root} lacks the benchmark tracking backend that its cells' miles-tracking sink needs "
        f"({'; '.join(lacking)}): apply the patch series (python upstream/apply.py {miles_root}), or plan for a "
        "Miles without it (--miles-version 0.0.2: its sink is the job's stdout)"
    ]


def _has_role(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("process"), dict) and "role" in obj["process"]
