"""Do both learn the same? Learning signals read from both frameworks' sinks, judged for equivalence, reported.

The VERL side is written by the real FileLogger of the VERL 0.9.1 wheel with the key names its metric code
produces (checked against the wheel's source below), and read from two small sinks VERL's own metric functions
wrote (fixtures/verl-metric-code). The metric functions are not run by the suite: `import verl` pulls in ray and
tensordict (~250 MB), too heavy for CI. The Miles side is built call by call as test_miles_reader.py does,
with the key names of Miles's log calls (docs/benchmark/metrics.md names the files that log them).
"""

import json
import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from scripts.benchmark.analysis.learning import (
    DIFFERENT,
    SAME,
    UNSETTLED,
    between_repeats,
    equivalence_test,
    learning_settings,
)
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.commands.report import analyse_and_write
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.sinks import build_step_records
from scripts.benchmark.frameworks.verl.learning import VERL_CLIP_RATIO_KEY, VERL_LEARNING_KEYS, VERL_LENGTH_MAX_KEY
from scripts.benchmark.history.report_input import read_report_runs
from scripts.benchmark.plan.build import PlanOptions, build_plan
from scripts.benchmark.report.learning import learning_warning
from scripts.benchmark.runner.sink_follower import build_run_context
from scripts.benchmark.spec import BenchmarkSpec, load_preset, spec_hash, spec_json
from tests.benchmark.history_fixtures import write_report as write_history_report
from tests.benchmark.synthetic_runs import SyntheticCell, write_run_folder
from tests.benchmark.test_history import _check as check_history
from tests.benchmark.test_history import _record as record_history
from tests.benchmark.test_metrics_cli import run_cli
from tests.benchmark.test_miles_reader import TRAIN_RANK, miles_log_calls, stdout_text, write_event_log
from tests.benchmark.test_verl_reader import load_file_logger_class, verl_step_metrics

from miles.utils.bench_metrics import LEARNING_SIGNALS, RunContext, StepRecord, read_records, write_records

MAX_RESPONSE = 4096
VERL_CTX = RunContext.build(arch=None, num_train_gpus=8, max_response_tokens=MAX_RESPONSE)


def verl_learning_data(step: int, *, longest: float) -> dict:
    data = verl_step_metrics(step, gen=40.0, update_actor=20.0, prompt_mean=180.5, response_mean=1450.25)
    data.update(
        {
            "critic/score/mean": 0.25 + step / 100,
            "response_length/max": longest,
            "response_length/clip_ratio": 0.0625,
            "actor/entropy": 0.5,
            "actor/pg_clipfrac": 0.0125,
            "actor/ppo_kl": 0.0004,
            "actor/grad_norm": np.float64(0.87),
            "actor/pg_loss": -0.0123,
        }
    )
    return data


@pytest.fixture
def verl_records(verl_root, tmp_path, monkeypatch):
    path = tmp_path / "verl.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    logger = load_file_logger_class(verl_root)("bench", "verl-learning")
    logger.log(data=verl_learning_data(1, longest=MAX_RESPONSE), step=1)  # some samples hit the cap
    logger.log(data=verl_learning_data(2, longest=2900.0), step=2)  # none did: clip_ratio counts the batch max
    missing = verl_learning_data(3, longest=MAX_RESPONSE)
    del missing["actor/entropy"]  # rollout_correction.bypass_mode: no old-log-prob pass, no entropy
    logger.log(data=missing, step=3)
    logger.finish()
    return path


class TestVerlLearning:
    def test_every_key_read_is_spelled_in_the_verl_wheel(self, verl_root):
        source = "".join(p.read_text(encoding="utf-8") for p in (verl_root / "verl").rglob("*.py"))
        for key in [*VERL_LEARNING_KEYS.values(), VERL_CLIP_RATIO_KEY, VERL_LENGTH_MAX_KEY]:
            assert f'"{key}"' in source, key

    def test_the_reader_fills_learning_in_schema_units(self, verl_records):
        first = build_step_records("verl", [verl_records], VERL_CTX)[0]
        assert first.learning == {
            "reward_mean": 0.26,
            "response_length_mean": 1450.25,
            "truncation_fraction": 0.0625,
            "entropy": 0.5,
            "clip_fraction": 0.0125,
            "approx_kl": 0.0004,
            "grad_norm": 0.87,
            "policy_loss": -0.0123,
        }

    def test_the_batch_max_clip_ratio_is_no_truncation_below_the_cap(self, verl_records):
        records = build_step_records("verl", [verl_records], VERL_CTX)
        assert records[1].learning["truncation_fraction"] == 0.0

    def test_a_signal_not_logged_is_null_with_a_flag(self, verl_records):
        third = build_step_records("verl", [verl_records], VERL_CTX)[2]
        assert third.learning["entropy"] is None and "learning_missing:entropy" in third.flags

    def test_without_the_cap_the_truncation_is_unknown_not_guessed(self, verl_records):
        ctx = RunContext.build(arch=None, num_train_gpus=8)
        first = build_step_records("verl", [verl_records], ctx)[0]
        assert first.learning["truncation_fraction"] is None
        assert any(f.startswith("learning_unknown:truncation_fraction") for f in first.flags)

    def test_records_round_trip_and_old_records_still_load(self, verl_records, tmp_path):
        records = build_step_records("verl", [verl_records], VERL_CTX)
        write_records(tmp_path / "m.jsonl", records)
        assert read_records(tmp_path / "m.jsonl")[0].learning == records[0].learning
        old = json.loads(records[0].to_json())
        del old["learning"]
        assert StepRecord.from_json(json.dumps(old)).learning == {}


VERL_METRIC_CODE_SINKS = Path(__file__).resolve().parent / "fixtures" / "verl-metric-code"


class TestVerlMetricCodeOutput:
    """Sinks whose learning keys VERL 0.9.1's own code computed on CPU (compute_data_metrics on a jagged batch padded
    by to_padded_tensor() as the V1 trainer does, agg_loss, compute_policy_loss_vanilla per micro-batch, Metric and
    reduce_metrics, FileLogger), from synthetic lengths, rewards and log-probs: 16 prompts x 4 samples, 4 steps.
    Made once with the wheel, ray and tensordict importable; the suite reads the files (see the module docstring)."""

    def read(self, name: str, cap: int) -> list[StepRecord]:
        ctx = RunContext.build(arch=None, num_train_gpus=8, max_response_tokens=cap)
        return build_step_records("verl", [VERL_METRIC_CODE_SINKS / name], ctx)

    def test_every_signal_is_read_from_the_real_keys(self):
        for record in self.read("uncapped-1024.jsonl", 1024):
            for name, key in VERL_LEARNING_KEYS.items():
                assert record.learning[name] == pytest.approx(record.raw[key]), name
            assert not any(f.startswith("learning_") for f in record.flags)

    def test_the_v1_batch_max_clip_ratio_is_corrected(self):
        uncapped = self.read("uncapped-1024.jsonl", 1024)
        assert all(r.raw[VERL_CLIP_RATIO_KEY] > 0 and r.raw[VERL_LENGTH_MAX_KEY] < 1024 for r in uncapped)
        assert all(r.learning["truncation_fraction"] == 0.0 for r in uncapped)
        capped = self.read("capped-256.jsonl", 256)
        assert all(r.learning["truncation_fraction"] == r.raw[VERL_CLIP_RATIO_KEY] > 0.1 for r in capped)


OPTIMIZER_STEPS = 2


def miles_learning_calls(rollouts: range) -> list:
    """The reader test's calls with the real learning keys: rollout fields on the train rank's `rollout N:` dict,
    `train/*` per optimizer step (two per rollout), numbered by train step."""
    calls = []
    for identity, step_key, metrics in miles_log_calls(rollouts):
        if step_key == "train/step":
            k = metrics["train/step"]
            for step_id in range(OPTIMIZER_STEPS):
                t = k * OPTIMIZER_STEPS + step_id
                train = {
                    "train/loss": 0.01,
                    "train/pg_loss": -0.01 * (t + 1),
                    "train/entropy_loss": 0.0,  # not computed: entropy_coef 0
                    "train/pg_clipfrac": 0.001 * (t + 1),
                    "train/ppo_kl": 0.0001 * (t + 1),
                    "train/grad_norm": 0.5 + t,
                    "train/step": t,
                }
                calls.append((TRAIN_RANK, "train/step", train))
            continue
        if identity == TRAIN_RANK and "rollout/raw_reward" in metrics:
            metrics = {**metrics, "rollout/rewards": 0.0, "rollout/truncated": 0.03125, "rollout/entropy": 0.45}
        calls.append((identity, step_key, metrics))
    return calls


class TestMilesLearning:
    CTX = RunContext.build(arch=None, num_train_gpus=8, optimizer_steps_per_step=OPTIMIZER_STEPS)

    def expected(self, step: int) -> dict:
        t = [(step - 1) * OPTIMIZER_STEPS + i for i in range(OPTIMIZER_STEPS)]
        return {
            "reward_mean": 0.4375,  # rollout/raw_reward, not the group-normalised rollout/rewards
            "response_length_mean": 1500.0 + 10 * (step - 1),
            "truncation_fraction": 0.03125,
            "entropy": 0.45,
            "clip_fraction": pytest.approx(np.mean([0.001 * (x + 1) for x in t])),
            "approx_kl": pytest.approx(np.mean([0.0001 * (x + 1) for x in t])),
            "grad_norm": pytest.approx(np.mean([0.5 + x for x in t])),
            "policy_loss": pytest.approx(np.mean([-0.01 * (x + 1) for x in t])),
        }

    def test_event_log_train_steps_are_averaged_into_their_rollout(self, tmp_path):
        folder = write_event_log(tmp_path / "events", miles_learning_calls(range(3)))
        records = build_step_records("miles", [folder], self.CTX)
        for record in records:
            assert record.learning == self.expected(record.step)

    def test_megatron_double_printed_stdout_lines_give_the_same_values(self, tmp_path):
        text = stdout_text(miles_learning_calls(range(3)))
        doubled = "\n".join(line + ("\n" + line if " - step " in line else "") for line in text.splitlines())
        log = tmp_path / "log.txt"
        log.write_text(doubled + "\n")
        records = build_step_records("miles", [log], self.CTX)
        assert [r.learning for r in records] == [self.expected(r.step) for r in records]
        assert not any("duplicate" in f or "restart" in f for r in records for f in r.flags)

    def test_a_rollout_with_missing_train_steps_is_flagged(self, tmp_path):
        calls = miles_learning_calls(range(2))
        calls = [c for c in calls if c[2].get("train/step") != 3]  # the run died inside rollout 1's training
        records = build_step_records("miles", [write_event_log(tmp_path / "e", calls)], self.CTX)
        assert "learning:partial_train_steps:1/2" in records[1].flags
        assert records[1].learning["grad_norm"] == 2.5


def learning_values(step: int, rng: np.random.Generator, difficulty: float, record: StepRecord, **drift) -> dict:
    """Signals of a learning policy: a shared trend and prompt difficulty, side-specific sampling noise."""
    on = step >= drift.get("after", 0)
    return {
        "reward_mean": 0.3
        + 0.3 * step / 80
        + difficulty
        + rng.normal(0, 0.01)
        + (drift.get("reward", 0) + drift.get("reward_growth", 0) * (step - drift.get("after", 0)) / 40 if on else 0),
        "response_length_mean": record.tokens["response"] / record.samples,
        "truncation_fraction": max(0.0, 0.02 + rng.normal(0, 0.002)),
        "entropy": 0.5
        * (1 - step / 200)
        * (1 + rng.normal(0, 0.01))
        * (1 - drift.get("entropy_collapse", 0) * step / 80),
        "clip_fraction": 0.01 + rng.normal(0, 0.0005),
        "approx_kl": 0.0005 + rng.normal(0, 0.00005),
        "grad_norm": 0.3 * math.exp(rng.normal(0, 0.05)),
        "policy_loss": rng.normal(0, 0.01),
    }


def add_learning(run_dir: Path, drift_by_framework: dict[str, dict]) -> None:
    """Give every record of the folder its learning block; the plan declares matching aggregations."""
    difficulty = np.random.default_rng(7).normal(0, 0.03, 200)
    for path in sorted(run_dir.rglob("metrics.jsonl")):
        records = read_records(path)
        framework = records[0].framework
        rng = np.random.default_rng(zlib.crc32(str(path.relative_to(run_dir)).encode()))
        for r in records:
            r.learning = learning_values(r.step, rng, difficulty[r.step], r, **drift_by_framework.get(framework, {}))
        write_records(path, records)
    plan = json.loads((run_dir / "plan.json").read_text())
    plan["spec"]["grpo"] = {"loss_aggregation": "seq-mean-token-mean"}
    plan["spec"]["batch"] = {"prompts_per_step": 32, "samples_per_prompt": 8, "samples_per_optimizer_step": 64}
    (run_dir / "plan.json").write_text(json.dumps(plan))


def learning_run(tmp_path: Path, *, miles_drift: dict | None = None, miles_length: float = 3000.0, repeats: int = 3):
    cells = [
        SyntheticCell(
            framework="miles",
            response_length=miles_length,
            phase_means={"generate": 60.0 * miles_length / 3000, "old_logprob": 8.0, "train": 30.0},
            seed=1,
            repeats=repeats,
        ),
        SyntheticCell(framework="verl", seed=2, repeats=repeats),
    ]
    run_dir = write_run_folder(tmp_path / "run", cells)
    add_learning(run_dir, {"miles": miles_drift or {}})
    return run_dir, *analyse_and_write(run_dir, AnalysisSettings(reps=400), calibration=False)


def verdicts(doc: dict) -> dict[str, str]:
    return {row.signal: row.verdict for row in doc.learning[0].signals}


class TestEquivalenceVerdicts:
    def test_equal_learning_is_called_equivalent_and_the_headline_has_no_warning(self, tmp_path):
        run_dir, doc, written = learning_run(tmp_path)
        assert set(verdicts(doc).values()) == {SAME}, verdicts(doc)  # every signal judged by default
        assert learning_warning(doc, "fsdp", "colocate") is None
        assert "learning differs" not in (run_dir / "report.md").read_text()
        assert "learning.svg" in written and "## Do both learn the same?" in (run_dir / "report.md").read_text()

    def test_a_planted_reward_drift_is_called_different_and_warned_in_the_headline(self, tmp_path):
        # +0.2 on a -1/+1 score whose level (from -1) is about 1.45: a 14% higher solve rate, > 2x the 5% margin
        run_dir, doc, _ = learning_run(tmp_path, miles_drift={"reward": 0.2, "after": 0})
        assert verdicts(doc)["reward_mean"] == DIFFERENT
        row = next(r for r in doc.learning[0].signals if r.signal == "reward_mean")
        assert row.ci_low > 0.05 and row.difference == pytest.approx(0.2 / 1.45, rel=0.2)
        verdict = (run_dir / "report.md").read_text().split("## At a glance", 1)[1].split("\n## ", 1)[0]
        pair_line = next(line for line in verdict.splitlines() if "**fsdp / colocate**" in line)
        assert "Warning: learning differs" in pair_line and "reward_mean" in pair_line

    def test_a_planted_length_drift_is_called_different_and_explains_the_generate_gap(self, tmp_path):
        run_dir, doc, _ = learning_run(tmp_path, miles_length=3900.0)  # responses x1.3 from the start
        assert verdicts(doc)["response_length_mean"] == DIFFERENT
        explains = doc.learning[0].length_explains
        assert explains.length_ratio == pytest.approx(1.3, rel=0.03)
        assert explains.generate_ratio == pytest.approx(1.3, rel=0.05)
        assert explains.per_token_ratio == pytest.approx(1.0, abs=0.05)
        assert explains.share == pytest.approx(1.0, abs=0.2)
        assert "response_length_mean" in learning_warning(doc, "fsdp", "colocate")

    def entropy_under_token_mean(self, tmp_path, miles_drift: dict) -> dict:
        run_dir, _, _ = learning_run(tmp_path, miles_drift=miles_drift)
        plan = json.loads((run_dir / "plan.json").read_text())
        plan["spec"]["grpo"]["loss_aggregation"] = "token-mean"
        (run_dir / "plan.json").write_text(json.dumps(plan))
        doc, _ = analyse_and_write(run_dir, AnalysisSettings(reps=200), calibration=False)
        return next(r for r in doc.learning[0].signals if r.signal == "entropy")

    def test_entropy_is_judged_on_its_drift_when_the_aggregations_differ(self, tmp_path):
        """The default spec's aggregations differ: the levels are not compared, a collapse on one side still is."""
        same = self.entropy_under_token_mean(tmp_path / "same", {})
        assert same.verdict == SAME and "levels not compared" in same.why and set(same.tested) == {"drift"}
        collapsed = self.entropy_under_token_mean(tmp_path / "collapse", {"entropy_collapse": 0.4})
        assert collapsed.verdict == DIFFERENT and collapsed.tested["drift"].ci_high < -0.15

    def test_a_divergence_that_grows_is_called_different(self, tmp_path):
        """Reward falls behind from step 40 on, 0.24 (about 15% of its level from -1) by step 80: the last third is
        beyond the margin, the window mean is not (a whole-window test alone would leave it unsettled)."""
        _, doc, _ = learning_run(tmp_path, miles_drift={"reward_growth": -0.24, "after": 40})
        row = next(r for r in doc.learning[0].signals if r.signal == "reward_mean")
        assert row.verdict == DIFFERENT and "last third" in row.why, row
        assert row.tested["level"].call != DIFFERENT and row.tested["level"].ci_low > -0.05 * 1.2
        assert row.tested["late"].ci_high < -0.05
        assert "Warning: learning differs" in learning_warning(doc, "fsdp", "colocate")

    def test_records_without_learning_signals_say_so_beside_the_verdict(self, tmp_path):
        run_dir = write_run_folder(
            tmp_path / "run", [SyntheticCell(framework="miles"), SyntheticCell(framework="verl")]
        )
        doc, _ = analyse_and_write(run_dir, AnalysisSettings(reps=200), calibration=False)
        assert "no learning signals" in learning_warning(doc, "fsdp", "colocate")
        assert "Learning not compared" in (run_dir / "report.md").read_text().split("## At a glance", 1)[1]


class TestEquivalenceTest:
    rng = np.random.default_rng(3)

    def test_three_way_call(self):
        noise = self.rng.normal(0, 0.01, 60)
        assert equivalence_test(noise, 0.05, alpha=0.05, family=7)["verdict"] == SAME
        assert equivalence_test(noise + 0.12, 0.05, alpha=0.05, family=7)["verdict"] == DIFFERENT
        assert equivalence_test(noise + 0.05, 0.05, alpha=0.05, family=7)["verdict"] == UNSETTLED

    def test_too_few_paired_steps_cannot_tell(self):
        result = equivalence_test(np.zeros(4), 0.05, alpha=0.05, family=1)
        assert result["verdict"] == UNSETTLED and "4 paired steps" in result["why"]

    def test_24_noisy_steps_are_never_same_and_name_the_steps_that_would_tell(self):
        """Noise sd 0.1 against a 0.02 margin: at 24 steps the intervals are wider than the margin, so never
        "same"; the steps named, at the same noise and no true gap, mostly do tell "same"."""
        rng = np.random.default_rng(5)
        needed = []
        for _ in range(50):
            result = equivalence_test(rng.normal(0, 0.1, 24), 0.02, alpha=0.05, family=8)
            assert result["ci_high"] - result["ci_low"] > 2 * 0.02 and result["verdict"] != SAME
            if result["verdict"] == UNSETTLED and result["steps_needed"] is not None:
                assert (
                    result["steps_needed"] > 24
                    and f"about {result['steps_needed']} paired steps would tell" in result["why"]
                )
                needed.append(result["steps_needed"])
        steps = int(np.median(needed))
        settled = [equivalence_test(rng.normal(0, 0.1, steps), 0.02, alpha=0.05, family=8) for _ in range(40)]
        assert np.mean([r["verdict"] == SAME for r in settled]) >= 0.5


class TestRunToRunVariation:
    def a_a_pair(self, rng: np.random.Generator, repeats: int = 3, steps: int = 60) -> tuple:
        """Both sides alike; each repeat has its own persistent offset (sd 0.02) on top of step noise (sd 0.01)."""
        step_ids = list(range(steps))

        def side() -> list[dict[int, float]]:
            return [
                dict(zip(step_ids, 0.5 + rng.normal(0, 0.02) + rng.normal(0, 0.01, steps), strict=True))
                for _ in range(repeats)
            ]

        c, r = side(), side()
        d = np.asarray([np.mean([x[s] for x in c]) - np.mean([x[s] for x in r]) for s in step_ids])
        return d, between_repeats(c, r, step_ids, "absolute", False)

    def test_repeats_put_run_to_run_variation_in_the_interval(self):
        """A/A with run-to-run offsets: the 90% interval of the window mean excludes 0 in about 10% of pairs with
        the repeats as the unit; from the step means alone it is far too narrow."""
        rng = np.random.default_rng(11)
        pairs = [self.a_a_pair(rng) for _ in range(150)]

        def excludes_zero(d, between) -> bool:
            level = equivalence_test(d, 0.02, alpha=0.05, family=1, between=between)["tested"]["level"]
            return level["ci_low"] > 0 or level["ci_high"] < 0

        with_repeats = np.mean([excludes_zero(d, between) for d, between in pairs])
        steps_only = np.mean([excludes_zero(d, None) for d, _ in pairs])
        assert with_repeats <= 0.10 + 1.645 * math.sqrt(0.09 / 150) and steps_only > 0.3, (with_repeats, steps_only)

    def test_not_enough_repeats_names_the_repeats(self):
        """Two repeats a side that disagree by 0.04 between themselves: the steps cannot settle it, repeats can."""
        rng = np.random.default_rng(2)
        steps = list(range(60))
        c = [dict(zip(steps, 0.5 + offset + rng.normal(0, 0.01, 60), strict=True)) for offset in (0.02, -0.02)]
        r = [dict(zip(steps, 0.5 + offset + rng.normal(0, 0.01, 60), strict=True)) for offset in (0.01, -0.01)]
        d = np.asarray([np.mean([x[s] for x in c]) - np.mean([x[s] for x in r]) for s in steps])
        result = equivalence_test(
            d, 0.02, alpha=0.05, family=8, between=between_repeats(c, r, steps, "absolute", False)
        )
        assert result["verdict"] == UNSETTLED and "repeats a side would tell" in result["why"], result
        assert f"about {result['repeats_needed']} repeats a side" in result["why"] and result["steps_needed"] is None
        assert equivalence_test(d, 0.02, alpha=0.05, family=8)["verdict"] == SAME  # the step means alone: too sure


def report_with_learning(run_dir: Path, *, seed: int, reward: float) -> Path:
    """A history report (history_fixtures) whose cell carries the learning values `run.py report` writes."""
    path = write_history_report(run_dir, seed=seed, generated_at=f"2026-11-{1 + seed:02d}T00:00:00+00:00")
    report = json.loads(path.read_text())
    rng = np.random.default_rng(seed)
    values = {"reward_mean": reward, "response_length_mean": 3000.0 * (1 + rng.normal(0, 0.01)), "policy_loss": 0.5}
    report["cells"][0]["learning"] = {
        name: {"value": value, "repeat_values": [value, value], "unit": LEARNING_SIGNALS[name].unit}
        for name, value in values.items()
    }
    path.write_text(json.dumps(report))
    return run_dir


class TestLearningHistory:
    def test_signals_are_stored_and_a_change_beyond_the_margin_is_reported_as_learning(self, tmp_path):
        store_url = f"sqlite:///{tmp_path / 'history.db'}"
        for i in range(5):
            record_history(store_url, report_with_learning(tmp_path / f"n{i}", seed=i, reward=0.40), commit=f"c{i}")
        runs = read_report_runs(tmp_path / "n0")
        stored = {v.metric: v.value for v in runs[0].values}
        assert stored["learning.reward_mean"] == 0.40 and stored["learning.entropy"] is None
        same_code, same_text, _ = check_history(
            store_url, report_with_learning(tmp_path / "a", seed=9, reward=0.41), tmp_path
        )
        code, text, _ = check_history(store_url, report_with_learning(tmp_path / "b", seed=9, reward=0.55), tmp_path)
        assert "learning changed" not in same_text
        # math_dapo's -1/+1 score: the level is measured from -1, so 0.40 -> 0.55 is a 10.7% higher solve rate
        assert "learning changed: `miles-fsdp-colocate` reward_mean 0.4 -> 0.55 (+10.7%, margin ±5%)" in text
        assert code == same_code  # a learning change is reported, not gated as speed


class TestCheckMargins:
    def test_check_judges_with_the_margins_the_report_used(self, tmp_path):
        """A spec that widens the reward margin to 0.2 widens it for `check` too."""
        store_url = f"sqlite:///{tmp_path / 'history.db'}"
        for i in range(5):
            record_history(store_url, report_with_learning(tmp_path / f"n{i}", seed=i, reward=0.40), commit=f"c{i}")
        moved = report_with_learning(tmp_path / "b", seed=9, reward=0.55)
        _, default_text, _ = check_history(store_url, moved, tmp_path)
        report = json.loads((moved / "report.json").read_text())
        report["learning_margins"] = {"reward_mean": 0.2}
        (moved / "report.json").write_text(json.dumps(report))
        _, wide_text, _ = check_history(store_url, moved, tmp_path)
        assert "reward_mean 0.4 -> 0.55" in default_text and "reward_mean" not in wide_text

    def test_the_report_writes_the_spec_margins(self, tmp_path):
        run_dir, _, _ = learning_run(tmp_path)
        plan = json.loads((run_dir / "plan.json").read_text())
        plan["spec"]["learning"] = {"margins": {"reward_mean": 0.2, "grad_norm": None}}
        (run_dir / "plan.json").write_text(json.dumps(plan))
        doc, _ = analyse_and_write(run_dir, AnalysisSettings(reps=200), calibration=False)
        assert doc.learning_margins["reward_mean"] == 0.2 and doc.learning_margins["grad_norm"] is None
        assert doc.learning_margins["entropy"] == LEARNING_SIGNALS["entropy"].margin


class TestLearningSettings:
    def test_the_spec_section_overrides_margins_and_stays_out_of_the_hash(self):
        spec = load_preset("smoke")
        raw = spec.model_dump()
        raw["learning"] = {"margins": {"reward_mean": 0.1, "policy_loss": 0.02}, "from_step": 5}
        custom = BenchmarkSpec.model_validate(raw)
        assert spec_hash(custom) == spec_hash(spec)
        settings = learning_settings({"spec": spec_json(custom)})
        assert (
            settings.margin("reward_mean") == 0.1
            and settings.margin("entropy") == LEARNING_SIGNALS["entropy"].margin
            and settings.from_step == 5
        )

    def test_an_unknown_signal_or_a_nonpositive_margin_is_named(self):
        raw = load_preset("smoke").model_dump()
        for margins, expected in (({"rewards": 0.1}, "unknown signal 'rewards'"), ({"grad_norm": 0}, "grad_norm")):
            raw["learning"] = {"margins": margins}
            with pytest.raises(ValueError, match=expected):
                BenchmarkSpec.model_validate(raw)

    def test_plan_cells_carry_what_the_readers_need_and_the_follower_passes_it_on(self):
        spec = load_preset("smoke")
        sides = registry.option_pair(compare_verl=True, miles_version=None)
        options = PlanOptions(backends=("fsdp",), layout="colocate", output_dir=Path("/out"), sides=sides)
        for cell in build_plan(spec, "smoke", options).data["cells"]:
            assert cell["optimizer_steps_per_step"] == spec.batch.optimizer_steps_per_step
            assert cell["max_response_tokens"] == spec.lengths.max_response
            ctx = build_run_context({"cell": cell})
            assert (ctx.optimizer_steps_per_step, ctx.max_response_tokens) == (
                spec.batch.optimizer_steps_per_step,
                spec.lengths.max_response,
            )

    def test_ingest_takes_the_two_numbers_as_options(self, tmp_path):
        folder = write_event_log(tmp_path / "events", miles_learning_calls(range(3)))
        out = tmp_path / "metrics.jsonl"
        result = run_cli(
            "ingest", "--framework", "miles", "--model", "qwen3-4b", "--gpus", "8", "--optimizer-steps-per-step", "2",
            "--max-response-tokens", "8192", str(folder), "-o", str(out),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert read_records(out)[1].learning["grad_norm"] == 3.0  # train steps 2 and 3
