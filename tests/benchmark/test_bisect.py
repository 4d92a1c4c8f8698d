"""The bisect's rule (history/bisect.py) with probes whose verdicts the test decides: what it probes, when it names a
commit, reruns, skips and stops, its budget, and its answer (history/bisect_report.py)."""

from __future__ import annotations

import json
import math

import pytest
from scripts.benchmark.history.bisect import (
    BisectState,
    ProbeCost,
    ProbeResult,
    budget_refusal,
    probe_budget_s,
    run_bisect,
)
from scripts.benchmark.history.bisect_report import render_bisect

COST = ProbeCost(round_budget_s=600.0, round_typical_s=400.0, round_upper_s=800.0, gpus=8)
"""A round: 10 min as the budget counts it, a probe at least 30 min."""
BIG = 1e9


def oracle(slowdown_at: int | None, *, undecided: dict[int, int] | None = None, untestable: set[int] = frozenset()):
    """A probe whose verdict is the truth: REGRESSED when the slowdown lies after the base and at or before the
    head; `undecided` heads answer INCONCLUSIVE that many times first; each probe runs its rounds and takes them."""
    undecided = dict(undecided or {})
    calls: list[tuple[int, int, int, float]] = []

    def probe(head: int, base: int, most: int, allowed_s: float) -> ProbeResult:
        calls.append((head, base, most, allowed_s))
        rounds = min(most, int(allowed_s // COST.round_budget_s))
        seconds = rounds * COST.round_budget_s
        if head in untestable:
            decision = "UNTESTABLE"
        elif undecided.get(head, 0) > 0:
            undecided[head] -= 1
            decision = "INCONCLUSIVE"
        else:
            decision = "REGRESSED" if slowdown_at is not None and base < slowdown_at <= head else "NO_DIFFERENCE"
        return ProbeResult(head=head, base=base, decision=decision, rounds=rounds, max_rounds=most, seconds=seconds)

    probe.calls = calls
    return probe


def _bisect(commits: int, probe, budget_s: float = BIG, rounds: int = 3) -> BisectState:
    return run_bisect(
        BisectState(commits=[f"{i:012x}" + "0" * 28 for i in range(commits)]), COST, budget_s, probe, rounds=rounds
    )


@pytest.mark.parametrize("commits", [2, 3, 9, 16, 64])
def test_every_commit_is_named_in_at_most_the_halvings_and_the_last_one_is_probed_itself(commits):
    for planted in range(1, commits):
        state = _bisect(commits, oracle(planted))
        halvings = math.ceil(math.log2(commits - 1))
        assert (state.outcome(), state.bad, state.good) == ("named", planted, planted - 1)
        assert len(state.probes) <= halvings + (planted == commits - 1), (planted, state.probes)


def test_a_slowdown_the_probes_cannot_see_is_not_reproduced_and_nothing_is_named():
    """Every probe equal: the bad end is probed last against the commit before it, and the answer names nothing."""
    state = _bisect(64, oracle(None))
    assert state.outcome() == "not-reproduced" and len(state.probes) == 6 + 1
    assert state.probes[-1].head == 63 and state.probes[-1].base == 62
    answer = render_bisect(state, ["subject"] * 64, gpus=8)
    assert answer.startswith(f"### Bisect: no slowdown between {62:012x} and {63:012x}")
    assert "made the step slower" not in answer and "Nothing is named" in answer


def test_an_inconclusive_probe_reruns_the_same_head_with_twice_the_rounds():
    probe = oracle(5, undecided={4: 2})
    state = _bisect(9, probe, rounds=4)
    assert state.outcome() == "named" and state.bad == 5
    heads = [(head, most) for head, _, most, _ in probe.calls]
    assert heads[:3] == [(4, 4), (4, 8), (4, 16)] and heads[3][1] == 4


def test_the_budget_ends_the_bisect_with_the_range_it_knows():
    """Probes that never decide, in a budget of 200 min: each takes what it is given; the bisect stops when not one
    more probe at its minimum fits, says why and which commits are left, and never spends more than the budget."""
    probe = oracle(5, undecided={4: 99})
    state = _bisect(9, probe, budget_s=200 * 60, rounds=6)
    assert state.outcome() == "stopped" and state.spent_s <= 200 * 60
    assert state.stopped.startswith("budget: ") and "a probe takes at least 30 min" in state.stopped
    answer = render_bisect(state, [f"change {i}" for i in range(9)], gpus=8)
    assert answer.startswith("### Bisect: stopped with 8 commit(s) left")
    assert (
        f"{1:012x} (change 1)" in answer and f"{8:012x} (change 8)" in answer and "larger --budget-minutes" in answer
    )


def test_each_probe_keeps_the_minimum_of_the_probes_still_needed():
    state = BisectState(commits=[str(i) for i in range(17)])  # 16 after the good end: 4 halvings + the bad end
    assert state.probes_to_finish() == 5
    assert probe_budget_s(state, COST, 300 * 60) == pytest.approx((300 - 4 * 30) * 60)
    assert probe_budget_s(state, COST, 100 * 60) == pytest.approx(30 * 60)  # no room: the minimum
    assert probe_budget_s(state, COST, 29 * 60) is None


def test_an_untestable_commit_is_skipped_and_an_unresolvable_range_says_so():
    probe = oracle(2, untestable={4})
    state = _bisect(9, probe)
    assert state.outcome() == "named" and state.bad == 2 and state.untestable == [4]
    assert [head for head, *_ in probe.calls] == [4, 3, 1, 2]  # the middle could not run: its nearest neighbour
    state = _bisect(9, oracle(4, untestable={4}))
    assert state.outcome() == "untestable" and (state.good, state.bad) == (3, 5)
    answer = render_bisect(state, [""] * 9, gpus=8)
    assert f"Commits that could not run: {4:012x}" in answer


def test_the_state_round_trips_through_its_json():
    state = _bisect(9, oracle(5, untestable={3}))
    again = BisectState.from_json(json.loads(json.dumps(state.to_json())))
    assert again == state and again.outcome() == "named"


def test_a_budget_that_cannot_finish_the_range_is_refused_with_what_fits():
    """63 commits after the good end: 6 halvings and the bad end, 7 probes of 30 min."""
    assert budget_refusal(63, COST, 210 * 60) is None
    problem = budget_refusal(63, COST, 200 * 60)
    assert problem == (
        "--budget-minutes 200: 63 commits after the good end take up to 7 probes of at least 3 rounds, 210 min of "
        "the node (upper start-ups; 30.0 min a probe); 6 probe(s) fit, which narrow 63 commits to 1; give "
        "--budget-minutes 210 or a range of at most 32 commit(s)"
    )
    assert "not one probe fits" in budget_refusal(63, COST, 20 * 60)


def test_a_named_commit_says_which_probe_saw_it():
    state = _bisect(9, oracle(5))
    answer = render_bisect(state, [f"change {i}" for i in range(9)], gpus=8)
    assert answer.startswith(f"### Bisect: {5:012x} (change 5) made the step slower")
    assert "Decided: the probe of" in answer and "every step of the range was a decided verdict" in answer
    assert answer.count("| slower |") == sum(p.decision == "REGRESSED" for p in state.probes)
