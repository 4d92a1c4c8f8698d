"""TEST STAND-IN for Miles's train.py: records the argv it received, then writes Miles's event-log sink.

Appends {"argv": [...]} to $STANDIN_MILES_RECORD and runs standin_trainer.py with --save-debug-event-data as the sink
and --num-rollout as the number of steps.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path


def main() -> None:
    argv = sys.argv[1:]
    with open(os.environ["STANDIN_MILES_RECORD"], "a", encoding="utf-8") as f:
        f.write(json.dumps({"argv": argv}) + "\n")
    sink, steps = argv[argv.index("--save-debug-event-data") + 1], argv[argv.index("--num-rollout") + 1]
    trainer = Path(__file__).resolve().with_name("standin_trainer.py")
    sys.argv = [str(trainer), "--format", "miles-event-log", "--sink", sink, "--steps", steps, "--step-s", "0.01"]
    sys.argv += ["--startup-s", "0"]
    runpy.run_path(str(trainer), run_name="__main__")


if __name__ == "__main__":
    main()
