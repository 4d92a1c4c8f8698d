"""Run inside a Miles checkout (its CPU-CI environment): one Miles process's metric logging, through Miles's own code.

    python miles_tracking_worker.py REQUEST.json

REQUEST: {"role": "train" | "rollout_manager", "rollouts": [{"rollout_id", "timers": {...}, "seq_lens": [...],
"metrics": {...}}, ...]}. The process configures Miles's logger with its process name (its console is the stdout
sink), initialises Miles's tracking (the benchmark backend is on when BENCH_TRACKING_DIR is set), and per rollout:
the train rank sets Miles's Timer and calls Miles's `log_perf_data_raw` (the `perf N:` line and the tracking call);
the rollout manager logs its perf dict the way `miles/ray/rollout/metrics.py` does (the same message, then
`tracking.log` with step key `rollout/step`).
"""

from __future__ import annotations

import json
import logging
import sys
from argparse import Namespace


def main(request_path: str) -> None:
    from miles.utils.logging_utils import configure_logger_raw
    from miles.utils.timer import Timer
    from miles.utils.tracking_utils import tracking
    from miles.utils.train_metric_utils import log_perf_data_raw

    request = json.loads(open(request_path, encoding="utf-8").read())
    role = request["role"]
    configure_logger_raw("actor_cell0_rank0" if role == "train" else role)
    logger = logging.getLogger("miles.ray.rollout.metrics")
    args = Namespace(use_bench_tracking=True, wandb_always_use_train_step=False, mfu_peak_tflops=989.0)
    if role == "train":
        tracking.init_tracking(args, primary=False)
    else:
        tracking.init_tracking(args, primary=False, router_addr="http://127.0.0.1:30000")
    for rollout in request["rollouts"]:
        rollout_id = rollout["rollout_id"]
        if role == "train":
            timer = Timer()
            for name, seconds in rollout["timers"].items():
                timer.add(name, seconds)
            timer.seq_lens = rollout["seq_lens"]
            log_perf_data_raw(
                rollout_id=rollout_id,
                args=args,
                is_primary_rank=True,
                compute_total_fwd_flops=lambda seq_lens: 2.0e9 * sum(seq_lens),
            )
        else:
            log_dict = dict(rollout["metrics"])
            logger.info(f"perf {rollout_id}: {log_dict}")
            log_dict["rollout/step"] = rollout_id
            tracking.log(args, log_dict, step_key="rollout/step")
    tracking.finish_tracking()


if __name__ == "__main__":
    main(sys.argv[1])
