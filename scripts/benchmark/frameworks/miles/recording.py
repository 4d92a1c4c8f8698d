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

from scripts.benchmark.frameworks.recorded import Recording

FILE_TEMPLATE = "{rollout_id}.pt"


def debug_data_template(folder: Path) -> str:
    """What `--save-debug-rollout-data` / `--load-debug-rollout-data` take for a recording kept in `folder`."""
    return str(folder / FILE_TEMPLATE)


class MilesRecordingCodec:
    def read(self, path: Path) -> Recording:
        """The recording in the folder `path` (`0.pt`, `1.pt`, ... with no rollout missing)."""
        raise NotImplementedError

    def write(self, recording: Recording, path: Path) -> None:
        """The recording as a new folder `path` of `{rollout_id}.pt` files Miles's loader reads."""
        raise NotImplementedError


CODEC = MilesRecordingCodec()
