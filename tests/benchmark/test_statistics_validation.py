"""The report's statistics validated on generated runs (validation_generator.py, not the report's fixtures).

Seeded, small versions of `python -m tests.benchmark.statistics_validation`; the bounds are the targets the docs
state. Where a bound is a rate at its nominal value (false claims at 5%), the assertion allows the sampling error of
the number of pairs (one-sided 95%), so that a correct method passes and a method that is off by more fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from scripts.benchmark.analysis.steady_state import detect_steady_state
from tests.benchmark.statistics_validation import interval_rates, steady_state_rates
from tests.benchmark.validation_generator import generate_runs

PAIRS = 500


def sampling_margin(rate: float, n: int) -> float:
    return 1.645 * math.sqrt(rate * (1 - rate) / n)


class TestSteadyState:
    @pytest.mark.parametrize("steps, runs", [(24, 2000), (23, 2000), (200, 500)])
    def test_warmup_found_within_a_step_and_never_kept(self, steps, runs):
        """AR(1) 0.5, CV 2%, warm-ups of 3-8 decaying steps: within +-1 step in >= 90%, no warm-up step kept in
        >= 99%, and a clean run is called "no steady state" in under 1% (23 steps: Miles's last step has none)."""
        rates = steady_state_rates(seed=steps, runs=runs, steps=steps)
        assert rates.within_one >= 0.90, rates
        assert rates.keeps_warmup <= 0.01, rates
        assert rates.not_reached <= 0.01, rates

    def test_long_run_flat_after_the_warmup_is_steady(self):
        """2,400 steps visibly flat after 3-8 steps: steady, the warm-up found."""
        rates = steady_state_rates(seed=5, runs=40, steps=2400)
        assert rates.not_reached == 0 and rates.within_one >= 0.95, rates

    def test_a_run_that_keeps_drifting_has_no_steady_state(self):
        """The level grows 20% over 48 steps: most runs are "no steady state", each with the steps it needs."""
        rates = steady_state_rates(seed=6, runs=400, steps=48, drift=0.2)
        assert rates.not_reached >= 0.8, rates

    def test_a_warmup_longer_than_the_run_allows_asks_for_more_steps(self):
        """16-18 warm-up steps in 24: no 10 steady steps exist. The rule says so in about 88% of runs (the last
        half it takes as reference is itself warm-up; see the docs' limits); every such verdict names the steps
        the spec still needs, or that the steps left vary too much to place the warm-up's end."""
        runs = generate_runs(np.random.default_rng(7), 200, steps=24, warmup_lengths=(16, 18))
        found = [detect_steady_state(runs.step_time[i]) for i in range(200)]
        asked = [f for f in found if not f.reached]
        assert len(asked) >= 0.8 * len(found)
        assert all(
            (f.more_steps and f.more_steps > 0 and "more steps" in f.method) or "too noisy" in f.method for f in asked
        )

    @pytest.mark.parametrize(
        "steps, runs, cv, lengths", [(24, 1000, 0.10, (3, 8)), (200, 300, 0.10, (3, 8)), (24, 1000, 0.05, (12, 12))]
    )
    def test_at_high_noise_the_warmup_is_cut_within_a_step_or_the_claim_refused(self, steps, runs, cv, lengths):
        """Step CV 10%, or a 12-step warm-up at CV 5%: a warm-up step a few SDs slow cannot be told from noise, so
        the cut is within one step of the truth or the steady state is not claimed, in >= 90% of runs (the rule
        alone: 56-65%), and a claimed steady state keeps a warm-up step in at most 1 run in 20."""
        rates = steady_state_rates(seed=8, runs=runs, steps=steps, cv=cv, warmup_lengths=lengths)
        assert rates.placed_or_refused >= 0.90, rates
        assert rates.kept_silently <= 0.05, rates


def test_a_periodic_checkpoint_step_does_not_let_the_warmup_through():
    """One step in ten 50% slower (a checkpoint save): the scale leaves the largest deviations out, so the slow
    warm-up steps are still seen (the mean absolute deviation kept one in about 60% of runs)."""
    r = steady_state_rates(seed=3, runs=1000, steps=24, checkpoint_every=10)
    assert r.keeps_warmup <= 0.05 + sampling_margin(0.05, r.runs), r


def test_a_checkpoint_step_right_after_the_warmup_is_not_taken_for_more_warmup():
    """The checkpoint step (+50%) one step after an 8-step warm-up: past the one-step gap the rule allows, a step
    far above the warm-up's last one is a spike, so the cut stays within one step of the truth in >= 90% of runs
    (it was cut two or three steps late in every such run: 84% overall)."""
    r = steady_state_rates(seed=4, runs=1000, steps=24, checkpoint_every=10)
    assert r.within_one >= 0.90, r
    assert r.keeps_warmup <= 0.05 + sampling_margin(0.05, r.runs), r


@pytest.fixture(scope="module")
def default_rates():
    """3 interleaved repeats of 24 steps a side (the default)."""
    return interval_rates(seed=21, pairs=PAIRS, repeats=3, steps=24)


class TestIntervals:
    def test_per_cell_medians_and_ratios_cover_92_to_97_percent(self, default_rates):
        r = default_rates
        assert 0.92 <= r.median_coverage <= 0.97, r
        assert 0.92 <= r.ratio_coverage <= 0.97, r
        assert r.family_coverage >= 0.92, r

    def test_family_wise_is_at_most_1_3_times_the_per_metric_width(self, default_rates):
        assert default_rates.width_family_over_per_metric <= 1.3

    def test_no_difference_pairs_rarely_claim_a_difference(self, default_rates):
        r = default_rates
        assert r.false_claims <= 0.05 + sampling_margin(0.05, r.pairs), r
        assert r.family_false_claims <= 0.05 + sampling_margin(0.05, r.pairs), r

    def test_a_real_five_percent_gap_is_seen(self, default_rates):
        """About 91% on this generator with 3 repeats a side; the bound leaves the sampling error of 500 pairs."""
        assert default_rates.detection_5pct >= 0.90 - sampling_margin(0.9, PAIRS)
