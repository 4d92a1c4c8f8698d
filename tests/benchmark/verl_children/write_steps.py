"""TEST CHILD, run in the VERL check interpreter with the wheel on PYTHONPATH: three v1-style steps written by VERL's
own code: `marked_timer` (the timers of trainer_base's step), `compute_data_metrics`, `compute_timing_metrics`,
`compute_throughout_metrics` on a real DataProto, and the FileLogger (`VERL_FILE_LOGGER_PATH`)."""

import sys
import time

import numpy as np
import torch
from verl import DataProto
from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
from verl.utils.profiler.performance import marked_timer
from verl.utils.tracking import FileLogger

SAMPLES, PROMPT, RESPONSE = 8, 16, 32


def batch(step: int) -> DataProto:
    gen = torch.Generator().manual_seed(step)
    response_lens = torch.randint(4, RESPONSE + 1, (SAMPLES,), generator=gen)
    response_mask = (torch.arange(RESPONSE)[None, :] < response_lens[:, None]).float()
    attention = torch.cat([torch.ones(SAMPLES, PROMPT), response_mask], dim=1)
    scores = torch.zeros(SAMPLES, RESPONSE)
    tensors = {
        "prompts": torch.ones(SAMPLES, PROMPT, dtype=torch.long),
        "responses": torch.ones(SAMPLES, RESPONSE, dtype=torch.long),
        "attention_mask": attention,
        "response_mask": response_mask,
        "token_level_scores": scores,
        "token_level_rewards": scores,
        "advantages": scores,
        "returns": scores,
    }
    data = DataProto.from_dict(tensors=tensors)
    data.meta_info["global_token_num"] = attention.sum(-1).int().tolist()
    return data


def main(n_gpus: int) -> None:
    logger = FileLogger("bench", "verl-child")
    for step in range(1, 4):
        timing: dict[str, float] = {}
        with marked_timer("step", timing):
            with marked_timer("gen", timing):  # the trainer's replay_buffer.sample() in trainer_base._step_once
                time.sleep(0.05 * step)
            for name in ("old_log_prob", "adv", "update_actor", "update_weights"):
                with marked_timer(name, timing):
                    time.sleep(0.01)
        data = batch(step)
        metrics = {"training/global_step": step, **compute_data_metrics(data, use_critic=False)}
        metrics.update(compute_timing_metrics(data, timing))
        metrics.update(compute_throughout_metrics(data, timing, n_gpus))
        logger.log(data={k: (v.item() if isinstance(v, np.generic) else v) for k, v in metrics.items()}, step=step)
    logger.finish()


if __name__ == "__main__":
    main(int(sys.argv[1]))
