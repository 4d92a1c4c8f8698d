"""The steady state and the learning guard on the second generator (drift_generator.py: runs that drift on their
own, heavy-tailed AR(1) 0.8 noise), through the report's own code: seeded, smaller versions of
`python -m tests.benchmark.second_generator_validation`. Rate bounds allow the sampling error of the cases run
(one-sided 95%), so a method at its target passes and one off by more fails."""

from __future__ import annotations

import math

import pytest

from tests.benchmark.drift_generator import PLANTS
from tests.benchmark.second_generator_validation import learning_rates, steady_state_rates

PAIRS = 60


def sampling_margin(rate: float, n: int) -> float:
    return 1.645 * math.sqrt(rate * (1 - rate) / n)


@pytest.mark.parametrize(
    "steps, runs, cv, lengths", [(24, 800, 0.10, (3, 8)), (200, 200, 0.10, (3, 8)), (24, 800, 0.05, (12, 12))]
)
def test_at_high_noise_the_warmup_is_cut_within_a_step_or_the_claim_refused(steps, runs, cv, lengths):
    """Step CV 10%, or a 12-step warm-up at CV 5%, under AR(1) 0.8 with heavy tails: within one step of the true
    warm-up, or the steady state not claimed, in >= 90% of series (the rule alone: 53-76%)."""
    rates = steady_state_rates(seed=11, runs=runs, steps=steps, cv=cv, lengths=lengths)
    assert rates.placed_or_refused >= 0.90 - sampling_margin(0.90, runs), rates
    assert rates.kept_silently <= 0.10 + sampling_margin(0.10, runs), rates


@pytest.fixture(scope="module", params=[24, 200])
def drifting(request) -> tuple[int, dict[str, float]]:
    return request.param, learning_rates(seed=2, pairs=PAIRS, steps=request.param)


def test_equal_learning_of_drifting_runs_is_almost_never_called_different(drifting):
    steps, found = drifting
    assert found["A/A any different"] <= 0.05 + sampling_margin(0.05, PAIRS), (steps, found)


@pytest.mark.parametrize("planted", PLANTS)
def test_each_plant_is_caught_at_3_repeats_or_at_the_repeats_the_guard_names(drifting, planted):
    steps, found = drifting
    at = found.get(f"{planted}: different at the repeats named", found[f"{planted}: different"])
    assert math.isfinite(found[f"{planted}: repeats a side named"]), (steps, found)
    assert at >= 0.90 - sampling_margin(0.90, PAIRS), (steps, found)
