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

import os
import shutil
import tempfile
from pathlib import Path

from scripts.benchmark.errors import UserError
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.recorded import (
    RecordedSample,
    RecordedStep,
    Recording,
    RecordingCodec,
    bad_recording,
    digest_of,
)

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
    try:
        adapter = registry.get(fmt)
    except ValueError as exc:
        raise UserError(f"recording format {fmt!r}: {exc}") from None
    if adapter.recording_codec is None:
        raise UserError(f"recording format {fmt!r}: {adapter.label} has no rollout dump this harness reads")
    return adapter.recording_codec


def read_recording(path: Path, fmt: str) -> Recording:
    """The canonical recording of the dump at `path`, in framework `fmt`'s format."""
    reader = codec(fmt)
    if not path.exists():
        raise bad_recording(path, "recording", "does not exist")
    return reader.read(path)


def write_recording(recording: Recording, path: Path, fmt: str) -> None:
    """The recording as framework `fmt`'s dump at `path` (a new folder, written atomically): written into a
    temporary folder beside it and renamed into place, so `path` is the whole recording or absent."""
    writer = codec(fmt)
    if not recording.steps:
        raise bad_recording(path, "steps", "the recording has no step to write")
    if path.exists() or path.is_symlink():
        raise bad_recording(path, "output", "exists already; give a new folder (a recording is never overwritten)")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    try:
        writer.write(recording, staging)
        os.rename(staging, path)
    except UserError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise UserError(str(exc).replace(str(staging), str(path))) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def convert_recording(source: Path, source_format: str, target: Path, target_format: str) -> str:
    """The dump at `source` rewritten at `target` in the other format; returns the recording's digest."""
    codec(target_format)
    recording = read_recording(source, source_format)
    write_recording(recording, target, target_format)
    return digest_of(recording)


def recording_digest(path: Path, fmt: str) -> str:
    """The digest of the recording at `path` (sha256 hex over the canonical content)."""
    return digest_of(read_recording(path, fmt))
