"""The canonical recording of a rollout: what a training step consumes, in one form every framework's dump maps onto.

A recording is steps, each step its samples in training order; a sample is its prompt and response token ids, the
loss mask over the response, the scalar reward, its GRPO group (the prompt it answers, numbered by first appearance
within the step) and, where the rollout engine reported them, the per-token log-probs of the response.

- `RecordedSample`, `RecordedStep`, `Recording`: frozen dataclasses holding exactly that content.
- `digest_of(recording)`: sha256 over the canonical content, the same for a recording in any framework's format.
- `RecordingCodec`: what a framework folder implements to read and write its own dump format.
- `bad_recording(path, field, why)`: the UserError (exit 2) naming the file and the field at fault.

Caveats:
- Both dump formats are pickles (torch.save), loaded as the frameworks load them: read only recordings you trust.
- Rewards and log-probs are held at float32, the precision one framework's dump stores them in: a float64 reward
  converted there and back compares equal, a difference below float32 does not count.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from scripts.benchmark.errors import UserError


def float32(value: float) -> float:
    """The value rounded to float32 (the precision a recording holds)."""
    return struct.unpack("<f", struct.pack("<f", float(value)))[0]


@dataclass(frozen=True)
class RecordedSample:
    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    """One 0/1 per response token: 1 where the token is trained on (generated), 0 where not (a tool's output)."""
    reward: float
    """The scalar reward the advantage is computed from, at float32."""
    group: int
    """The GRPO group: the prompt this sample answers, numbered 0, 1, ... by first appearance within its step."""
    rollout_log_probs: tuple[float, ...] | None = None
    """The rollout engine's log-prob of each response token (float32), or None when it reported none."""


@dataclass(frozen=True)
class RecordedStep:
    samples: tuple[RecordedSample, ...]
    """In training order, each group's samples together (the order the trainer sees them)."""


@dataclass(frozen=True)
class Recording:
    steps: tuple[RecordedStep, ...]
    """Step 1, 2, ... of the replay, in order."""


@runtime_checkable
class RecordingCodec(Protocol):
    """A framework's dump format: `read` a recording from it, `write` one in it (atomically)."""

    def read(self, path: Path) -> Recording: ...

    def write(self, recording: Recording, path: Path) -> None: ...


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (a user error is one line)."""
    return " ".join(str(exc).split())


def bad_recording(path: Path, field: str, why: str) -> UserError:
    """The error for a recording that cannot be read or written: the file and the field at fault."""
    return UserError(f"{path}: {field}: {why}")


def numbered_files(path: Path, suffix: str, first: int, what: str) -> list[tuple[int, Path]]:
    """(number, entry) of the entries `{number}{suffix}` of the folder `path`, first..last with none missing;
    UserError naming the folder or the first missing entry."""
    if not path.is_dir():
        raise bad_recording(path, "recording", f"not a folder (a recording is a folder of {what})")
    pattern = re.compile(r"(0|[1-9][0-9]*)" + re.escape(suffix))
    found = {int(match.group(1)): entry for entry in path.iterdir() if (match := pattern.fullmatch(entry.name))}
    if not found:
        raise bad_recording(path, "steps", f"none found: no {what} in it")
    for number in range(first, max(found) + 1):
        if number not in found:
            raise bad_recording(path / f"{number}{suffix}", "step", f"missing (the recording goes up to {max(found)})")
    return sorted(found.items())


def int_sequence(file: Path, field: str, values: Any) -> tuple[int, ...]:
    """Token ids as ints (a list or a 1-D tensor's list); UserError naming the field otherwise."""
    values = values.tolist() if hasattr(values, "tolist") else values
    if not isinstance(values, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    ):
        raise bad_recording(file, field, "not a list of integer token ids")
    return tuple(values)


def float_sequence(file: Path, field: str, values: Any, length: int) -> tuple[float, ...]:
    """One finite float32 per response token; UserError naming the field otherwise."""
    values = values.tolist() if hasattr(values, "tolist") else values
    try:
        floats = tuple(float32(value) for value in values)
    except (TypeError, ValueError, OverflowError):
        raise bad_recording(file, field, "not a list of numbers") from None
    if len(floats) != length:
        raise bad_recording(file, field, f"has {len(floats)} values for {length} response tokens")
    return floats


def loss_mask_of(file: Path, field: str, values: Any, length: int) -> tuple[int, ...]:
    """One 0/1 per response token; UserError naming the field otherwise."""
    mask = int_sequence(file, field, values)
    if len(mask) != length:
        raise bad_recording(file, field, f"has {len(mask)} values for {length} response tokens")
    if any(value not in (0, 1) for value in mask):
        raise bad_recording(file, field, "holds values other than 0 and 1")
    return mask


def reward_of(file: Path, field: str, value: Any) -> float:
    """A finite scalar reward at float32; UserError naming the field otherwise (a dict of rewards included)."""
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise bad_recording(file, field, f"is {value!r}, not one finite number")
    return float32(value)


def digest_of(recording: Recording) -> str:
    """sha256 (hex) over the canonical content: per step, per sample in order, every field of `RecordedSample`
    (lengths first, so no two recordings share a byte stream; floats as float32 little-endian)."""
    hasher = hashlib.sha256(b"recording-v1")
    hasher.update(struct.pack("<q", len(recording.steps)))
    for step in recording.steps:
        hasher.update(struct.pack("<q", len(step.samples)))
        for sample in step.samples:
            _hash_sample(hasher, sample)
    return hasher.hexdigest()


def _hash_sample(hasher: Any, sample: RecordedSample) -> None:
    for ints in (sample.prompt_ids, sample.response_ids, sample.loss_mask):
        hasher.update(struct.pack(f"<q{len(ints)}q", len(ints), *ints))
    hasher.update(struct.pack("<fq", sample.reward, sample.group))
    log_probs = sample.rollout_log_probs
    if log_probs is None:
        hasher.update(struct.pack("<q", -1))
    else:
        hasher.update(struct.pack(f"<q{len(log_probs)}f", len(log_probs), *log_probs))
