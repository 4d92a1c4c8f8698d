"""Run inside a Miles checkout (its CPU-CI environment): the train rank's log.txt lines of whole runs, through
Miles's own logging code, for the learning guard's validation on the frameworks' own writers.

    python miles_learning_log_worker.py REQUEST.json

REQUEST: {"runs": [{"path": LOG, "rollouts": [{"rollout_id", "rollout": {...}, "train_steps": [{"loss": {...},
"grad_norm"}, ...], "perf": {...}}, ...]}, ...]}. The process configures Miles's logger with the train rank's name
(`configure_logger_raw`: its line format), joins a one-process gloo group with Miles's ParallelState over it, and
per rollout calls Miles's `gather_log_data("rollout", ...)` (the `rollout N:` line), `log_train_step` per optimizer
step (the `step N:` lines) and `log_perf_data_raw` (the `perf N:` line). Each run's lines go to its own file (the
root handler's stream is swapped; the format stays Miles's).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
from argparse import Namespace
from pathlib import Path


def _one_process_parallel_state() -> None:
    """Miles's ParallelState over a one-process gloo group: the gather in `gather_log_data` runs for real."""
    import torch.distributed as dist
    from miles.backends.training_utils.parallel import ParallelState, set_parallel_state
    from miles.utils.ft_utils.process_group_utils import GroupInfo

    rendezvous = Path(tempfile.mkdtemp()) / "rendezvous"
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=0, world_size=1)
    world = dist.group.WORLD
    groups = {
        name: GroupInfo(rank=0, size=1, group=world, gloo_group=world)
        for name in ("intra_dp", "intra_dp_cp", "cp", "tp", "pp", "ep", "etp", "indep_dp")
    }
    set_parallel_state(ParallelState(**groups))


def main(request_path: str) -> None:
    from miles.backends.training_utils.log_utils import gather_log_data, log_train_step
    from miles.utils.logging_utils import configure_logger_raw
    from miles.utils.train_metric_utils import log_perf_data_raw

    request = json.loads(Path(request_path).read_text(encoding="utf-8"))
    configure_logger_raw("actor_cell0_rank0")
    _one_process_parallel_state()
    args = Namespace(wandb_always_use_train_step=False)
    handler = logging.getLogger().handlers[0]
    for run in request["runs"]:
        with open(run["path"], "w", encoding="utf-8") as log:
            handler.setStream(log)
            for rollout in run["rollouts"]:
                rollout_id, steps = rollout["rollout_id"], rollout["train_steps"]
                gather_log_data("rollout", args, rollout_id, rollout["rollout"])
                for step_id, step in enumerate(steps):
                    log_train_step(
                        args, step["loss"], step["grad_norm"], rollout_id, step_id, len(steps), should_log=True
                    )
                log_perf_data_raw(rollout_id, args, True, None, extra_metrics=rollout["perf"])
            handler.setStream(sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
