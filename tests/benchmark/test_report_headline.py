"""The headline reads intervals against a practical threshold: on generated runs of 1,200 steps, a 0.5% step-time gap
is "no practical difference" and a 10% gap is "Miles 10% slower (CI ...), mostly in train"; the regression check
prints the same words."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from scripts.benchmark.analysis.document import analyse_run_folder
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.analysis.verdict import Practical, ReportSpec, practical_verdict, verdict_words
from scripts.benchmark.contracts.report import LearningPairModel
from scripts.benchmark.history.check import CheckSettings, check_metric, render_check_markdown
from scripts.benchmark.report.headline import headline_blocks, headline_markdown
from scripts.benchmark.report.render import render_html
from scripts.benchmark.report.render import render_markdown as render_blocks
from scripts.benchmark.report.write import write_report
from scripts.benchmark.spec import BenchmarkSpec, load_preset, spec_hash
from tests.benchmark.synthetic_runs import gap_pair, write_run_folder

REPS = 1000
HALF_PERCENT = {"generate": 0.5}  # 0.5 s of a ~100 s step
TEN_PERCENT = {"train": 8.0, "generate": 2.0}  # 10 s of a ~100 s step, most of it in train


@pytest.fixture(scope="module")
def gap_runs(tmp_path_factory):
    """Run folder and document of the 0.5% and the 10% gap, 1,200 steps each, 1% step-to-step noise."""
    runs = {}
    for name, extra in (("half", HALF_PERCENT), ("ten", TEN_PERCENT)):
        run_dir = write_run_folder(tmp_path_factory.mktemp(name), gap_pair(extra, num_steps=1200, cv=0.01, seed=7))
        doc = analyse_run_folder(run_dir, AnalysisSettings(reps=REPS))
        write_report(doc, run_dir)
        runs[name] = (run_dir, doc)
    return runs


def test_half_percent_gap_is_no_practical_difference(gap_runs):
    run_dir, doc = gap_runs["half"]
    step = next(c for c in doc.comparisons if c.metric == "step_time_s")
    assert step.significant  # detectable with 1,200 steps...
    line = (run_dir / "headline.md").read_text()
    assert re.search(
        r"\*\*fsdp / colocate\*\*: no practical difference \(Miles/VERL step time \+0\.\d\d%, CI \+0\.\d\d% to "
        r"\+0\.\d\d%, inside ±2%\)",
        line,
    ), line  # ...but irrelevant


def test_ten_percent_gap_is_slower_mostly_in_train(gap_runs):
    run_dir, doc = gap_runs["ten"]
    line = (run_dir / "headline.md").read_text()
    found = re.search(
        r"\*\*fsdp / colocate\*\*: Miles 10% slower \(CI \+(\d+\.\d)% to \+(\d+\.\d)%\), mostly in train ", line
    )
    assert found, line
    assert 9 < float(found[1]) <= 10 <= float(found[2]) < 11
    text = (run_dir / "report.md").read_text()
    assert "**Miles 10% slower**" in text.split("\n|", 1)[0]  # the card, before the first table


def test_a_component_with_less_than_half_of_the_gap_is_not_called_mostly(tmp_path):
    spread = {"train": 4.0, "generate": 3.0, "old_logprob": 3.0}  # train carries 40% of a 10 s gap
    run_dir = write_run_folder(tmp_path, gap_pair(spread, num_steps=600, cv=0.01, seed=3))
    write_report(analyse_run_folder(run_dir, AnalysisSettings(reps=REPS)), run_dir)
    line = (run_dir / "headline.md").read_text()
    assert "largest part in train (+" in line and "mostly in" not in line, line


@pytest.mark.parametrize("repeats", [1, 3])
def test_a_card_measured_in_one_repeat_says_its_interval_is_one_run(tmp_path, repeats):
    cells = [dataclasses.replace(c, repeats=repeats) for c in gap_pair(TEN_PERCENT, num_steps=60, cv=0.01, seed=5)]
    run_dir = write_run_folder(tmp_path, cells)
    write_report(analyse_run_folder(run_dir, AnalysisSettings(reps=REPS)), run_dir)
    text = (run_dir / "headline.md").read_text()
    assert text.count("One repeat: the interval covers this run's steps only") == (repeats == 1), text
    cards = [line for line in text.splitlines() if line.startswith("- **")]
    assert not any("One repeat" in card for card in cards)  # said once under the cards, never in a card


def test_headline_markdown_is_one_line_per_pair(tmp_path):
    cells = gap_pair(TEN_PERCENT, num_steps=120) + gap_pair({}, backend="megatron", num_steps=120, seed=3)
    doc = analyse_run_folder(write_run_folder(tmp_path, cells), AnalysisSettings(reps=200))
    lines = [line for line in headline_markdown(doc).splitlines() if line.startswith("- **")]
    assert [line.split("**")[1] for line in lines] == ["fsdp / colocate", "megatron / colocate"]


def test_threshold_declared_in_the_plan_changes_the_verdict(gap_runs, tmp_path):
    """A 25% threshold on step time makes the 10% gap equivalent; the spec hash does not move with it."""
    run_dir, _ = gap_runs["ten"]
    plan = json.loads((run_dir / "plan.json").read_text())
    plan["spec"]["report"] = {"metric_thresholds": {"step_time_s": 0.25}}
    (run_dir / "plan.json").write_text(json.dumps(plan))
    try:
        doc = analyse_run_folder(run_dir, AnalysisSettings(reps=REPS))
    finally:
        del plan["spec"]["report"]
        (run_dir / "plan.json").write_text(json.dumps(plan))
    assert doc.practical_thresholds["step_time_s"] == 0.25 and doc.practical_thresholds["phases_s.train"] == 0.02
    assert "no practical difference" in headline_markdown(doc) and "inside ±25%" in headline_markdown(doc)


def test_report_section_is_validated_and_outside_the_hash():
    spec = load_preset("smoke")
    data = spec.model_dump()
    data["report"] = {"practical_threshold": 0.05}
    assert spec_hash(BenchmarkSpec.model_validate(data)) == spec_hash(spec)
    data["report"] = {"metric_thresholds": {"step_time": 0.05}}
    with pytest.raises(ValueError, match="report.metric_thresholds: unknown metric 'step_time'"):
        BenchmarkSpec.model_validate(data)
    with pytest.raises(ValueError, match=r"report.metric_thresholds.step_time_s: 2.0 is not a fraction"):
        ReportSpec(metric_thresholds={"step_time_s": 2.0})


@pytest.mark.parametrize(
    ("low", "high", "direction", "expected"),
    [
        (0.03, 0.05, "lower", Practical.WORSE),
        (0.03, 0.05, "higher", Practical.BETTER),
        (-0.05, -0.021, "lower", Practical.BETTER),
        (-0.02, 0.02, "lower", Practical.NO_PRACTICAL_DIFFERENCE),
        (0.001, 0.019, "lower", Practical.NO_PRACTICAL_DIFFERENCE),
        (0.01, 0.03, "lower", Practical.INCONCLUSIVE),
        (-0.05, 0.05, "higher", Practical.INCONCLUSIVE),
        (None, 0.01, "lower", Practical.NOT_COMPARED),
    ],
)
def test_practical_verdict_needs_the_whole_interval(low, high, direction, expected):
    assert practical_verdict(low, high, threshold=0.02, direction=direction) is expected


def test_words_follow_the_unit():
    assert (
        verdict_words(Practical.WORSE, "s") == "slower" and verdict_words(Practical.BETTER, "s/1k tokens") == "faster"
    )
    assert verdict_words(Practical.WORSE, "tokens/s") == "worse"


def test_regression_check_speaks_the_same_words():
    rng = np.random.default_rng(0)
    recent = list(100 + rng.normal(0, 0.5, 20))
    settings = CheckSettings()
    slow = check_metric(
        cell_id="c", metric="step_time_s", candidate=110.0, recent=recent, anchor=[], settings=settings
    )
    same = check_metric(
        cell_id="c", metric="step_time_s", candidate=100.2, recent=recent, anchor=[], settings=settings
    )
    text = render_check_markdown([slow, same], title="check", notes=[])
    rows = [line for line in text.splitlines() if line.startswith("| c |")]
    assert "| slower | **REGRESSED** |" in rows[0]
    assert "| no practical difference | UNCHANGED" in rows[1]


def test_learning_signal_warning_shows_in_the_card(gap_runs, tmp_path):
    """The learning-signal guard's word on a pair reaches its card in both renderings."""
    _, doc = gap_runs["half"]

    def pair(verdict: str) -> LearningPairModel:
        signal = {"signal": "reward_mean", "unit": "reward", "margin_kind": "absolute", "margin": 0.05}
        signal |= {"candidate": 1.0, "reference": 0.9, "paired_steps": 10, "difference": 0.1}
        explains = dict.fromkeys(("generate_ratio", "length_ratio", "per_token_ratio", "share"))
        cells = {"candidate_cell": "miles-fsdp-colocate", "reference_cell": "verl-fsdp-colocate"}
        return LearningPairModel.model_validate(
            {"backend": "fsdp", "layout": "colocate", **cells, "from_step": 0, "alpha": 0.05, "available": True}
            | {"signals": [{**signal, "verdict": verdict, "why": "-"}], "series": {}, "length_explains": explains}
        )

    warned = doc.model_copy(update={"learning": [pair("different")]})
    fine = doc.model_copy(update={"learning": [pair("equivalent")]})
    assert "**Warning: learning differs** (reward_mean)" in headline_markdown(warned)
    assert "Warning: learning differs" in render_html(headline_blocks(warned), tmp_path)
    assert "Warning" not in render_blocks(headline_blocks(fine)) and "learning" not in headline_markdown(fine)


MILES_VS_MILES = [
    {"role": "candidate", "name": "miles", "framework": "miles", "label": "Miles", "target": "pr-head"},
    {"role": "reference", "name": "miles-base", "framework": "miles", "label": "Miles (base)", "target": "merge-base"},
]


def test_miles_against_miles_reports_and_records_through_the_same_code(tmp_path):
    """Two sides of one framework (a PR head against its merge base): paired by side, cards with both labels, and
    two recorded series that the history keeps apart."""
    from scripts.benchmark.history.report_input import read_report_runs

    cells = gap_pair(TEN_PERCENT, num_steps=200, cv=0.01, seed=7)
    cells[1].framework, cells[1].side = "miles", "miles-base"
    run_dir = write_run_folder(tmp_path, cells, sides=MILES_VS_MILES)
    doc = analyse_run_folder(run_dir, AnalysisSettings(reps=300))
    written = write_report(doc, run_dir)
    assert {(c.framework, c.side) for c in doc.cells} == {("miles", "miles"), ("miles", "miles-base")}
    step = next(c for c in doc.comparisons if c.metric == "step_time_s")
    assert (step.candidate_cell, step.reference_cell) == ("miles-fsdp-colocate", "miles-base-fsdp-colocate")
    assert step.ratio == pytest.approx(1.1, abs=0.02)
    (cards,) = (b for b in headline_blocks(doc) if hasattr(b, "cards"))
    (card,) = cards.cards
    assert [bar.label for bar in card.bars] == ["Miles", "Miles (base)"]
    assert card.verdict == "Miles 10% slower" and all(bar.total_s for bar in card.bars)
    headline = (run_dir / "headline.md").read_text()
    assert headline.startswith("**Miles vs Miles (base) at a glance**")
    assert "Step time Miles " in headline and " vs Miles (base) " in headline
    report = written["report.md"].read_text()
    assert (
        "# Miles vs Miles (base) throughput report" in report and "## Miles vs Miles (base): fsdp / colocate" in report
    )
    assert not re.search(r"\bverl\b", headline + report.replace("(VERL separate_async)", ""), re.IGNORECASE)
    runs = read_report_runs(run_dir)
    assert {run.series.framework for run in runs} == {"miles"}
    labels = {run.cell_id: run.series.label() for run in runs}
    assert labels["miles-fsdp-colocate"].split("/")[1] == "miles"  # a side named after its framework: as before
    assert labels["miles-base-fsdp-colocate"].split("/")[1] == "miles@miles-base"


def test_a_component_larger_than_the_gap_is_named_with_what_offsets_it(tmp_path):
    """Miles's train is 12.4 s slower and its generate 0.7 s faster: the card never calls the 12.4 s a part "of"
    the 11.7 s gap; it names the faster phase as the offset, with its sign."""
    run_dir = write_run_folder(tmp_path, gap_pair({"train": 12.42, "generate": -0.67}, num_steps=600, cv=0.01, seed=4))
    write_report(analyse_run_folder(run_dir, AnalysisSettings(reps=REPS)), run_dir)
    line = (run_dir / "headline.md").read_text()
    pattern = (
        r", in train \+(\d+\.\d\d) s, offset by rollout_wait -(\d+\.\d\d) s \(\+(\d+\.\d\d) s per step in all\)\."
    )
    found = re.search(pattern, line)
    assert found and " of +" not in line, line
    train, offset, gap = (float(x) for x in found.groups())
    assert 12.0 < train < 12.9 and 0.3 < offset < 1.1 and train - offset == pytest.approx(gap, abs=0.02)


@pytest.mark.parametrize(
    "spread, centre, repeats", [(0.01, 0.01, 3), (0.01, 0.035, 3), (0.006, 0.0, 2), (0.02, 0.0, 5)]
)
def test_repeats_to_settle_is_the_fewest_repeats_whose_interval_is_decisive(spread, centre, repeats):
    """The pooled t interval over n repeats a side, computed here with scipy.stats: at the repeats named it is
    decisive (inside +-2% or wholly beyond), one repeat fewer it is not."""
    from scipy import stats

    from scripts.benchmark.contracts.settle import repeats_to_settle

    def interval(n: int) -> tuple[float, float]:
        half = stats.t.ppf(0.975, 2 * n - 2) * spread * (2 / n) ** 0.5
        return centre - half, centre + half

    needed = repeats_to_settle(*interval(repeats), threshold=0.02, repeats=(repeats, repeats))
    assert needed is not None and needed > repeats
    assert practical_verdict(*interval(needed), threshold=0.02, direction="lower") is not Practical.INCONCLUSIVE
    assert practical_verdict(*interval(needed - 1), threshold=0.02, direction="lower") is Practical.INCONCLUSIVE


def test_an_inconclusive_pair_at_high_noise_says_how_many_repeats_would_settle_it(tmp_path):
    """CV 10% per step, 3 repeats of 60 steps, a 1% gap: the interval crosses the 2% threshold; the headline names
    the repeats a side that would settle it, the number repeats_to_settle gives; so does the paired check (its own
    interval, against its 3% threshold)."""
    import math

    from scripts.benchmark.contracts.settle import repeats_to_settle
    from scripts.benchmark.history.pair_check import THRESHOLD, look, pair_units

    cells = [dataclasses.replace(c, repeats=3) for c in gap_pair({"train": 1.0}, num_steps=60, cv=0.10, seed=0)]
    doc = analyse_run_folder(write_run_folder(tmp_path, cells), AnalysisSettings(reps=200))
    step = next(c for c in doc.comparisons if c.metric == "step_time_s")
    assert step.verdict is Practical.INCONCLUSIVE, step
    needed = repeats_to_settle(step.ci_low - 1, step.ci_high - 1, threshold=step.threshold, repeats=(3, 3))
    assert needed is not None and needed > 3
    assert f"about {needed} repeats a side would settle it (--repeats {needed}; 3 now)" in headline_markdown(doc)
    [(head, base)] = pair_units(doc).values()
    decided = look(head, base, round_number=3, alpha=0.024, final=True)
    assert decided.decision == "INCONCLUSIVE", decided
    low, high = decided.ci_low - 1, decided.ci_high - 1
    settle = repeats_to_settle(low, high, threshold=THRESHOLD, repeats=(3, 3))
    assert not math.isclose(abs((low + high) / 2), THRESHOLD)
    assert (
        decided.note
        == f"inconclusive with 3 repeats a side: about {settle} a side would settle it (--repeats {settle})"
    )
