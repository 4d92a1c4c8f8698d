"""What the two frameworks must run alike beyond hyperparameters: the disaggregated loop and the SGLang version
each one speaks (part of BenchmarkSpec: placement.async_loop, rollout.sglang_versions).

- `AsyncLoopSpec`: the disaggregated layout is one-step off-policy on both sides (generation of step N+1 overlaps
  training of N). Miles: train_async.py with --update-weights-interval = weight_sync_every_steps; VERL:
  separate_async with num_warmup_batches = max_policy_lag, max_off_policy_threshold = max_policy_lag + 1, strategy
  wait. Only values both frameworks can express alike are accepted.
- `SglangVersions`: the launches spell SGLang's own keys for these versions; preflight compares them with the
  SGLang installed in each framework's interpreter.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

from scripts.benchmark.frameworks.sglang_version import version_tuple


class AsyncLoopSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_policy_lag: Literal[1] = 1
    """Weight versions between the policy that generated a batch and the one that trains on it, at most."""
    weight_sync_every_steps: Literal[1] = 1
    """Rollout weights are updated after every RL step (Miles --update-weights-interval; VERL once per step)."""


class SglangVersions(BaseModel):
    """VERL 0.9.1 pins sglang==0.5.12; Miles's image builds sglang-miles on the v0.5.16 image."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    miles: str = "0.5.16"
    verl: str = "0.5.12"

    @field_validator("miles", "verl")
    @classmethod
    def _is_version(cls, value: str) -> str:
        version_tuple(value)
        return value
