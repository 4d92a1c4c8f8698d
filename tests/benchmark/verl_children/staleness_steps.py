"""TEST CHILD, run in the VERL check interpreter with the wheel on PYTHONPATH: VERL's V1 trainer computes a step's
metrics (`PPOTrainer._compute_metrics`, which holds the off-policy staleness arithmetic) from trajectories stored in
a real TransferQueue on a private local Ray, tagged with the weight versions they were generated with; the
FileLogger writes the steps (`VERL_FILE_LOGGER_PATH`). argv: JSON {step: [[min_version, max_version], ...]}."""

import json
import sys
from types import SimpleNamespace

import numpy as np
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.trainer.ppo.metric_utils import RolloutMoELoadBalanceMetricsAccumulator
from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync
from verl.utils.tracking import FileLogger

FIELDS = ("advantages", "returns", "values", "rm_scores", "token_level_rewards")


def _put(step: int, versions: list[list[int]]):
    """One trajectory per (min, max) pair, as the agent loop stores them: ragged prompt and response tokens."""
    keys = [f"s{step}-t{i}" for i in range(len(versions))]
    n = len(versions)
    prompts = [torch.ones(4 + i, dtype=torch.long) for i in range(n)]
    responses = [torch.ones(8 + 2 * i, dtype=torch.long) for i in range(n)]
    ragged = {"prompts": prompts, "responses": responses, "response_mask": [torch.ones(len(r)) for r in responses]}
    ragged |= {name: [torch.zeros(len(r)) for r in responses] for name in FIELDS}
    columns = {name: torch.nested.as_nested_tensor(values, layout=torch.jagged) for name, values in ragged.items()}
    fields = TensorDict({**columns, "num_turns": torch.ones(n, dtype=torch.long)}, batch_size=[n])
    tags = [{"min_global_steps": lo, "max_global_steps": hi} for lo, hi in versions]
    return tq.kv_batch_put(keys=keys, partition_id="train", fields=fields, tags=tags)


def _trainer() -> PPOTrainerSeparateAsync:
    """The disaggregated cells' trainer without its __init__ (Ray pools, models): the metric method reads only these
    config keys, the critic switch, the MoE accumulator and the GPU counts."""
    trainer = object.__new__(PPOTrainerSeparateAsync)
    rollout = {"n_gpus_per_node": 4, "nnodes": 1}
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout, "model": {}}})
    trainer.use_critic = False
    trainer._rollout_moe_lb_metrics_accumulator = RolloutMoELoadBalanceMetricsAccumulator()
    trainer.resource_pool_manager = SimpleNamespace(get_n_gpus=lambda: 4)
    return trainer


def main(plan: dict[str, list[list[int]]]) -> None:
    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    tq.init()
    trainer, logger = _trainer(), FileLogger("bench", "verl-child")
    for step, versions in sorted((int(s), v) for s, v in plan.items()):
        batch = _put(step, versions)
        metrics: dict = {}
        timing = {"step": 1.0, "gen": 0.1, "update_actor": 0.5}
        trainer._compute_metrics(batch, metrics, timing, global_steps=step, epoch=0)
        logger.log(data={k: (v.item() if isinstance(v, np.generic) else v) for k, v in metrics.items()}, step=step)
    logger.finish()
    tq.close()
    ray.shutdown()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
