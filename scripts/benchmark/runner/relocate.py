"""A plan executed elsewhere than where it was planned: another run folder, another checkout, another machine.

plan.json records its `origin`: the run folder it was planned for (where its converted data and other run-local
files go) and the harness folder (scripts/benchmark) of the checkout that planned it (its run.py and model configs).
`relocated(plan, run_dir)` rewrites every path under either into the same path under this run folder and this
checkout's harness, in the words the runner reads (launch and prepare argv, env values, `creates`, `model_config`),
so a plan made on a laptop runs on a GPU node from a copy of its folder. A path only matches as a whole path prefix
(`/a/D` moves `/a/D/data/x` and `data.train_files=/a/D/x`, never `/a/D2` or `/x/a/D`), written plainly or as it
reads inside a single-quoted override value (with its escapes).

Caveats:
- Plans written before plans recorded their origin are executed as they are.
- The cell scripts (cells/<id>.sh) stay as planned: they are the review copy for the folder they were written in.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from scripts.benchmark.contracts.plan import move_paths, origin_moves, plan_origin

_ARGV_KEYS = ("launch_argv", "argv", "ray_head_argv")


def relocated(plan: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """The plan with its origin's paths moved to `run_dir` and this checkout (a copy; the same plan when it has no
    origin or already is here)."""
    origin = plan.get("origin")
    if not isinstance(origin, dict):
        return plan
    here = plan_origin(run_dir)
    moves = origin_moves(origin, here)
    moved = copy.deepcopy(plan)
    moved["origin"] = here
    if not moves:
        return moved
    for entry in moved.get("cells", []) + moved.get("prepare", []):
        for key in (*_ARGV_KEYS, "creates", "model_config"):
            if isinstance(entry.get(key), list):
                entry[key] = [move_paths(word, moves) for word in entry[key]]
            elif isinstance(entry.get(key), str):
                entry[key] = move_paths(entry[key], moves)
        if isinstance(entry.get("env"), dict):
            entry["env"] = {name: move_paths(value, moves) for name, value in entry["env"].items()}
    return moved
