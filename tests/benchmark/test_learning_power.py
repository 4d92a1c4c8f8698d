"""The learning guard says what it can see: margins that follow the level, no verdict from one repeat a side, and the
repeats a side it needs for the differences it is built for (analysis/learning_power.py), on the card and before a
learning run spends its GPU time."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scripts.benchmark.analysis.learning import DIFFERENT, SAME, UNSETTLED, signal_row
from scripts.benchmark.analysis.learning_power import (
    MAX_REPEATS,
    POWER,
    Spreads,
    planted_effects,
    power,
    repeats_needed,
    spread_from_runs,
    stated_spreads,
)
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.commands.ab import ab_impl
from scripts.benchmark.commands.report import analyse_and_write
from scripts.benchmark.contracts.history_record import MetricValue, Provenance, RunToRecord, SeriesKey
from scripts.benchmark.frameworks import registry
from scripts.benchmark.history.store import HistoryStore
from scripts.benchmark.plan.build import PlanOptions, build_plan
from scripts.benchmark.plan.cost import plan_cost
from scripts.benchmark.report.headline import headline_markdown
from scripts.benchmark.report.learning import learning_warning, power_warning
from scripts.benchmark.spec import load_preset
from tests.benchmark.synthetic_runs import SyntheticCell, write_run_folder
from tests.benchmark.test_history import _check as check_history
from tests.benchmark.test_history import _record as record_history
from tests.benchmark.test_learning import add_learning, learning_run
from tests.benchmark.test_learning_run import _plan as plan_both_frameworks

from miles.utils.bench_metrics import LEARNING_SIGNALS


def math_dapo(verl_root):
    """VERL 0.9.1's own math_dapo scorer, loaded from the wheel by path (it imports only re and typing)."""
    spec = importlib.util.spec_from_file_location("math_dapo", verl_root / "verl/utils/reward_score/math_dapo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def runs_of(rng: np.random.Generator, level: np.ndarray, repeats: int, sd: float) -> list[dict[int, float]]:
    return [dict(enumerate(level + rng.normal(0, sd, len(level)))) for _ in range(repeats)]


def judged(name: str, candidate: list[dict], reference: list[dict]) -> dict:
    mean = [{s: float(np.mean([r[s] for r in side])) for s in side[0]} for side in (candidate, reference)]
    return signal_row(name, mean[0], mean[1], None, family=8, repeats=(candidate, reference))


class TestMarginsFollowTheLevel:
    @pytest.mark.parametrize("name", [n for n, s in LEARNING_SIGNALS.items() if s.planted is not None])
    def test_every_margin_is_under_half_the_difference_it_is_built_to_see(self, name):
        spec = LEARNING_SIGNALS[name]
        assert spec.margin_kind == "relative", "a planted factor is a share of the level"
        assert math.log1p(spec.margin) < abs(math.log(spec.planted.factor)) / 2, spec

    def test_the_reward_level_is_measured_from_the_lowest_score_of_verls_math_dapo(self, verl_root):
        scorer = math_dapo(verl_root)
        scores = {scorer.compute_score(text, "42")["score"] for text in ("Answer: 42", "Answer: 41")}
        assert scores == {LEARNING_SIGNALS["reward_mean"].level_from, -LEARNING_SIGNALS["reward_mean"].level_from}

    @pytest.mark.parametrize("solve_rate", [0.03, 0.1, 0.25, 0.5, 0.9])
    def test_a_10_percent_lower_solve_rate_is_different_and_1_percent_is_same_at_every_level(self, solve_rate):
        """math_dapo's -1/+1 score at solve rates from 3% to 90% (a 0.02 absolute margin was the whole 10% drop at
        a 10% solve rate and hid it below): the margin follows the level, on precise runs of 3 repeats a side."""
        rng = np.random.default_rng(int(solve_rate * 100))
        level = np.full(60, solve_rate)

        def score(rate):
            return 2 * rate - 1

        reference = runs_of(rng, score(level), 3, 0.0005)
        assert judged("reward_mean", runs_of(rng, score(0.9 * level), 3, 0.0005), reference)["verdict"] == DIFFERENT
        assert judged("reward_mean", runs_of(rng, score(0.99 * level), 3, 0.0005), reference)["verdict"] == SAME

    def test_a_truncation_share_of_zero_on_both_sides_is_same_and_a_doubled_share_different(self):
        rng = np.random.default_rng(4)
        zero = [dict.fromkeys(range(60), 0.0) for _ in range(3)]
        assert judged("truncation_fraction", zero, zero)["verdict"] == SAME
        share = np.full(60, 0.2)
        doubled = judged("truncation_fraction", runs_of(rng, 2 * share, 3, 0.002), runs_of(rng, share, 3, 0.002))
        assert doubled["verdict"] == DIFFERENT


class TestOneRepeat:
    def test_one_repeat_a_side_gives_no_verdict_and_names_the_repeats_that_would(self):
        """Even a 3x KL on one run a side: the interval covers these two runs, not a run's own drift."""
        rng = np.random.default_rng(2)
        level = np.full(200, 5e-4)
        row = judged("approx_kl", runs_of(rng, 3 * level, 1, 1e-5), runs_of(rng, level, 1, 1e-5))
        assert row["verdict"] == UNSETTLED and row["steps_needed"] is None, row
        assert row["why"].startswith("one repeat a side") and "covers these two runs only" in row["why"]
        needed = row["power"]["repeats_needed"]
        assert needed >= 2 and f"about {needed} see KL 3x 9 times in 10" in row["why"], row
        assert row["tested"]["level"]["call"] == DIFFERENT  # the test on these two runs is still shown

    def test_a_one_repeat_interval_does_not_cover_a_runs_own_drift(self):
        """Why: A/A runs whose difference drifts slowly (AR 0.97, a run's own course): the one-repeat interval of
        the window mean holds 0 far less often than its 90%."""
        rng = np.random.default_rng(3)
        covered = []
        for _ in range(150):
            walk = np.zeros(21)
            for k in range(1, 21):
                walk[k] = 0.97 * walk[k - 1] + rng.normal(0, 0.01)
            row = judged("policy_loss", [dict(enumerate(walk))], [dict.fromkeys(range(21), 0.0)])
            covered.append(row["tested"]["level"]["ci_low"] <= 0 <= row["tested"]["level"]["ci_high"])
        assert np.mean(covered) < 0.85


class TestPower:
    def test_the_power_matches_simulated_repeat_t_tests(self):
        """The noncentral t against a direct simulation of the guard's repeat test (pooled t, Bonferroni)."""
        rng = np.random.default_rng(5)
        effect, bound, spread, repeats, k = 0.12, 0.05, 0.06, 6, 16
        c = rng.normal(effect, spread, (20000, repeats))
        r = rng.normal(0.0, spread, (20000, repeats))
        pooled = np.sqrt((c.var(axis=1, ddof=1) + r.var(axis=1, ddof=1)) / 2) * math.sqrt(2 / repeats)
        from scipy import special

        critical = special.stdtrit(2 * repeats - 2, 1 - 0.05 / k)
        simulated = np.mean(c.mean(axis=1) - r.mean(axis=1) - critical * pooled > bound)
        assert power(effect, bound, spread, repeats, alpha=0.05, family=k) == pytest.approx(simulated, abs=0.01)

    def test_the_repeats_needed_are_the_fewest_with_90_percent_power(self):
        spreads = stated_spreads("approx_kl")
        effects = planted_effects("approx_kl", 200)
        bound = math.log1p(LEARNING_SIGNALS["approx_kl"].margin)
        needed = repeats_needed(effects, bound, spreads, alpha=0.05, family=16)
        at = [
            power(effects["level"], bound, spreads.by_quantity["level"], n, alpha=0.05, family=16) for n in (needed,)
        ]
        below = power(effects["level"], bound, spreads.by_quantity["level"], needed - 1, alpha=0.05, family=16)
        assert at[0] >= POWER > below

    def test_past_the_largest_number_of_repeats_none_is_named(self):
        wide = Spreads(by_quantity={"level": 10.0, "late": 10.0}, source="test")
        assert repeats_needed(planted_effects("reward_mean", 200), 0.05, wide, alpha=0.05, family=16) is None
        assert MAX_REPEATS >= 32

    def test_the_history_spread_is_pooled_between_the_repeats_of_each_run(self):
        """Two runs of three repeats: the pooled SD of log(level) within each run, never across runs."""
        runs = [[0.5, 0.52, 0.48], [0.1, 0.11, 0.09]]
        spread, used = spread_from_runs("grad_norm", runs)
        logs = [np.log(r) for r in runs]
        expected = math.sqrt(sum(float(np.sum((x - x.mean()) ** 2)) for x in logs) / 4)
        assert used == 2 and spread == pytest.approx(expected)
        assert spread_from_runs("grad_norm", [[0.5]]) is None


class TestTheCardSaysSo:
    def test_each_planted_signal_states_its_power_from_the_runs_own_repeats(self, tmp_path):
        _, doc, _ = learning_run(tmp_path)
        rows = {row.signal: row for row in doc.learning[0].signals}
        for name, spec in LEARNING_SIGNALS.items():
            power_row = rows[name].power
            assert (power_row is not None) == (spec.planted is not None and rows[name].margin is not None), name
            if power_row is not None:
                assert power_row.repeats == 3 and power_row.planted == spec.planted.words
                assert "this run's repeats (3 and 3)" in power_row.spread_source

    def test_a_run_with_fewer_repeats_than_needed_says_so_on_its_card(self, tmp_path):
        run_dir, doc, _ = learning_run(tmp_path)
        assert power_warning(doc, "fsdp", "colocate") is None  # 3 repeats of quiet runs see every plant
        row = next(r for r in doc.learning[0].signals if r.signal == "reward_mean")
        row.power = row.power.model_copy(update={"repeats_needed": 41, "power": 0.12})
        warning = power_warning(doc, "fsdp", "colocate")
        assert (
            warning.startswith("Too few repeats for the learning guard") and "(about 41 needed; 12% with 3)" in warning
        )
        card = headline_markdown(doc)
        assert "Too few repeats for the learning guard" in card

    def test_one_repeat_a_side_is_not_judged_on_the_card(self, tmp_path):
        _, doc, _ = learning_run(tmp_path, repeats=1)
        assert {row.verdict for row in doc.learning[0].signals} == {UNSETTLED}
        assert learning_warning(doc, "fsdp", "colocate").startswith("Learning not judged: one repeat a side")
        reward = next(r for r in doc.learning[0].signals if r.signal == "reward_mean")
        assert "stated default" in reward.power.spread_source


def plan_learning_run(tmp_path, monkeypatch, *extra: str):
    return plan_both_frameworks(tmp_path, monkeypatch, "--learning-run", *extra)


def record_learning_repeats(store_url: str, plan: dict, spread: float, runs: int = 2) -> None:
    """`runs` recorded runs of every cell of `plan`, three repeats each whose reward window means differ by `spread`
    (in solve rate, from -1), as `record` stores a learning run's cells."""
    rng = np.random.default_rng(8)
    with HistoryStore(store_url) as store:
        for run in range(runs):
            for cell in plan["cells"]:
                solve = 0.3 * np.exp(rng.normal(0, spread, 3))
                values = [MetricValue(metric="learning.reward_mean", value=0.0, repeat_values=list(2 * solve - 1))]
                series = SeriesKey(
                    preset=plan["preset"], framework=cell["framework"], backend=cell["backend"],
                    layout=cell["layout"], hardware="8x NVIDIA H200", spec_hash=plan["spec_hash"], repeats=3,
                )  # fmt: skip
                recorded = RunToRecord(series=series, cell_id=cell["id"], report_generated_at=f"2026-01-0{run + 1}",
                                       run_dir=f"/runs/{run}", environment={}, values=values)  # fmt: skip
                store.record(recorded, Provenance(), trusted=True, baseline_reset=False)


class TestBeforeTheGpuTimeIsSpent:
    def test_a_learning_run_plan_prints_the_repeats_each_plant_needs_and_their_cost(self, tmp_path, monkeypatch):
        result, plan = plan_learning_run(tmp_path, monkeypatch)
        assert result.exit_code == 0, result.output
        lines = [line for line in result.output.splitlines() if "learning power," in line]
        assert len(lines) == sum(1 for s in LEARNING_SIGNALS.values() if s.planted is not None), lines
        reward = next(line for line in lines if "a 10% lower solve rate" in line)
        needed = int(reward.split("90% with ")[1].split(" ")[0])
        cost = plan_cost(plan, repeats=needed)
        assert f"{cost.gpu_hours('typical', needed):.1f}-{cost.gpu_hours('upper', needed):.1f} GPU-hours" in reward
        assert "this plan has fewer" in reward and "[200 steps; the stated default spread" in reward

    def test_recorded_runs_of_the_same_cells_give_the_spread(self, tmp_path, monkeypatch):
        """A quiet history (runs whose repeats differ by 0.5%) needs fewer repeats than the stated spread; the line
        names the recorded runs it pooled."""
        _, plan = plan_learning_run(tmp_path / "first", monkeypatch)
        store = f"sqlite:///{tmp_path / 'history.db'}"
        record_learning_repeats(store, plan, spread=0.005)
        result, _ = plan_learning_run(tmp_path / "second", monkeypatch, "--cost-store", store)
        reward = next(line for line in result.output.splitlines() if "a 10% lower solve rate" in line)
        assert f"the spread between repeats of {2 * len(plan['cells'])} recorded run(s)" in reward, reward
        assert int(reward.split("90% with ")[1].split(" ")[0]) < 10


class TestAbAndCheckSayIt:
    def test_ab_prints_the_learning_verdicts_and_the_repeats_with_their_cost(self, tmp_path):
        sides = [
            {"role": "candidate", "name": "head", "framework": "miles", "label": "Miles head"},
            {"role": "reference", "name": "base", "framework": "miles", "label": "Miles base"},
        ]
        cells = [SyntheticCell(framework="miles", side=s["name"], repeats=3, seed=i) for i, s in enumerate(sides)]
        run_dir = write_run_folder(tmp_path / "run", cells, sides=sides)
        add_learning(run_dir, {})
        analyse_and_write(run_dir, AnalysisSettings(reps=200), calibration=False)
        spec = load_preset("smoke")
        pair = registry.option_pair(compare_verl=False, miles_version=None)
        options = PlanOptions(backends=("fsdp",), layout="colocate", output_dir=Path("/out"), sides=pair)
        (run_dir / "plan.json").write_text(json.dumps(build_plan(spec, "smoke", options).data))
        ab_impl(run_dir, None)
        verdict = (run_dir / "ab.md").read_text()
        assert "fsdp/colocate learning, head vs base: reward_mean same" in verdict, verdict
        reward = next(line for line in verdict.splitlines() if "learning power, a 10% lower solve rate" in line)
        assert "GPU-hours" in reward and "this run's repeats (3 and 3)" in reward

    def test_check_states_the_power_from_the_historys_repeats(self, tmp_path):
        """Two recorded nights of the same cells: the nightly's check pools their repeats' spread and says so."""
        store = f"sqlite:///{tmp_path / 'history.db'}"
        for night in range(2):
            run_dir, _, _ = learning_run(tmp_path / f"night-{night}")
            record_history(store, run_dir, commit=f"c{night}")
        run_dir, _, _ = learning_run(tmp_path / "tonight")
        _, text, _ = check_history(store, run_dir, tmp_path)
        reward = next(line for line in text.splitlines() if "learning power, a 10% lower solve rate" in line)
        assert "the spread between repeats of 4 recorded run(s)" in reward, reward
        assert "fsdp/colocate" in reward and "paired steps" in reward
