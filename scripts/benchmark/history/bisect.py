"""Which commit made a benchmark slower: a bisect over a range of commits, the paired check (history/pair_check.py)
as its judge, within a budget of node time. No git and no process here: `run_bisect` is given a `probe` callable (the
command runs a paired run of two checkouts; the validation draws generated launches), so both drive one rule.

The range is commits[0] (the good end, fast) .. commits[-1] (the bad end, slow), oldest first. A probe is one paired
run of a head commit inside the range against the current good end (the base), in rounds of one launch a side until
the check decides, at most `rounds` rounds within the probe's budget:
- REGRESSED: the slowdown is at or before the head: the head becomes the bad end;
- NO_DIFFERENCE or IMPROVED: it is after the head: the head becomes the good end;
- INCONCLUSIVE or COULD_NOT_JUDGE: the same head again, with twice the rounds, while the budget lasts (a new run: each
  run spends its own error, so a rerun never pools launches judged before);
- UNTESTABLE (the head's launches did not run: a broken commit): the head is skipped, as `git bisect skip` does.
The head is the testable commit nearest the middle. The bad end itself is probed only when one commit is left and no
probe has seen the slowdown yet: a commit is named only after a probe saw it slower than a good end, so a slowdown
the probe's workload cannot see ends as "not reproduced", never as the last commit of the range.

Outcomes: `named` (one commit; decided: every step of the range was a decided verdict), `not-reproduced` (the bad
end is not slower than the good end next to it), `stopped` (the budget ended first: the range left and the verdicts
so far), `untestable` (only commits that could not run are left between the ends).

Budget: `ProbeCost` is one round (a launch a side) as the runner's budget counts it (plan/cost.py's budget basis)
and as it typically lasts. Finishing a range of n commits after the good end takes ceil(log2 n) probes, one more
while no probe has seen the slowdown; `budget_refusal` refuses a range whose probes do not fit at the check's
minimum rounds, saying what would fit. Each probe gets what is left less the minimum of the probes still needed, so
early probes may run more rounds and reruns spend the slack, and no probe starts that does not fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from scripts.benchmark.history.pair_check import MIN_REPEATS

DECIDED_SLOWER = frozenset({"REGRESSED"})
DECIDED_NOT_SLOWER = frozenset({"NO_DIFFERENCE", "IMPROVED"})
UNDECIDED = frozenset({"INCONCLUSIVE", "COULD_NOT_JUDGE"})
UNTESTABLE = "UNTESTABLE"
DECISIONS = DECIDED_SLOWER | DECIDED_NOT_SLOWER | UNDECIDED | {UNTESTABLE}


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    """One paired run of `head` against `base` (indices into the range), as the bisect reads it."""

    head: int
    base: int
    decision: str
    rounds: int
    """Rounds run (launches a side)."""
    max_rounds: int
    seconds: float
    """Node time the probe took (what the budget is charged)."""
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    run_dir: str | None = None
    note: str = ""


@dataclass(kw_only=True)
class BisectState:
    """The range, where its ends are now, and every probe so far (kept in the command's bisect.json)."""

    commits: list[str]
    good: int = 0
    bad: int = -1
    probes: list[ProbeResult] = field(default_factory=list)
    untestable: list[int] = field(default_factory=list)
    spent_s: float = 0.0
    stopped: str = ""
    """Why the bisect stopped before it could name a commit ("" while it goes on, or once it named one)."""

    def __post_init__(self) -> None:
        if len(self.commits) < 2:
            raise ValueError("a bisect needs a good and a bad commit")
        self.bad = self.bad % len(self.commits)

    @property
    def candidates(self) -> int:
        """Commits that may hold the slowdown: after the good end, up to the bad end."""
        return self.bad - self.good

    @property
    def confirmed(self) -> bool:
        """A probe saw the bad end slower than a good end (the bad end moved there, or was probed itself)."""
        return any(p.head == self.bad and p.decision in DECIDED_SLOWER for p in self.probes)

    @property
    def not_reproduced(self) -> bool:
        return any(p.head == self.bad and p.decision in DECIDED_NOT_SLOWER for p in self.probes)

    def next_head(self) -> int | None:
        """The next commit to probe, None when the bisect has its answer (or only untestable commits are left)."""
        if self.stopped or self.not_reproduced:
            return None
        inside = [i for i in range(self.good + 1, self.bad) if i not in self.untestable]
        if inside:
            middle = (self.good + self.bad) / 2
            return min(inside, key=lambda i: (abs(i - middle), i))
        if self.confirmed or self.bad in self.untestable:
            return None
        return self.bad

    def probes_to_finish(self) -> int:
        """Probes that name a commit from here at worst: halving the candidates, plus the bad end while unconfirmed."""
        if self.next_head() is None:
            return 0
        return math.ceil(math.log2(self.candidates)) + (0 if self.confirmed else 1)

    def undecided_runs(self, head: int) -> int:
        """Undecided probes of `head` against the current good end since it became the good end."""
        count = 0
        for p in reversed(self.probes):
            if p.head != head or p.base != self.good or p.decision not in UNDECIDED:
                break
            count += 1
        return count

    def add(self, result: ProbeResult) -> None:
        """Narrow the range by one probe's verdict (module docstring)."""
        if result.decision not in DECISIONS:
            raise ValueError(f"unknown probe decision {result.decision!r}")
        self.probes.append(result)
        self.spent_s += result.seconds
        if result.decision in DECIDED_SLOWER:
            self.bad = result.head
        elif result.decision in DECIDED_NOT_SLOWER and result.head != self.bad:
            self.good = result.head
        elif result.decision == UNTESTABLE:
            self.untestable.append(result.head)

    def outcome(self) -> str:
        if self.not_reproduced:
            return "not-reproduced"
        if self.stopped or self.next_head() is not None:
            return "stopped"
        return "named" if self.confirmed and self.candidates == 1 else "untestable"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "probes": [asdict(p) for p in self.probes]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BisectState:
        probes = [ProbeResult(**p) for p in data.get("probes", [])]
        return cls(**{**data, "probes": probes})


@dataclass(frozen=True, kw_only=True)
class ProbeCost:
    """One round of a probe (a launch a side) in node seconds, and the GPUs the node holds meanwhile."""

    round_budget_s: float
    """As the budget counts it (plan/cost.py `budget_wall_s`: upper start-ups, ...)."""
    round_typical_s: float
    round_upper_s: float
    gpus: int
    min_rounds: int = MIN_REPEATS

    @property
    def min_probe_s(self) -> float:
        return self.min_rounds * self.round_budget_s


def probes_for(commits_after_good: int) -> int:
    """Probes that name one of n commits after the good end at worst (the bad end probed last, unconfirmed)."""
    return math.ceil(math.log2(commits_after_good)) + 1


def budget_refusal(commits_after_good: int, cost: ProbeCost, budget_s: float) -> str | None:
    """Why `budget_s` cannot finish a range of that many commits after the good end, with what would fit; None when
    the probes it takes at worst fit at the check's minimum rounds."""
    need = probes_for(commits_after_good)
    if need * cost.min_probe_s <= budget_s:
        return None
    fit = int(budget_s // cost.min_probe_s)
    narrowed = math.ceil(commits_after_good / 2**fit)
    widest = 2 ** (fit - 1) if fit >= 1 else 0
    what = (
        f"{fit} probe(s) fit, which narrow {commits_after_good} commits to {narrowed}"
        if fit >= 1
        else "not one probe fits"
    )
    return (
        f"--budget-minutes {budget_s / 60:g}: {commits_after_good} commits after the good end take up to {need} "
        f"probes of at least {cost.min_rounds} rounds, {math.ceil(need * cost.min_probe_s / 60)} min of the node "
        f"(upper start-ups; {cost.min_probe_s / 60:.1f} min a probe); {what}; give --budget-minutes "
        f"{math.ceil(need * cost.min_probe_s / 60)}"
        + (f" or a range of at most {widest} commit(s)" if widest >= 1 else "")
    )


def probe_budget_s(state: BisectState, cost: ProbeCost, budget_s: float) -> float | None:
    """The next probe's budget: what is left less the minimum of the probes still needed after it; None when not
    even one probe at the minimum rounds fits what is left."""
    left = budget_s - state.spent_s
    if left < cost.min_probe_s:
        return None
    reserve = (max(state.probes_to_finish(), 1) - 1) * cost.min_probe_s
    return max(cost.min_probe_s, left - reserve)


Probe = Callable[[int, int, int, float], ProbeResult]
"""(head, base, at most this many rounds, within this many seconds) -> the probe's result."""


def run_bisect(
    state: BisectState,
    cost: ProbeCost,
    budget_s: float,
    probe: Probe,
    *,
    rounds: int,
    on_probe: Callable[[BisectState], None] | None = None,
    recost: Callable[[int], ProbeCost] | None = None,
) -> BisectState:
    """Probe until the range has its answer or the budget ends (module docstring); `rounds`: a first probe's most
    rounds, doubled for each rerun of the same head. `on_probe` sees the state after each probe (to persist it);
    `recost(head)` gives the next probe's cost when it can change (measured launch times recorded meanwhile)."""
    while (head := state.next_head()) is not None:
        if recost is not None and state.probes:
            cost = recost(head)
        allowed = probe_budget_s(state, cost, budget_s)
        if allowed is None:
            left = max(budget_s - state.spent_s, 0.0)
            state.stopped = (
                f"budget: {left / 60:.0f} min left of --budget-minutes {budget_s / 60:g}, a probe takes at least "
                f"{cost.min_probe_s / 60:.0f} min"
            )
            break
        most = rounds * 2 ** state.undecided_runs(head)
        state.add(probe(head, state.good, most, allowed))
        if on_probe is not None:
            on_probe(state)
    return state


def cost_lines(commits_after_good: int, cost: ProbeCost, budget_s: float, rounds: int) -> list[str]:
    """What a bisect of that range costs, stated before anything runs: a round, the probes to name a commit, the
    budget and what it holds."""
    halvings = math.ceil(math.log2(commits_after_good))
    low, high = halvings * cost.min_rounds, (halvings + 1) * rounds
    hours = cost.gpus / 3600
    return [
        f"  cost, a round (a launch a side): node wall time {cost.round_typical_s / 60:.1f}-"
        f"{cost.round_upper_s / 60:.1f} min, {cost.round_typical_s * hours:.1f}-{cost.round_upper_s * hours:.1f} "
        f"GPU-hours (typical-upper, {cost.gpus} GPUs, start-ups included)",
        f"  cost, to name a commit: {halvings}-{halvings + 1} probes of {cost.min_rounds}-{rounds} rounds "
        f"({low}-{high} rounds, more to rerun an inconclusive probe): node wall time "
        f"{low * cost.round_typical_s / 60:.0f}-{high * cost.round_typical_s / 60:.0f} min, "
        f"{low * cost.round_typical_s * hours:.1f}-{high * cost.round_typical_s * hours:.1f} GPU-hours (typical)",
        f"  budget: --budget-minutes {budget_s / 60:g} of the node, {budget_s * hours:.1f} GPU-hours; at worst "
        f"{probes_for(commits_after_good)} probes of {cost.min_rounds} rounds, "
        f"{math.ceil(probes_for(commits_after_good) * cost.min_probe_s / 60)} min as the budget counts launches (upper "
        "start-ups); the rest goes to more rounds and reruns",
    ]
