"""Measured launch costs from the history store, for a plan's cost (plan/cost.py, `run.py --cost-store URL`).

Per planned cell, the newest `MEASURED_RUNS` recorded runs of the same cell of the same spec (preset, spec hash, cell
id; any node, trusted or not: a slow night is a cost too): their launch wall time and start-up (report.json's
`launch`, recorded as `launch.wall_s` and `launch.startup_s`). Typical is their median, upper their largest; the
step time is the wall time less the start-up, per planned step. A cell without such runs has no entry (the model
estimates it).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from scripts.benchmark.history.report_input import LAUNCH_PREFIX
from scripts.benchmark.history.store import HistoryStore

MEASURED_RUNS = 5


def measured_costs(store_url: str, plan: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Cell id -> {"step_s": (typical, upper), "startup_s": (typical, upper), "runs": n} measured in the store."""
    out: dict[str, dict[str, Any]] = {}
    with HistoryStore(store_url, create=False) as store:
        for cell in plan["cells"]:
            ids = store.latest_cell_runs(
                preset=plan.get("preset"), spec_hash=plan["spec_hash"], cell_id=cell["id"], limit=MEASURED_RUNS
            )
            walls = store.values(ids, LAUNCH_PREFIX + "wall_s")
            startups = store.values(ids, LAUNCH_PREFIX + "startup_s")
            pairs = [(walls[i], startups[i]) for i in ids if walls.get(i) is not None and startups.get(i) is not None]
            if not pairs:
                continue
            steps = [(wall - startup) / max(cell["num_steps"], 1) for wall, startup in pairs]
            starts = [startup for _, startup in pairs]
            out[cell["id"]] = {
                "step_s": (statistics.median(steps), max(steps)),
                "startup_s": (statistics.median(starts), max(starts)),
                "runs": len(pairs),
            }
    return out
