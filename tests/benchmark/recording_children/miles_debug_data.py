"""Miles's own rollout dump code, run where Miles is importable (its CPU-CI environment, its tree on PYTHONPATH).

    miles_debug_data.py save SPEC.json TEMPLATE   each step of SPEC (a list of lists of Sample fields) saved by
                                                  `save_debug_rollout_data` as rollout 0, 1, ...
    miles_debug_data.py load TEMPLATE STEPS       each rollout loaded by `load_debug_rollout_data`, checked by
                                                  `Sample.validate`, printed as JSON (steps of sample fields)
"""

import json
import sys
from types import SimpleNamespace

from miles.ray.rollout.debug_data import load_debug_rollout_data, save_debug_rollout_data
from miles.utils.types import Sample

FIELDS = ("group_index", "index", "tokens", "response_length", "loss_mask", "reward", "rollout_log_probs")


def save(spec_path: str, template: str) -> None:
    args = SimpleNamespace(save_debug_rollout_data=template, save_debug_trajectory_data=None)
    with open(spec_path) as f:
        steps = json.load(f)
    for rollout_id, step in enumerate(steps):
        samples = [Sample(**fields, status=Sample.Status.COMPLETED) for fields in step]
        save_debug_rollout_data(args, samples, rollout_id=rollout_id, evaluation=False)


def load(template: str, steps: int) -> None:
    args = SimpleNamespace(load_debug_rollout_data=template, load_debug_rollout_data_subsample=None)
    loaded = []
    for rollout_id in range(steps):
        samples, _metadata = load_debug_rollout_data(args, rollout_id=rollout_id)
        for sample in samples:
            sample.validate()
        loaded.append([{name: getattr(sample, name) for name in FIELDS} for sample in samples])
    json.dump(loaded, sys.stdout)


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(sys.argv[2], sys.argv[3])
    else:
        load(sys.argv[2], int(sys.argv[3]))
