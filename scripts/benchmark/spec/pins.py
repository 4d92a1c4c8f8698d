"""What the two frameworks must run alike beyond hyperparameters: the disaggregated loop and the SGLang version
each one speaks (part of BenchmarkSpec: placement.async_loop, rollout.sglang_versions).

- `AsyncLoopSpec`: the disaggregated layout is one-step off-policy on both sides (generation of step N+1 overlaps
  training of N). Miles: train_async.py with --update-weights-interval = weight_sync_every_steps; VERL:
  separate_async with num_warmup_batches = max_policy_lag, max_off_policy_threshold = max_policy_lag + 1, strategy
  wait. Only values both frameworks can express alike are accepted. `schedule` picks the candidate's loop where it
  has two: `drain` (Miles train_async.py: the update waits for the batch in flight, nothing generates through it)
  or `continuous` (Miles train_async.py --fully-async --pause-generation-mode retract --max-weight-staleness
  max_policy_lag - 1, its buffer counting from the engines' version one update before training: a persistent
  producer, requests retracted and resumed through the update, as VERL's separate_async keeps them in flight).
  VERL has the one loop, separate_async, for both.
- `SglangVersions`: per framework adapter name, the SGLang version its launch spells SGLang's own keys for;
  preflight compares it with the SGLang installed in that framework's interpreter.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Strict
from pydantic_core import PydanticCustomError


def version_tuple(version: str) -> tuple[int, ...]:
    """Leading numeric release parts ("0.5.16rc1" -> (0, 5, 16)); a version without any is refused."""
    match = re.match(r"\d+(?:\.\d+)*", version.strip().lstrip("v"))
    if match is None:
        raise ValueError(f"{version!r} is not a version number")
    return tuple(int(part) for part in match.group(0).split("."))


class AsyncLoopSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_policy_lag: Literal[1] = 1
    """Weight versions between the policy that generated a batch and the one that trains on it, at most."""
    weight_sync_every_steps: Literal[1] = 1
    """Rollout weights are updated after every RL step (Miles --update-weights-interval; VERL once per step)."""
    schedule: Literal["drain", "continuous"] = "drain"
    """drain: the weight update waits for the batch in flight (no request generates through it); continuous: a
    persistent producer keeps requests in flight through the update, groups older than max_policy_lag not trained."""


def _not_a_bool(value: Any) -> Any:
    """YAML 1.1 reads yes/no/on/off as booleans, which pydantic's lax mode would turn into 1/0."""
    if isinstance(value, bool):
        raise PydanticCustomError(
            "boolean_number",
            "must be a number, got the boolean {value} (YAML reads yes/no/on/off as booleans)",
            {"value": repr(value)},
        )
    return value


Number = Annotated[float, BeforeValidator(_not_a_bool)]
"""A float field of the spec: an int is accepted, a boolean is refused."""
Count = Annotated[int, BeforeValidator(_not_a_bool), Strict()]
"""An int field of the spec: a boolean, a float and a numeric string are refused."""


DEFAULT_SGLANG_VERSIONS: dict[str, str] = {"miles": "0.5.16", "verl": "0.5.12"}
"""Data, keyed by framework adapter name: VERL 0.9.1 pins sglang==0.5.12; Miles's image builds sglang-miles on the
v0.5.16 image. A framework absent here speaks the SGLang its adapter names."""


def _checked_versions(value: dict[str, str]) -> dict[str, str]:
    for name, version in value.items():
        try:
            version_tuple(version)
        except ValueError as exc:
            raise ValueError(f"sglang_versions.{name}: {exc}") from None
    return value


SglangVersions = Annotated[dict[str, str], AfterValidator(_checked_versions)]
"""The SGLang version each framework's launch spells its keys for, by adapter name."""
