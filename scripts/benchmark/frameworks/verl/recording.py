"""VERL's rollout dump as a canonical recording: the TransferQueue batches `skip.rollout_tq` (action `cache`) saves
on a first run and injects on later ones instead of generating (verl/utils/skip/rollout_skip.py, `RolloutTqSkip`).

A recording is one project dump folder holding `{step}/{inner}/tq_batch.pt` and `meta.json` per global step 1, 2,
...; VERL looks for it at `project_dump_dir(dump_dir, ...)` (its `_get_project_dump_dir`: the experiment and project
names, the batch size, n and the maximum lengths of the replaying config). Each `tq_batch.pt` is
`{"tensordict", "tags", "keys", "global_steps"}`: the trajectories as `{uid}_{session_id}_{index}` keys, a GRPO
group per uid; `prompts`, `responses`, `response_mask` and `rollout_log_probs` are jagged (unpadded) per sample,
`rm_scores` holds the reward at the last response token.

- `CODEC`: read and write (the adapter's `recording_codec`).
- `project_dump_dir(dump_dir, experiment, project, batch_size, n, max_prompt_length, max_response_length)`.

Caveats:
- Reading and writing need `tensordict` (VERL's own dependency): run where VERL is installed.
- Written for `parameter_sync_step` 1 (one inner folder per step); reading merges every inner folder of a step.
- VERL recomputes old log-probs (and reference log-probs, advantages) from the replayed tokens; it takes the reward
  from `rm_scores` unless a colocated reward model rescores the batch.
"""

from __future__ import annotations

import json
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

BATCH_FILE = "tq_batch.pt"
META_FILE = "meta.json"
TOKEN_FIELDS = ("prompts", "responses", "response_mask")


def project_dump_dir(
    dump_dir: Path,
    experiment: str,
    project: str,
    batch_size: int,
    n: int,
    max_prompt_length: int,
    max_response_length: int,
) -> Path:
    """Where VERL's `skip.rollout_tq` reads a step folder under `dump_dir` for this config (its own path rule)."""
    return (
        dump_dir / f"{experiment}_{project}" / f"GBS{batch_size}_N{n}_in{max_prompt_length}_out{max_response_length}"
    )


class VerlRecordingCodec:
    def read(self, path: Path) -> Recording:
        """The recording in `path`: a project dump folder (numbered step folders), or a `dump_dir` holding one."""
        require("tensordict", "recording")
        steps = numbered_files(_project_folder(path), "", first=1, what="VERL's {step}/{inner}/tq_batch.pt folders")
        return Recording(steps=tuple(_read_step(folder) for _, folder in steps))

    def write(self, recording: Recording, path: Path) -> None:
        """The recording as step folders 1, 2, ... of the (new, empty) project dump folder `path`, each `{step}/0/`
        holding the `tq_batch.pt` and `meta.json` VERL's `RolloutTqSkip.prepare_data` writes."""
        torch = require("torch", "recording")
        require("tensordict", "recording")
        for number, step in enumerate(recording.steps, start=1):
            folder = path / str(number) / "0"
            folder.mkdir(parents=True)
            keys = _keys(number, step)
            payload = {"tensordict": _tensordict(path, number, step, keys), "tags": _tags(number, step), "keys": keys}
            torch.save({**payload, "global_steps": number}, folder / BATCH_FILE)
            meta = {"global_steps": number, "num_trajectories": len(keys)}
            (folder / META_FILE).write_text(json.dumps(meta), encoding="utf-8")


def _project_folder(path: Path) -> Path:
    """`path` itself when it holds step folders, else the one `*/GBS*` folder below it (a `dump_dir`)."""
    if not path.is_dir() or any(entry.name.isdigit() for entry in path.iterdir()):
        return path
    below = sorted(path.glob("*/GBS*_N*_in*_out*"))
    if len(below) > 1:
        names = ", ".join(str(p.relative_to(path)) for p in below)
        raise bad_recording(path, "recording", f"holds several VERL dumps ({names}): name one")
    return below[0] if below else path


def _read_step(folder: Path) -> RecordedStep:
    inners = numbered_files(folder, "", first=0, what="inner folders 0, 1, ...")
    keys: list[str] = []
    fields: dict[str, list[Any]] = {}
    for _, inner in inners:
        batch_keys, batch_fields = _read_batch(inner / BATCH_FILE)
        keys += batch_keys
        for name, values in batch_fields.items():
            fields.setdefault(name, []).extend(values)
    for name, values in fields.items():
        if len(values) != len(keys):  # a field some inner batches of the step have and others lack
            raise bad_recording(folder, name, f"in {len(values)} of the step's {len(keys)} trajectories")
    return _grouped(folder / "0" / BATCH_FILE, keys, fields)


def _read_batch(file: Path) -> tuple[list[str], dict[str, list[Any]]]:
    torch = require("torch", "recording")
    if not file.is_file() or not (file.parent / META_FILE).is_file():
        raise bad_recording(file, "file", f"missing (VERL reads a step from {BATCH_FILE} beside {META_FILE})")
    try:
        payload = torch.load(file, map_location="cpu", weights_only=False)
    except Exception as exc:  # a pickle of anything: what fails is the file, named
        raise bad_recording(
            file, "file", f"not a VERL TransferQueue batch ({type(exc).__name__}: {one_line(exc)})"
        ) from None
    if not isinstance(payload, dict) or "tensordict" not in payload or not isinstance(payload.get("keys"), list):
        raise bad_recording(file, "tensordict", "missing: not a VERL TransferQueue batch (tensordict, keys, tags)")
    data, keys = payload["tensordict"], payload["keys"]
    if not keys or any(not isinstance(key, str) or key.count("_") != 2 for key in keys):
        raise bad_recording(file, "keys", "not VERL's {uid}_{session_id}_{index} trajectory keys")
    fields = {}
    for name in (*TOKEN_FIELDS, "rm_scores", "rollout_log_probs"):
        if name not in data.keys():
            if name == "rollout_log_probs":
                continue
            raise bad_recording(file, name, "missing from the tensordict")
        fields[name] = _rows(data.get(name))
        if len(fields[name]) != len(keys):
            raise bad_recording(file, name, f"has {len(fields[name])} rows for {len(keys)} keys")
    return keys, fields


def _rows(value: Any) -> list[Any]:
    """A field's per-trajectory rows: a jagged nested tensor unbound, a dense one split along the batch."""
    return list(value.unbind()) if getattr(value, "is_nested", False) else list(value)


def _grouped(file: Path, keys: list[str], fields: dict[str, list[Any]]) -> RecordedStep:
    """The trajectories grouped by uid in order of first appearance, as `RolloutTqSkip.load_dump_data` groups them."""
    order: dict[str, list[int]] = {}
    for row, key in enumerate(keys):
        order.setdefault(key.split("_")[0], []).append(row)
    samples = [_sample(file, fields, row, group) for group, rows in enumerate(order.values()) for row in rows]
    return RecordedStep(samples=tuple(samples))


def _sample(file: Path, fields: dict[str, list[Any]], row: int, group: int) -> RecordedSample:
    response = int_sequence(file, f"responses[{row}]", fields["responses"][row])
    log_probs = fields.get("rollout_log_probs")
    return RecordedSample(
        prompt_ids=int_sequence(file, f"prompts[{row}]", fields["prompts"][row]),
        response_ids=response,
        loss_mask=loss_mask_of(file, f"response_mask[{row}]", fields["response_mask"][row], len(response)),
        reward=reward_of(file, f"rm_scores[{row}]", _scores(file, row, fields["rm_scores"][row], len(response))),
        group=group,
        rollout_log_probs=(
            None
            if log_probs is None
            else float_sequence(file, f"rollout_log_probs[{row}]", log_probs[row], len(response))
        ),
    )


def _scores(file: Path, row: int, scores: Any, length: int) -> float:
    """The scalar reward of token-level scores: their sum (VERL's own reading of `rm_scores`)."""
    if tuple(scores.shape) != (length,):
        raise bad_recording(file, f"rm_scores[{row}]", f"has shape {tuple(scores.shape)} for {length} response tokens")
    return scores.sum()


def _keys(step: int, recorded: RecordedStep) -> list[str]:
    """`{uid}_{session_id}_0` per sample: a uid per group (no underscore in it), the session its place there."""
    sessions: dict[int, int] = {}
    keys = []
    for sample in recorded.samples:
        sessions[sample.group] = sessions.get(sample.group, -1) + 1
        keys.append(f"step{step}group{sample.group}_{sessions[sample.group]}_0")
    return keys


def _tags(step: int, recorded: RecordedStep) -> list[dict[str, Any]]:
    """The tags VERL's agent loop puts beside each trajectory (the loader resets the step ones on replay)."""
    return [
        {
            "status": "success",
            "prompt_len": len(sample.prompt_ids),
            "response_len": len(sample.response_ids),
            "seq_len": len(sample.prompt_ids) + len(sample.response_ids),
            "global_steps": step,
            "min_global_steps": step,
            "max_global_steps": step,
        }
        for sample in recorded.samples
    ]


def _tensordict(path: Path, step: int, recorded: RecordedStep, keys: list[str]) -> Any:
    """The trajectories as VERL's agent loop hands them to TransferQueue (single-turn text): token fields jagged,
    the reward on the last response token, the rest as non-tensor rows."""
    torch = require("torch", "recording")
    tensordict = require("tensordict", "recording")
    logged = {sample.rollout_log_probs is not None for sample in recorded.samples}
    if len(logged) > 1:
        raise bad_recording(path / str(step), "rollout_log_probs", "present on some samples of the step, not all")
    rows: dict[str, list[Any]] = {}
    for position, sample in enumerate(recorded.samples):
        if not sample.response_ids:
            where = f"step {step} sample {position}"
            raise bad_recording(path / str(step), where, "empty response: VERL puts the reward on its last token")
        for name, value in _fields(torch, sample).items():
            rows.setdefault(name, []).append(value)

    def column(values: list[Any]) -> Any:
        if isinstance(values[0], torch.Tensor):
            return torch.nested.as_nested_tensor(values, layout=torch.jagged)
        return tensordict.NonTensorStack(*values)

    columns = {name: column(values) for name, values in rows.items()}
    columns["uid"] = tensordict.NonTensorStack(*[key.split("_")[0] for key in keys])
    return tensordict.TensorDict(columns, batch_size=[len(keys)])


def _fields(torch: Any, sample: RecordedSample) -> dict[str, Any]:
    prompts = torch.tensor(sample.prompt_ids, dtype=torch.int64)
    responses = torch.tensor(sample.response_ids, dtype=torch.int64)
    input_ids = torch.cat([prompts, responses])
    mask = torch.tensor(sample.loss_mask, dtype=torch.int64)
    scores = torch.zeros(len(sample.response_ids), dtype=torch.float32)
    scores[-1] = sample.reward
    fields = {
        "prompts": prompts,
        "responses": responses,
        "response_mask": mask,
        "loss_mask": mask.clone(),
        "input_ids": input_ids,
        "position_ids": torch.arange(len(input_ids), dtype=torch.int64),
        "rm_scores": scores,
        "num_turns": 2,
        "extra_fields": {},
    }
    if sample.rollout_log_probs is not None:
        fields["rollout_log_probs"] = torch.tensor(sample.rollout_log_probs, dtype=torch.float32)
    return fields


CODEC = VerlRecordingCodec()
