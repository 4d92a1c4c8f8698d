"""The paired PR check (history/pair_check.py, `run.py ab`): its repeat unit, the disturbed-repeat rule, the slow-step
test, the error spent across looks, and what `ab` refuses. The error rates are in test_paired_check_rates.py."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest

from scripts.benchmark.analysis.document import analyse_run_folder
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.history.check import Verdict, exit_code
from scripts.benchmark.history.pair_check import (
    ALPHA_INTERIM,
    ALPHA_STEP_TIME,
    Look,
    disturbed_repeats,
    look,
    look_check,
    next_alpha,
    repeat_spread,
    repeat_unit,
)
from tests.benchmark.paired_check_validation import side_units
from tests.benchmark.standins.plans import STANDINS, run_py
from tests.benchmark.synthetic_runs import gap_pair, write_run_folder
from tests.benchmark.validation_generator import generate_runs


def _launches(seed: int, count: int, *, cv: float = 0.02, gap: float = 1.0) -> list[np.ndarray]:
    return list(generate_runs(np.random.default_rng(seed), count, steps=40, cv=cv, gap=gap).step_time)


def test_slow_steps_are_left_out_of_a_repeat_unit_and_counted():
    """Two 2.5x steps among 40 at 100 s: the unit stays at the typical step, and both are counted."""
    steps = 100.0 * (1 + 0.02 * np.random.default_rng(0).standard_normal(40))
    spiked = steps.copy()
    spiked[[7, 23]] *= 2.5
    clean, with_spikes = repeat_unit(0, list(steps)), repeat_unit(0, list(spiked))
    assert with_spikes.slow_steps == 2 and clean.slow_steps == 0
    assert with_spikes.mean_s == pytest.approx(np.delete(steps, [7, 23]).mean())
    assert abs(with_spikes.mean_s / clean.mean_s - 1) < 0.005


class TestDisturbedRepeats:
    @pytest.mark.parametrize("cv", [0.02, 0.05, 0.10])
    def test_a_repeat_25pct_slower_is_flagged_and_only_it(self, cv):
        head, base = side_units(_launches(1, 4, cv=cv)), side_units(_launches(2, 4, cv=cv))
        head_launches = _launches(1, 4, cv=cv)
        head_launches[2] = head_launches[2] * 1.25
        disturbed = side_units(head_launches)
        spread = repeat_spread(disturbed + base)
        [found] = disturbed_repeats("candidate", disturbed, spread)
        assert found.repeat == 2 and 0.15 < found.change < 0.35, found
        assert disturbed_repeats("candidate", head, repeat_spread(head + base)) == []
        assert disturbed_repeats("reference", base, repeat_spread(head + base)) == []

    def test_clean_repeats_are_flagged_at_most_once_in_a_thousand(self):
        """300 pairs of 4 + 4 clean launches at CV 5% (AR(1) steps, 1% launch offsets): at most 2 of the 2400
        repeats flagged (1 with these seeds; a flag costs a round, never a verdict)."""
        flagged = 0
        for seed in range(300):
            head, base = side_units(_launches(1000 + seed, 4, cv=0.05)), side_units(_launches(5000 + seed, 4, cv=0.05))
            spread = repeat_spread(head + base)
            flagged += len(disturbed_repeats("candidate", head, spread) + disturbed_repeats("reference", base, spread))
        assert flagged <= 2

    def test_two_repeats_a_side_cannot_tell_which_one_is_disturbed(self):
        launches = _launches(3, 2)
        launches[1] = launches[1] * 1.5
        units = side_units(launches)
        assert disturbed_repeats("candidate", units, repeat_spread(units)) == []

    def test_a_disturbed_run_that_stays_inconclusive_could_not_judge(self):
        """A head 25% slow in one of 4 launches, the rest at CV 10%: left out, and the last look's inconclusive
        interval is "could not judge" (exit 2), never a pass; the same draws without the slow launch pass."""
        head_launches, base = _launches(11, 4, cv=0.10), side_units(_launches(12, 4, cv=0.10))
        clean = look(side_units(head_launches), base, round_number=4, alpha=0.024, final=True)
        head_launches[0] = head_launches[0] * 1.25
        decided = look(side_units(head_launches), base, round_number=4, alpha=0.024, final=True)
        assert clean.decision == "INCONCLUSIVE" and not clean.disturbed, clean
        assert decided.decision == "COULD_NOT_JUDGE" and decided.disturbed[0]["repeat"] == 0, decided
        check = look_check("fsdp/colocate", decided)
        assert check.verdict is Verdict.ERROR and exit_code([check]) == 2
        assert "left out as disturbed: candidate repeat 0 +2" in check.note and "rerun" in check.note


def test_a_head_whose_every_fifth_step_is_slow_is_regressed_though_its_typical_step_is_not():
    """The slow-step rule cannot hide a change that makes every fifth step 2x slower: the units agree, the slow-step
    counts do not."""
    head_launches = _launches(21, 3)
    for launch in head_launches:
        launch[10::5] *= 2.0
    decided = look(side_units(head_launches), side_units(_launches(22, 3)), round_number=3, alpha=0.02, final=True)
    assert abs(decided.ratio - 1) < 0.02, decided
    assert decided.decision == "REGRESSED" and decided.note.startswith("slow steps"), decided


def test_the_error_is_spent_across_looks_and_never_beyond_its_total():
    """Interim looks spend ALPHA_INTERIM each; the last look what is left; looks before three repeats a side
    spend nothing."""
    interim = Look(round=3, repeats={}, alpha=next_alpha([], final=False), final=False, decision="CONTINUE")
    assert interim.alpha == ALPHA_INTERIM
    waiting = Look(round=1, repeats={}, alpha=0.0, final=False, decision="CONTINUE")
    looks = [waiting, interim, Look(round=4, repeats={}, alpha=ALPHA_INTERIM, final=False, decision="CONTINUE")]
    assert next_alpha(looks, final=True) == pytest.approx(ALPHA_STEP_TIME - 2 * ALPHA_INTERIM)
    many = [Look(round=i, repeats={}, alpha=ALPHA_INTERIM, final=False, decision="CONTINUE") for i in range(20)]
    assert next_alpha(many, final=False) == 0.0 and next_alpha(many, final=True) == 0.0
    units = side_units(_launches(31, 2))
    assert look(units, units, round_number=2, alpha=0.01, final=False).alpha == 0.0


def _miles_vs_verl_report(tmp_path):
    cells = [dataclasses.replace(c, repeats=3) for c in gap_pair({"train": 10.0}, num_steps=40, seed=3)]
    run_dir = write_run_folder(tmp_path / "run", cells)
    judged = run_py("report", str(run_dir))
    assert judged.returncode == 0, judged.stdout + judged.stderr
    return run_dir


def test_ab_refuses_a_run_of_two_frameworks(tmp_path):
    """A Miles-vs-VERL folder is no head/base pair: exit 2 with the sentence, no verdict written (before: VERL was
    judged as Miles's base, exit 1 REGRESSION)."""
    run_dir = _miles_vs_verl_report(tmp_path)
    judged = run_py("ab", str(run_dir))
    assert judged.returncode == 2, judged.stdout + judged.stderr
    assert "compares miles with verl" in judged.stderr and "two builds of one framework" in judged.stderr
    assert "Traceback" not in judged.stderr and not (run_dir / "ab.md").exists()


def test_ab_runs_without_the_history_extra(tmp_path):
    """`ab` reads no store: with sqlalchemy and psycopg unimportable it still judges (here: refuses, exit 2, with its
    own sentence, not the extra to install)."""
    run_dir = _miles_vs_verl_report(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(STANDINS / "blocker"), "BENCH_TEST_BLOCK_MODULES": "sqlalchemy,psycopg"}
    judged = run_py("ab", str(run_dir), env=env)
    assert judged.returncode == 2 and "two builds of one framework" in judged.stderr, judged.stderr
    assert "analysis' extra" not in judged.stderr


def test_a_report_pair_is_judged_from_its_samples(tmp_path):
    """pair_units reads report.json's per-repeat steady steps: a head 10% slower at CV 3% is REGRESSED."""
    from scripts.benchmark.history.pair_check import pair_units

    cells = [dataclasses.replace(c, repeats=4) for c in gap_pair({"train": 10.0}, num_steps=40, seed=5)]
    doc = analyse_run_folder(write_run_folder(tmp_path, cells), AnalysisSettings(reps=200))
    [(head, base)] = pair_units(doc).values()
    assert len(head) == len(base) == 4
    assert look(head, base, round_number=4, alpha=0.024, final=True).decision == "REGRESSED"
    assert json.loads(json.dumps(doc.model_dump(mode="json")))["cells"][0]["launch"] is not None
