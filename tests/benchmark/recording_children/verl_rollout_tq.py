"""VERL 0.9.1's own rollout dump and replay (`skip.rollout_tq`) on CPU, against a real TransferQueue on a local Ray.

    verl_rollout_tq.py JOB.json OUT.json

JOB: {"dump": {"dump_dir", "n", "batch_size", "steps": [steps of trajectories]}, "load": {"dump_dir", "n",
"batch_size", "steps": int}}. The trajectories of "dump" go into TransferQueue as VERL's agent loop puts them
(AgentLoopOutput.as_dict and its postprocess fields) and `RolloutTqSkip.prepare_data` saves each step (the trainer's
phase one, as SkipManager calls it); then steps 1..N of "load" are injected by `maybe_load_and_inject` (phase two)
under fresh prompt uids and read back from TransferQueue. OUT: {"dumped_dir", "replay_dir" (VERL's own project dump
folders of the two configs), "replayed": the trajectories per step, in the injected order}.
"""

import json
import sys

import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput
from verl.utils.skip import SkipManager
from verl.utils.tensordict_utils import list_of_dict_to_tensordict

EXPERIMENT, PROJECT, MAX_PROMPT, MAX_RESPONSE = "recording", "bench", 16, 16


def config(job: dict):
    """A v1 sync trainer's config as far as `skip.rollout_tq` reads it."""
    skip = {"enable": True, "dump_dir": job["dump_dir"], "steps": list(range(1, 100)), "action": "cache"}
    return OmegaConf.create(
        {
            "skip": {"rollout_tq": skip},
            "trainer": {
                "experiment_name": EXPERIMENT,
                "project_name": PROJECT,
                "v1": {"trainer_mode": "sync", "sync": {"parameter_sync_step": 1}},
            },
            "actor_rollout_ref": {"rollout": {"n": job["n"]}},
            "data": {
                "train_batch_size": job["batch_size"],
                "max_prompt_length": MAX_PROMPT,
                "max_response_length": MAX_RESPONSE,
            },
        }
    )


def generate(step: int, trajectories: list[dict]) -> tq.KVBatchMeta:
    """What the agent loop puts into TransferQueue for one finished step (single-turn text)."""
    keys, fields, tags = [], [], []
    for t in trajectories:
        output = AgentLoopOutput(
            prompt_ids=t["prompt_ids"],
            response_ids=t["response_ids"],
            response_mask=t["response_mask"],
            response_logprobs=t.get("log_probs"),
            reward_score=t["reward"],
            num_turns=2,
            metrics=AgentLoopMetrics(),
        )
        field = output.as_dict()
        field["uid"] = t["uid"]
        field["loss_mask"] = field["response_mask"]
        field["input_ids"] = torch.cat([field["prompts"], field["responses"]])
        field["position_ids"] = torch.arange(len(field["input_ids"]))
        keys.append(f"{t['uid']}_{t['session']}_0")
        fields.append(field)
        length = len(t["prompt_ids"]) + len(t["response_ids"])
        tags.append(
            {
                "status": "success",
                "prompt_len": len(t["prompt_ids"]),
                "response_len": len(t["response_ids"]),
                "seq_len": length,
                "global_steps": step,
                "min_global_steps": step,
                "max_global_steps": step,
            }
        )
    tq.kv_batch_put(keys=keys, fields=list_of_dict_to_tensordict(fields), tags=tags, partition_id="train")
    return tq.KVBatchMeta(partition_id="train", keys=keys, tags=tags)


def replay(skip, step: int, prompts: int) -> list[dict]:
    uids = [f"replay{step}x{i}" for i in range(prompts)]
    assert skip.maybe_load_and_inject(step, uids), f"no cached step {step}"
    keys = [f"{uid}_{session}_0" for uid in uids for session in range(skip.n)]
    data = tq.kv_batch_get(keys=keys, partition_id="train")
    rows = {name: list(data[name].unbind()) for name in ("prompts", "responses", "response_mask", "rm_scores")}
    log_probs = list(data["rollout_log_probs"].unbind()) if "rollout_log_probs" in data.keys() else None
    return [
        {
            "key": key,
            "uid": str(data["uid"][i]),
            "prompt_ids": rows["prompts"][i].tolist(),
            "response_ids": rows["responses"][i].tolist(),
            "response_mask": rows["response_mask"][i].tolist(),
            "rm_scores": rows["rm_scores"][i].tolist(),
            "log_probs": None if log_probs is None else log_probs[i].tolist(),
        }
        for i, key in enumerate(keys)
    ]


def main(job_path: str, out_path: str) -> None:
    with open(job_path) as f:
        job = json.load(f)
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)  # TransferQueue's actors ask for CPUs
    tq.init()
    try:
        SkipManager.init(config(job["dump"]))
        skip = SkipManager.skip_instances["rollout_tq"]
        for step, trajectories in enumerate(job["dump"]["steps"], start=1):
            batch = generate(step, trajectories)
            assert skip.should_save(step, batch.partition_id), f"step {step} is cached already"
            skip.prepare_data(step=step, batch=batch, global_steps=step)
        out = {"dumped_dir": str(skip._get_project_dump_dir())}
        SkipManager.init(config(job["load"]))
        skip = SkipManager.skip_instances["rollout_tq"]
        out["replay_dir"] = str(skip._get_project_dump_dir())
        out["replayed"] = [
            replay(skip, step, job["load"]["batch_size"]) for step in range(1, job["load"]["steps"] + 1)
        ]
    finally:
        tq.close()
        ray.shutdown()
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
