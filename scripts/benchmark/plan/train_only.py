"""A train-only plan: one recorded rollout replayed into every cell's training step, so the training steps of the two
sides are compared on identical tokens with no generation in the step.

- The recording pass: the candidate side's framework generates the spec's steps once, on the plan's first backend,
  and dumps every step's rollout with its own switch (frameworks/<name>/launch.py). It is the first train-only
  prepare step, `record-rollout`: the script recording/record.sh beside plan.json, skipped when the recording is
  complete. Recordings live in `recording.cache_dir/<key>`, where the key hashes what determines the rollout (the
  spec as a full-loop run, the recorder's framework and target, backend and layout, and the checkout it runs with
  the commit that checkout is at), so a recording made once is replayed by every later run and night of the same
  spec and code. A checkout whose commit cannot be read here, or with uncommitted changes, records for its plan
  folder only: nothing proves that another plan would run the same code.
- `convert-recording-<side>-<backend>` steps: a cell that reads another format or folder than the recorder wrote
  gets the recording converted for it (`run.py prepare-recording`), checked against the recording's digest.
- `digest-recording`: the recording's digest (the same whatever format it is read in), written beside it; the
  runner copies it into manifest.json and the report prints it. plan.json's `recording` holds the key, the paths,
  the record launch and the digest when the recording is already on this machine.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.benchmark.contracts.plan import RECORD_SCRIPT
from scripts.benchmark.contracts.sides import Side, SidePair
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.launch import RecordingPass
from scripts.benchmark.spec import BenchmarkSpec, full_loop_spec_hash, spec_json

RECORD_STEP = "record-rollout"
DIGEST_STEP = "digest-recording"
DIGEST_FILE = "digest.txt"


def is_train_only(spec: BenchmarkSpec) -> bool:
    return spec.run.mode == "train-only"


@dataclass(frozen=True)
class Recorder:
    """Who generates the recording: its side, and the code it runs (a checkout and its commit, where it has one)."""

    side: Side
    checkout: str | None = None
    """The folder its launches run (None: an installed package, named by its target)."""
    commit: str | None = None
    """The checkout's commit, None when it cannot be read here or the checkout has uncommitted changes."""
    plan_dir: str | None = None
    """Set when the checkout's code cannot be named by a commit: the recording then belongs to this plan folder."""

    @property
    def shared(self) -> bool:
        return self.checkout is None or self.commit is not None


def checkout_commit(checkout: str) -> str | None:
    """HEAD of a git checkout with no uncommitted change to its tracked files; None otherwise (or not readable)."""
    try:
        head = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        status = subprocess.run(
            ["git", "-C", checkout, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode or status.returncode or status.stdout.strip():
        return None
    return head.stdout.strip() or None


def recorder_of(side: Side, settings: Mapping[str, Any], plan_dir: Path) -> Recorder:
    checkout = registry.get(side.framework).checkout(side, settings)
    if checkout is None:
        return Recorder(side)
    commit = checkout_commit(checkout)
    return Recorder(side, checkout, commit, None if commit else str(plan_dir))


def recording_key(spec: BenchmarkSpec, recorder: Recorder, backend: str, layout: str) -> str:
    """What determines the recorded rollout: the spec as a full-loop run and who generated it, where, with which
    code."""
    side = recorder.side
    what = {"spec": full_loop_spec_hash(spec_json(spec)), "framework": side.framework, "target": side.target}
    what |= {"backend": backend, "layout": layout}
    if recorder.checkout is not None:
        what |= {"checkout": recorder.checkout, "commit": recorder.commit, "plan": recorder.plan_dir}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def recording_root(spec: BenchmarkSpec, recorder: Recorder, backend: str, layout: str) -> str:
    assert spec.recording is not None
    return f"{spec.recording.cache_dir}/{recording_key(spec, recorder, backend, layout)}"


def recording_problems(spec: BenchmarkSpec, sides: SidePair, layout: str) -> list[str]:
    """Sides whose framework has no record-and-replay of rollouts, or cannot replay a converted one of this spec in
    this layout, cannot take part in a train-only plan."""
    problems = []
    for side in sides.sides():
        adapter = registry.get(side.framework)
        if adapter.recording_codec is None:
            problems.append(f"run.mode train-only: {side.label} has no record-and-replay of rollouts in this harness")
        else:
            problems += [f"run.mode train-only: {problem}" for problem in adapter.replay_problems(spec, layout)]
    return list(dict.fromkeys(problems))


def replay(root: str) -> RecordingPass:
    return RecordingPass("replay", root)


def record(root: str) -> RecordingPass:
    return RecordingPass("record", root)


def recording_steps(
    spec: BenchmarkSpec,
    sides: SidePair,
    backends: tuple[str, ...],
    layout: str,
    plan_dir: Path,
    run_py: str,
    settings: Mapping[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The train-only prepare steps, in order, and plan.json's `recording` section (without the record cell)."""
    recorder, backend = recorder_of(sides.candidate, settings, plan_dir), backends[0]
    adapter, root = registry.get(recorder.side.framework), recording_root(spec, recorder, backend, layout)
    source, fmt = adapter.recording_path(spec, backend, layout, root), adapter.name
    everyone = list(dict.fromkeys(side.framework for side in sides.sides()))
    steps = [
        {
            "name": RECORD_STEP,
            "argv": ["bash", str(plan_dir / RECORD_SCRIPT)],
            "creates": adapter.recording_done(spec, backend, layout, root),
            "skip_if_exists": True,
            "needed_by": everyone,
        }
    ]
    digest_file = f"{root}/{DIGEST_FILE}"
    digest = ["python3", run_py, "prepare-recording", "--source", source, "--source-format", fmt]
    steps.append(
        {
            "name": DIGEST_STEP,
            "argv": digest + ["--digest-file", digest_file],
            "creates": digest_file,
            "skip_if_exists": True,
            "needed_by": everyone,
        }
    )
    steps += _conversions(spec, sides, backends, layout, root, digest + ["--digest-file", digest_file], source)
    section = {
        "recorder": recorder.side.name,
        "framework": recorder.side.framework,
        "checkout": recorder.checkout,
        "commit": recorder.commit,
        "shared": recorder.shared,
        "backend": backend,
        "layout": layout,
        "key": recording_key(spec, recorder, backend, layout),
        "root": root,
        "format": fmt,
        "source": source,
        "digest_file": digest_file,
        "digest": _known_digest(digest_file),
    }
    return steps, section


def _conversions(spec, sides: SidePair, backends, layout, root, digest_argv, source) -> list[dict[str, Any]]:
    """One conversion per (framework, backend) whose cells read the recording somewhere else than it was written."""
    steps, seen = [], set()
    for side in sides.sides():
        adapter = registry.get(side.framework)
        for backend in backends:
            target = adapter.recording_path(spec, backend, layout, root)
            if target == source or target in seen:
                continue
            seen.add(target)
            argv = digest_argv[:-2] + ["--target", target, "--target-format", adapter.name]
            steps.append(
                {
                    "name": f"convert-recording-{side.framework}-{backend}",
                    "argv": argv + digest_argv[-2:],
                    "creates": adapter.recording_done(spec, backend, layout, root),
                    "skip_if_exists": True,
                    "needed_by": [side.framework],
                }
            )
    return steps


def _known_digest(path: str) -> str | None:
    """The digest when the recording already exists where this plan is written (a node that recorded it before)."""
    try:
        return Path(path).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None
