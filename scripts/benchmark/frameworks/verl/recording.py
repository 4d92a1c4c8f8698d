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

from pathlib import Path

from scripts.benchmark.frameworks.recorded import Recording


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
        raise NotImplementedError

    def write(self, recording: Recording, path: Path) -> None:
        """The recording as a new project dump folder `path` VERL's `RolloutTqSkip` injects from."""
        raise NotImplementedError


CODEC = VerlRecordingCodec()
