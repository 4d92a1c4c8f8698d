"""One recorded rollout, in any framework's dump format: read it, write it, convert it, and its digest.

The training-step comparison replays the same recording into each framework; each reads its own dump format, so the
recording is converted, and its digest (sha256 over the canonical content, frameworks/recorded.py) proves both sides
trained on the same tokens.

- `read_recording(path, fmt)` / `write_recording(recording, path, fmt)`: `fmt` is a registered framework name whose
  adapter has a recording codec; writes are atomic (nothing half-written is left at `path`).
- `convert_recording(source, source_format, target, target_format)`: read, write, and return the digest.
- `recording_digest(path, fmt)`: the digest of a recording on disk, the same in every format.

Bad input (a missing file, another format, inconsistent lengths, a step missing) raises UserError naming the file
and the field.
"""

from __future__ import annotations

from pathlib import Path

from scripts.benchmark.frameworks.recorded import RecordedSample, RecordedStep, Recording, RecordingCodec

__all__ = [
    "RecordedSample",
    "RecordedStep",
    "Recording",
    "convert_recording",
    "read_recording",
    "recording_digest",
    "write_recording",
]


def codec(fmt: str) -> RecordingCodec:
    """The codec of the framework named `fmt`; UserError when none is registered or it has no recording format."""
    raise NotImplementedError


def read_recording(path: Path, fmt: str) -> Recording:
    """The canonical recording of the dump at `path`, in framework `fmt`'s format."""
    raise NotImplementedError


def write_recording(recording: Recording, path: Path, fmt: str) -> None:
    """The recording as framework `fmt`'s dump at `path` (a new folder, written atomically)."""
    raise NotImplementedError


def convert_recording(source: Path, source_format: str, target: Path, target_format: str) -> str:
    """The dump at `source` rewritten at `target` in the other format; returns the recording's digest."""
    raise NotImplementedError


def recording_digest(path: Path, fmt: str) -> str:
    """The digest of the recording at `path` (sha256 hex over the canonical content)."""
    raise NotImplementedError
