"""Miles's rollout dump as a canonical recording: the files `--save-debug-rollout-data` writes and
`--load-debug-rollout-data` replays (miles/ray/rollout/debug_data.py).

A recording is one folder holding `{rollout_id}.pt` per rollout, 0, 1, ... (`debug_data_template(folder)` is the
template both switches take). Each file is `torch.save(dict(rollout_id, metadata, samples=[Sample.to_dict()]))`;
a sample's `tokens` are prompt then response (the last `response_length`), `loss_mask` and `rollout_log_probs` cover
the response, `reward` is the scalar the advantages start from, `group_index` its GRPO group.

- `CODEC`: read and write (the adapter's `recording_codec`).
- `debug_data_template(folder)`: the path template of both switches for a recording folder.

Caveats:
- Miles replays the rewards of the dump (it computes no reward in debug-train-only); a dict reward (`--reward-key`)
  is refused, the recording holds one scalar per sample.
- Evaluation dumps (`eval_*.pt`) are not part of a recording and are ignored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scripts.benchmark.errors import require
from scripts.benchmark.frameworks.recorded import (
    RecordedSample,
    RecordedStep,
    Recording,
    bad_recording,
    float_sequence,
    int_sequence,
    loss_mask_of,
    numbered_files,
    one_line,
    reward_of,
)

FILE_TEMPLATE = "{rollout_id}.pt"


def debug_data_template(folder: Path) -> str:
    """What `--save-debug-rollout-data` / `--load-debug-rollout-data` take for a recording kept in `folder`."""
    return str(folder / FILE_TEMPLATE)


class MilesRecordingCodec:
    def read(self, path: Path) -> Recording:
        """The recording in the folder `path` (`0.pt`, `1.pt`, ... with no rollout missing)."""
        files = numbered_files(path, ".pt", first=0, what="Miles's {rollout_id}.pt files")
        return Recording(steps=tuple(_read_step(file, rollout_id) for rollout_id, file in files))

    def write(self, recording: Recording, path: Path) -> None:
        """The recording as `{rollout_id}.pt` files in the (new, empty) folder `path`, rollout 0 first: the payload
        Miles's `save_debug_rollout_data` writes, each sample a `Sample.to_dict()` of the fields a recording holds
        (Miles's `Sample.from_dict` gives the others their defaults)."""
        torch = require("torch", "recording")
        groups_before = samples_before = 0
        for rollout_id, step in enumerate(recording.steps):
            samples = [
                _sample_dict(sample, groups_before + sample.group, samples_before + position)
                for position, sample in enumerate(step.samples)
            ]
            groups_before += len({sample.group for sample in step.samples})
            samples_before += len(step.samples)
            torch.save(
                dict(rollout_id=rollout_id, metadata={}, samples=samples),
                path / FILE_TEMPLATE.format(rollout_id=rollout_id),
            )


def _sample_dict(sample: RecordedSample, group_index: int, index: int) -> dict[str, Any]:
    return dict(
        group_index=group_index,
        index=index,
        prompt="",
        tokens=[*sample.prompt_ids, *sample.response_ids],
        response="",
        response_length=len(sample.response_ids),
        reward=sample.reward,
        loss_mask=list(sample.loss_mask),
        rollout_log_probs=None if sample.rollout_log_probs is None else list(sample.rollout_log_probs),
        status="completed",
        metadata={},
    )


def _read_step(file: Path, rollout_id: int) -> RecordedStep:
    torch = require("torch", "recording")
    try:
        payload = torch.load(file, map_location="cpu", weights_only=False)
    except Exception as exc:  # a pickle of anything: what fails is the file, named
        raise bad_recording(
            file, "file", f"not a Miles debug rollout dump ({type(exc).__name__}: {one_line(exc)})"
        ) from None
    if not isinstance(payload, dict) or not isinstance(payload.get("samples"), list):
        raise bad_recording(file, "samples", "missing: not a Miles debug rollout dump (no list of samples)")
    if payload.get("rollout_id", rollout_id) != rollout_id:
        raise bad_recording(file, "rollout_id", f"is {payload['rollout_id']!r}, the file name says {rollout_id}")
    if not payload["samples"]:
        raise bad_recording(file, "samples", "empty: a step trains on at least one sample")
    groups: dict[Any, int] = {}
    samples = []
    for position, raw in enumerate(payload["samples"]):
        samples.append(_read_sample(file, f"samples[{position}]", raw, groups))
    return RecordedStep(samples=tuple(samples))


def _read_sample(file: Path, where: str, raw: Any, groups: dict[Any, int]) -> RecordedSample:
    if not isinstance(raw, dict):
        raise bad_recording(file, where, f"is {type(raw).__name__}, not a Sample.to_dict() dict")
    tokens = int_sequence(file, f"{where}.tokens", raw.get("tokens"))
    length = raw.get("response_length")
    if isinstance(length, bool) or not isinstance(length, int) or not 0 <= length <= len(tokens):
        raise bad_recording(file, f"{where}.response_length", f"is {length!r}, not 0..{len(tokens)} (len(tokens))")
    group = raw.get("group_index")
    if group is None:
        raise bad_recording(file, f"{where}.group_index", "missing: the GRPO group of the sample")
    if group in groups and groups[group] != len(groups) - 1:
        raise bad_recording(file, f"{where}.group_index", f"group {group!r} is split: a group's samples are together")
    groups.setdefault(group, len(groups))
    mask = raw.get("loss_mask")
    log_probs = raw.get("rollout_log_probs")
    return RecordedSample(
        prompt_ids=tokens[: len(tokens) - length],
        response_ids=tokens[len(tokens) - length :],
        loss_mask=(1,) * length if mask is None else loss_mask_of(file, f"{where}.loss_mask", mask, length),
        reward=reward_of(file, f"{where}.reward", raw.get("reward")),
        group=groups[group],
        rollout_log_probs=(
            None if log_probs is None else float_sequence(file, f"{where}.rollout_log_probs", log_probs, length)
        ),
    )


CODEC = MilesRecordingCodec()
