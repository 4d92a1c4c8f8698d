"""The shared spellings of the parity table's values: one sentence per meaning, and the helpers that spell them.

Each framework's `parity_knobs` module reads its own launch back into these values, so a row compares like with
like (on/off switches, recompute settings, KL estimator names, offload states, loop shapes); frameworks/knobs.py
declares which spellings each knob may take, and the plan refuses any other.
"""

from __future__ import annotations

NEUTRAL_DUAL_CLIP_MIN = 1.0e8
"""A dual-clip bound so large that it never clips: how 'dual clip off' reads on a side that always applies one."""
MIB = 1024 * 1024

NOT_KL = "n/a (no KL loss)"
DENSE = "n/a (dense)"
MODEL_DTYPE = "model dtype (bf16)"
RESIDENT = "resident"
SYNCHRONOUS = "synchronous"
ONE_STEP_OFF_POLICY = "one-step off-policy: rollout N+1 generates while step N trains"
SYNC_SHAPE = "one batch generated, then trained; nothing in flight at an update"
NOTHING_IN_FLIGHT = "none: no request in flight at a weight update"
FILE_BATCHES = "file batches in order"
RELEASED_WITHOUT_COPY = "released after generation; rollout weights dropped, no CPU copy"
RELEASED_WITH_COPY = "released after generation; rollout weights copied to CPU at the release and back at the wake"
KV_RELEASED = "KV pool released and re-allocated at every weight update"
NO_CAP = "not set: the decode graphs' batch cap by the rule of sglang {}"
"""The decode-graph cap a launch leaves to its SGLang release (`{}`: the release). In the sentences below, `{}`
stands for a value read from the launch, as in the knobs' spellings (frameworks/knobs.py)."""
DRAIN_SHAPE = "one batch in flight, drained to the last sample; rollout GPUs idle through the tail and the update"
SUBMIT_AHEAD_SHAPE = (
    "next step's prompts submitted before waiting; up to 2 batches on the rollout pool, requests in flight through "
    "the update"
)
FULLY_ASYNC_SHAPE = (
    "persistent producer: up to {} batch of prompt groups generating, refilled one group at a time, and up to {} "
    "batches of finished groups buffered ({} generated ahead of training); requests in flight through the update; at "
    "each drain, groups whose oldest weights are further behind than the bound dropped, not regenerated "
    "(--async-unused-samples-handler {})"
)
FINISH_VERSION = (
    "{} by the weight version a sample finished under (SGLang stamps the engine's version when a request completes, "
    "so a sample retracted across an update holds tokens of the version before: one more)"
)
ABORTED_AND_REPREFILLED = "in-flight requests aborted at each weight update and re-prefilled with the new weights"
PAUSED_IN_FLIGHT = {
    "retract": "in-flight requests retracted to SGLang's waiting queue at each weight update and re-prefilled with "
    "the new weights",
    "in_place": "in-flight requests frozen at each weight update and resumed on their old KV cache",
    "abort": "in-flight requests aborted at each weight update",
}
"""What a pause of generation at a weight update does to the requests in flight, by the pause mode."""
BY_COMPLETION_OVER = "by completion over {} submitted batches (first step: fastest prompts); {} batch extra"
BY_COMPLETION_ALWAYS = (
    "by completion at every step: the prompt groups that finish first (the first step the fastest prompts), never "
    "the file's batches"
)


def on_off(flag: bool) -> str:
    return "on" if flag else "off"


def recompute(granularity, method, layers) -> str:
    return "none" if granularity in (None, "None") else f"{granularity}/{method}/{layers}"


def kl_type(value: str | None) -> str | None:
    return {"kl": "k1", "mse": "k2"}.get(value, value)


def offload_state(param: bool, optimizer: bool) -> str:
    if param and optimizer:
        return "params+optimizer during rollout"
    return "params only during rollout" if param else ("optimizer only during rollout" if optimizer else RESIDENT)
