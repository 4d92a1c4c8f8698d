"""TEST STAND-IN for `python3 -m verl.trainer.main_ppo`: parses its overrides with Hydra's own parser, as VERL does.

- Every override goes through hydra's OverridesParser and its value through OmegaConf (with the oc.env resolver), so
  a value that Hydra would split, reinterpret or interpolate shows up changed in the record.
- Writes `{key: resolved value}` of the path-bearing overrides to $STANDIN_VERL_RECORD (appending one JSON line),
  then writes VERL's FileLogger sink through standin_trainer.py for trainer.total_training_steps steps.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

RECORDED = ("data.train_files", "data.val_files", "hydra.run.dir", "actor_rollout_ref.model.path")


def main() -> None:
    overrides = OverridesParser.create().parse_overrides(sys.argv[1:])
    values = {o.key_or_group: o.value() for o in overrides}
    resolved = OmegaConf.to_container(
        OmegaConf.create({k.replace(".", "__"): values[k] for k in RECORDED}), resolve=True
    )
    record = {key: resolved[key.replace(".", "__")] for key in RECORDED}
    with open(os.environ["STANDIN_VERL_RECORD"], "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
    trainer = Path(__file__).resolve().parents[3] / "standin_trainer.py"
    steps = str(values["trainer.total_training_steps"])
    sink = os.environ["VERL_FILE_LOGGER_PATH"]
    sys.argv = [str(trainer), "--format", "verl-file-logger", "--sink", sink, "--steps", steps, "--step-s", "0.01"]
    sys.argv += ["--startup-s", "0"]
    runpy.run_path(str(trainer), run_name="__main__")


if __name__ == "__main__":
    main()
