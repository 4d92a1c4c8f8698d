"""The learning guard's targets on generated pairs (learning_validation.py's noise model, its docstring).

Seeded, smaller versions of `python -m tests.benchmark.learning_validation`; a rate bound allows the sampling error
of the number of pairs (one-sided 95%), so that a correct method passes and one that is off by more fails.
"""

from __future__ import annotations

import math

import pytest

from tests.benchmark.learning_validation import PLANTED, rates

PAIRS = 120


def sampling_margin(rate: float, n: int) -> float:
    return 1.645 * math.sqrt(rate * (1 - rate) / n)


@pytest.fixture(scope="module")
def at_200_steps() -> dict[str, float]:
    return rates(PAIRS, 200, seed=1)


def test_equal_learning_is_almost_never_called_different(at_200_steps):
    assert at_200_steps["A/A any different"] <= 0.05 + sampling_margin(0.05, PAIRS)


@pytest.mark.parametrize("planted", PLANTED)
def test_each_planted_difference_is_called_different_at_200_steps(at_200_steps, planted):
    assert at_200_steps[f"{planted}: different"] >= 0.90 - sampling_margin(0.90, PAIRS)


def test_a_gap_equal_to_the_margin_is_almost_never_called_same(at_200_steps):
    same = {k: v for k, v in at_200_steps.items() if k.endswith("gap = margin: same")}
    assert len(same) == 7 and max(same.values()) <= 0.05 + sampling_margin(0.05, PAIRS), same
