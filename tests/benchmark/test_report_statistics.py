"""The report's statistics on series whose truth is known: warm-up, summaries with CIs, bootstrap helpers."""

import math

import numpy as np
import pytest

from scripts.benchmark.analysis.compare import SideSamples, compare_sides
from scripts.benchmark.analysis.intervals import block_length, small_sample_factor
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.analysis.stats import summarise
from scripts.benchmark.analysis.steady_state import detect_steady_state
from tests.benchmark.synthetic_runs import SyntheticCell, ar1_noise, build_records, pair_key


def step_times(**kwargs) -> list[float]:
    return [r.step_time_s for r in build_records(SyntheticCell(framework="miles", **kwargs), 0)]


class TestSteadyState:
    def test_warmup_found_within_five_steps_for_most_seeds_and_never_too_early(self):
        """12 slow steps (3x, decaying) then CV 3% AR(1) noise: the cut lands at the warm-up's end, never inside it."""
        starts = [detect_steady_state(step_times(warmup_steps=12, seed=seed)).start_index for seed in range(20)]
        within = [abs(s - 12) <= 5 for s in starts]
        assert min(starts) >= 12, starts
        assert sum(within) >= 16, starts

    def test_stationary_series_reaches_steady_state_at_once(self):
        """No warm-up: nothing (or next to nothing) is dropped."""
        result = detect_steady_state(step_times(warmup_steps=0, seed=3))
        assert result.reached
        assert result.start_index <= 5
        assert result.method.startswith("threshold rule")

    def test_series_that_keeps_drifting_never_reaches_steady_state(self):
        """A step time falling by a third over the whole run is reported as not steady, with more steps asked for."""
        rng = np.random.default_rng(0)
        series = list(100 * np.linspace(1.5, 1.0, 80) * ar1_noise(rng, 80, 0.03, 0.5))
        result = detect_steady_state(series)
        assert not result.reached
        assert "no steady state" in result.method
        assert result.more_steps and "more steps" in result.method

    def test_too_short_a_run_is_not_called_steady(self):
        result = detect_steady_state([10.0, 9.0, 9.1, 9.0, 9.2, 9.1])
        assert not result.reached
        assert "too few" in result.method

    def test_nan_steps_are_skipped_and_positions_kept(self):
        """A NaN step inside the warm-up does not shift the detected start position."""
        series = step_times(warmup_steps=12, seed=2)
        clean = detect_steady_state(series).start_index
        series[3] = math.nan
        series[4] = None
        assert detect_steady_state(series).start_index == clean

    def test_a_lone_spike_past_the_gap_ends_the_warmup_but_two_slow_steps_continue_it(self):
        """After one step below the line, a single step far above the warm-up (a checkpoint save) is not warm-up;
        two slow steps in a row are (a warm-up need not decay evenly)."""
        steady = list(100 + 0.5 * np.sin(np.arange(20)))
        lone = detect_steady_state([150.0, 100.0, 400.0, *steady])
        assert lone.reached and lone.start_index == 2, lone
        stretch = detect_steady_state([150.0, 100.0, 400.0, 300.0, *steady])
        assert stretch.reached and stretch.start_index == 5, stretch

    def test_a_series_too_noisy_to_place_the_warmup_end_is_not_claimed_and_says_why(self):
        """Step CV 10%: a warm-up step 20% slower hides in the noise, so the claim is refused with the numbers (the
        steady steps' spread and the warm-up it could hide), the cut is kept and no more steps are asked for."""
        result = detect_steady_state(step_times(warmup_steps=4, cv=0.10, seed=1))
        assert not result.reached and result.more_steps is None, result
        assert result.noise == pytest.approx(0.10, rel=0.5)
        assert "too noisy to place the end of the warm-up" in result.method
        assert f"vary by {result.noise:.1%}" in result.method and "steady state not claimed" in result.method
        assert detect_steady_state(step_times(warmup_steps=4, cv=0.01, seed=1)).reached

    def test_empty_series(self):
        result = detect_steady_state([None, math.nan])
        assert result.start_index is None and not result.reached


class TestSummaries:
    def test_one_run_uses_batch_means(self):
        rng = np.random.default_rng(5)
        values = list(50 * ar1_noise(rng, 60, 0.03, 0.5))
        summary = summarise([values])
        assert "batch means" in summary.method and "batch medians" in summary.method
        assert summary.ci_low < summary.median < summary.ci_high
        assert summary.n == 60

    def test_batch_means_interval_covers_the_true_median_about_95_percent_of_the_time(self):
        """60 autocorrelated steps (AR(1) 0.5, CV 3%): coverage near the nominal 95% (measured about 93%)."""
        rng = np.random.default_rng(9)
        covered = 0
        for _ in range(200):
            summary = summarise([list(50 * ar1_noise(rng, 60, 0.03, 0.5))])
            covered += summary.ci_low <= 50 <= summary.ci_high
        assert 0.88 <= covered / 200 <= 0.99

    def test_several_repeats_are_the_unit(self):
        rng = np.random.default_rng(6)
        runs = [list(50 * (1 + 0.02 * k) * ar1_noise(rng, 30, 0.03, 0.5)) for k in range(3)]
        summary = summarise(runs)
        assert "3 repeat medians" in summary.method and "repeat = unit" in summary.method
        assert summary.n == 90
        assert summary.ci_low < summary.median < summary.ci_high

    def test_missing_metric_gives_nulls_not_zeros(self):
        summary = summarise([[None, None, math.nan]])
        assert (summary.median, summary.ci_low, summary.ci_high, summary.n) == (None, None, None, 0)

    def test_too_few_steps_give_a_median_without_ci(self):
        summary = summarise([[1.0, 2.0, 3.0]])
        assert summary.median == 2.0 and summary.ci_low is None and "no CI" in summary.method


class TestBootstrapHelpers:
    def test_block_length_follows_autocorrelation(self):
        """Strongly autocorrelated steps get longer blocks than independent ones; never below sqrt(n)."""
        rng = np.random.default_rng(7)
        independent = rng.normal(size=200)
        correlated = ar1_noise(rng, 200, 0.03, 0.9)
        assert block_length(independent) >= math.ceil(math.sqrt(200))
        assert block_length(correlated) > block_length(independent)
        assert block_length(correlated) <= 200 // 3

    def test_small_sample_factor_shrinks_towards_one(self):
        assert small_sample_factor(5, 1, 0.95) > small_sample_factor(50, 1, 0.95) > 1.0
        assert small_sample_factor(500, 1, 0.95) == pytest.approx(1.0, abs=0.01)
        assert small_sample_factor(50, 3, 0.95) > small_sample_factor(50, 1, 0.95)

    def test_pure_comparison_of_two_sides(self):
        """Miles 20% slower in one metric, identical in the other: only the first ratio is significant."""
        rng = np.random.default_rng(8)

        def side(scale: float) -> SideSamples:
            matrix = np.column_stack([scale * 10 * ar1_noise(rng, 60, 0.03, 0.5), 5 * ar1_noise(rng, 60, 0.03, 0.5)])
            return SideSamples(metrics=("step_time_s", "phases_s.train"), repeats=(matrix,))

        rows, attribution = compare_sides(
            side(1.2), side(1.0), pair=pair_key(), phases=("train",), settings=AnalysisSettings(reps=300, seed=1)
        )
        step, train = rows
        assert step.significant and step.ci_low < 1.2 < step.ci_high
        assert not train.significant and train.ci_low < 1.0 < train.ci_high
        assert [a.component for a in attribution] == ["step_time_s", "phases_s.train", "unattributed"]
        assert attribution[0].gap_s == pytest.approx(attribution[1].gap_s + attribution[2].gap_s)
        # The family's intervals are per-metric (only the claims are family-controlled): the label says which.
        assert "95% CI per metric (claims: step-time family, tested in order)" in step.method
        assert "95% CI;" in train.method and "family" not in train.method
