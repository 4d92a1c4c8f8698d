"""The paired PR check's error rates on generated launches (paired_check_validation.py), seeded and smaller than the
docs' table: equal builds rarely called slower, a 5% slower head caught, and a disturbed run never passing a slower
head. Bounds allow the sampling error of the pairs run (one-sided 95%), so a check at its target passes and one off
by more fails."""

from __future__ import annotations

import math

import pytest

from tests.benchmark.paired_check_validation import paired_check_rates

PAIRS = 400


def margin(rate: float, n: int) -> float:
    return 1.645 * math.sqrt(rate * (1 - rate) / n)


@pytest.mark.parametrize("generator", ["project", "simulator"])
@pytest.mark.parametrize("cv, detection", [(0.02, 0.90), (0.05, 0.80)])
def test_false_slower_at_most_2_5_percent_and_a_5_percent_slower_head_caught(generator, cv, detection):
    r = paired_check_rates(seed=3, pairs=PAIRS, cv=cv, generator=generator)
    assert r.false_slower <= 0.025 + margin(0.025, r.pairs), r
    assert r.detection_5pct >= detection - margin(detection, r.pairs), r


@pytest.mark.parametrize("cv", [0.02, 0.05])
def test_one_launch_in_six_25_percent_slow_never_lets_a_slower_head_pass(cv):
    """One of the first six launches 25% slower (head or base): a 5% slower head is REGRESSED or "could not judge"
    (exit 2) in every pair, never exit 0."""
    r = paired_check_rates(seed=4, pairs=200, cv=cv, generator="disturbed")
    assert r.slower_passed == 0.0, r
    assert r.false_slower <= 0.025 + margin(0.025, r.pairs), r
