"""The benchmark tracking backend's files (miles/utils/bench_tracking.py) -> native events of the Miles reader.

One file per process instance: every `tracking.log` call as logged, with its step key, so nothing is parsed out
of console lines. A file is a process's life, so the first step it logs is marked as a new process (a restart,
a resume with --load), which `normalize_miles_steps` keeps out of the step before it. Files are ordered by the
creation sequence number each process claimed in the folder when it opened its file (`process.sequence`), never
by a clock: a restart whose clock is behind, or a second run written into the same folder, still comes after the
attempt it follows. A file is told by any of its lines, so a foreign or cut first line loses only that line.
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


def _tracking_lines(path: Path) -> list[dict[str, Any]]:
    """The file's lines written by the tracking backend (others are skipped here, flagged by `tracking_events`)."""
    lines = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for text in handle:
                try:
                    obj = json.loads(text)
                except ValueError:
                    continue
                if isinstance(obj, dict) and obj.get("format") == FORMAT:
                    lines.append(obj)
    except OSError:
        return []
    return lines


def is_tracking_file(path: Path) -> bool:
    """Does any line of the file come from the tracking backend?"""
    return bool(_tracking_lines(path)[:1])


def attempt_order(path: Path) -> tuple[int, float] | None:
    """Where the file's process comes among the attempts of its folder: its creation sequence number (files written
    before the backend claimed one: none, then the time it started)."""
    for obj in _tracking_lines(path):
        process = obj.get("process") if isinstance(obj.get("process"), dict) else {}
        sequence, started = process.get("sequence"), process.get("started")
        if isinstance(sequence, int) and not isinstance(sequence, bool):
            return (1, float(sequence))
        if isinstance(started, (int, float)) and not isinstance(started, bool):
            return (0, float(started))
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
    ("miles/backends/megatron_utils/actor.py", 'timer("weight_backup")'),
)
"""What the patch series puts into a Miles checkout for the backend: the file, its registry entry, its switch, and
the timer of the one post-train work a tracking sink would otherwise not see (the Megatron actor's weight copy)."""


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
