"""TEST STAND-IN for Miles's train.py: records the argv it received, then prints Miles's stdout metric lines.

Appends {"argv": [...], "cell_dir": $BENCH_CELL_DIR} to $STANDIN_MILES_RECORD and runs standin_trainer.py with
its stdout as the sink (what the harness reads from Miles) and --num-rollout as the number of steps; with
BENCH_TRACKING_DIR set (a Miles with the benchmark tracking backend), the tracking backend's files in that folder,
unless STANDIN_MILES_WITHOUT_TRACKING=1 (a Miles checkout without the patch series: stdout whatever the harness sets).
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
        f.write(json.dumps({"argv": argv, "cell_dir": os.environ.get("BENCH_CELL_DIR")}) + "\n")
    steps = argv[argv.index("--num-rollout") + 1]
    trainer = Path(__file__).resolve().with_name("standin_trainer.py")
    tracking = (
        None if os.environ.get("STANDIN_MILES_WITHOUT_TRACKING") == "1" else os.environ.get("BENCH_TRACKING_DIR")
    )
    sys.argv = [
        str(trainer),
        "--format",
        "miles-tracking" if tracking else "miles-stdout",
        "--sink",
        tracking or "/dev/stdout",
        "--steps",
        steps,
        "--step-s",
        "0.01",
    ]
    sys.argv += ["--startup-s", "0"]
    runpy.run_path(str(trainer), run_name="__main__")


if __name__ == "__main__":
    main()
