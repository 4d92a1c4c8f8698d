"""`run.py report` end to end on generated run folders with a known warm-up, a planted 25% gap and a no-gap pair."""

import errno
import json
import math
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import typer
from scripts.benchmark.analysis.document import analyse_run_folder
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.commands.report import register, report_impl
from scripts.benchmark.contracts.parity import parse_parity, unexplained
from scripts.benchmark.contracts.report import validate_report_file
from scripts.benchmark.errors import wrap_commands
from scripts.benchmark.report.plots import phase_bars_size_px, ratio_chart_size_px, step_times_size_px
from scripts.benchmark.report.write import write_report
from tests.benchmark.synthetic_runs import SyntheticCell, gap_pair, matched_parity, write_run_folder
from typer.testing import CliRunner

WARMUP_STEPS = 12
REPS = 1000
SLOW_GENERATE = {"generate": 75.0, "old_logprob": 8.0, "ref_logprob": 0.0, "train": 30.0}


def planted_cells() -> list[SyntheticCell]:
    """FSDP: Miles's generate phase 25% slower (75 s vs 60 s). Megatron: the same workload on both sides."""
    common = {"warmup_steps": WARMUP_STEPS, "num_steps": 80}
    return [
        SyntheticCell(framework="miles", backend="fsdp", phase_means=SLOW_GENERATE, seed=11, **common),
        SyntheticCell(framework="verl", backend="fsdp", seed=12, **common),
        SyntheticCell(framework="miles", backend="megatron", seed=13, **common),
        SyntheticCell(
            framework="verl",
            backend="megatron",
            seed=14,
            nan_steps=(40, 41),
            unreported_phases=("old_logprob",),
            **common,
        ),
    ]


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory) -> tuple[Path, dict]:
    run_dir = write_run_folder(tmp_path_factory.mktemp("planted"), planted_cells())
    doc, _ = report_impl(run_dir, AnalysisSettings(reps=REPS))
    return run_dir, doc


def comparison(doc: dict, backend: str, metric: str) -> dict:
    return next(c for c in doc.comparisons if c.backend == backend and c.metric == metric)


def svg_size(path: Path) -> tuple[int, int]:
    """The pixel size an SVG chart declares (and its viewBox agrees with); parsing it proves it is well-formed."""
    root = ET.parse(path).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg", f"{path} is not an SVG"
    size = int(root.get("width")), int(root.get("height"))
    assert root.get("viewBox") == f"0 0 {size[0]} {size[1]}"
    return size


def markdown_tables(text: str) -> list[list[str]]:
    """Every pipe table of a markdown text, as its list of lines."""
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def table_columns(line: str) -> int:
    return len(re.split(r"(?<!\\)\|", line.strip())) - 2


class TestPlantedDifferences:
    def test_warmup_found_in_every_cell(self, planted_run):
        """Truth: 12 warm-up steps. MSER may drop a few more steps, never keep a slow one."""
        _, doc = planted_run
        for cell in doc.cells:
            steady = cell.steady_state
            assert steady.reached, cell.id
            assert WARMUP_STEPS <= steady.start_step <= WARMUP_STEPS + 5, (cell.id, steady)

    def test_planted_25_percent_generate_gap_is_found(self, planted_run):
        _, doc = planted_run
        generate = comparison(doc, "fsdp", "phases_s.generate")
        assert generate.ci_low < 1.25 < generate.ci_high
        assert generate.ci_low > 1.0 and generate.significant
        assert 1.2 < generate.ratio < 1.3
        assert "block bootstrap" in generate.method

    def test_other_phases_of_the_planted_pair_are_not_significant(self, planted_run):
        _, doc = planted_run
        for metric in ("phases_s.train", "phases_s.old_logprob", "train_tflops_per_gpu"):
            row = comparison(doc, "fsdp", metric)
            assert row.ci_low < 1.0 < row.ci_high, row

    def test_attribution_puts_the_gap_in_the_wait_for_generation(self, planted_run):
        """The planted gap is 15 s of generation per step, which the synchronous trainer waits for: attribution
        (additive phases only) finds it in rollout_wait and nowhere else."""
        _, doc = planted_run
        rows = {a.component: a for a in doc.attribution if a.backend == "fsdp"}
        assert "phases_s.generate" not in rows
        generate = rows["phases_s.rollout_wait"]
        assert generate.ci_low < 15.0 < generate.ci_high
        assert generate.share_of_gap > 0.9
        assert rows["phases_s.train"].ci_low < 0 < rows["phases_s.train"].ci_high
        total = sum(r.gap_s for k, r in rows.items() if k != "step_time_s" and r.gap_s is not None)
        assert total == pytest.approx(rows["step_time_s"].gap_s)

    def test_no_difference_pair_keeps_one_inside_every_ci(self, planted_run):
        _, doc = planted_run
        rows = [c for c in doc.comparisons if c.backend == "megatron" and c.ratio is not None]
        assert {r.metric for r in rows} >= {"step_time_s", "phases_s.generate", "phases_s.train"}
        step = next(r for r in rows if r.metric == "step_time_s")
        assert step.ci_low < 1.0 < step.ci_high and not step.significant, step
        # Every other row is a 95% interval (the throughputs jointly, the rest per metric), not the 99.7% each of a
        # Bonferroni over 15 rows. On this seed Miles's train phase and token counts are off by a chance 2 SDs each,
        # and only the rows computed from them may show it; statistical coverage is validated on many seeds in
        # test_statistics_validation.py.
        from_train = {
            "response_length_mean",
            "phases_s.train",
            "train_s_per_1k_tokens",
            "train_tflops_per_gpu",
            "train_mfu",
            "train_tokens_per_s",
            "wait_ratio",
        }
        assert {r.metric for r in rows if r.significant} <= from_train

    def test_unreported_phase_is_null_and_printed_na(self, planted_run):
        run_dir, doc = planted_run
        row = comparison(doc, "megatron", "phases_s.old_logprob")
        assert row.reference is None and row.ratio is None and "not reported by verl" in row.method
        verl = next(c for c in doc.cells if c.id == "verl-megatron-colocate")
        assert verl.summaries["phases_s.old_logprob"].median is None
        assert verl.summaries["phases_s.old_logprob"].n == 0
        section = (run_dir / "report.md").read_text().split("## Miles vs VERL: megatron / colocate", 1)[1]
        line = next(x for x in section.splitlines() if x.startswith("| `phases_s.old_logprob` |"))
        assert line.split(" | ")[4:8] == ["n/a", "n/a", "n/a", "n/a"]
        assert "0.0" not in line.split(" | ")[4]

    def test_nan_steps_are_left_out_not_fatal(self, planted_run):
        _, doc = planted_run
        verl = next(c for c in doc.cells if c.id == "verl-megatron-colocate")
        steady_steps = 80 - verl.steady_state.start_step
        assert verl.summaries["step_time_s"].n == steady_steps - 2
        assert verl.summaries["phases_s.generate"].n == steady_steps
        samples = verl.samples["step_time_s"][0]
        assert len(samples) == steady_steps and sum(math.isnan(x) for x in samples) == 2
        assert verl.samples["phases_s.old_logprob"] == [[]]

    def test_per_token_costs_sit_beside_raw_times(self, planted_run):
        run_dir, doc = planted_run
        cell = doc.cells[0]
        assert cell.summaries["generate_s_per_1k_response_tokens"].unit == "s/1k tokens"
        assert cell.response_length.mean == pytest.approx(3000, rel=0.05)
        lines = [x for x in (run_dir / "report.md").read_text().splitlines() if x.startswith("| `")]
        names = [x.split("`")[1] for x in lines]
        first = names.index("phases_s.generate")
        assert names[first + 1] == "generate_s_per_1k_response_tokens"


class TestOutputs:
    def test_plots_are_svgs_of_the_expected_size(self, planted_run):
        run_dir, doc = planted_run
        expected = {
            "phase_bars.svg": phase_bars_size_px(doc),
            "step_times.svg": step_times_size_px(2),
            "ratios.svg": ratio_chart_size_px(doc),
        }
        assert step_times_size_px(2) == (1000, 660)  # one panel per pair: two pairs
        assert phase_bars_size_px(doc) == (1000, round(150 + 34 * 4.6))  # four rows, a gap between the pairs
        for name, size in expected.items():
            path = run_dir / "plots" / name
            assert path.stat().st_size > 2_000, name
            assert svg_size(path) == size, name

    def test_markdown_tables_render(self, planted_run):
        """Every table: a header, a separator of the same width, rows of the same width; GitHub's size limit."""
        run_dir, _ = planted_run
        text = (run_dir / "report.md").read_text()
        assert len(text) < 65_536
        tables = markdown_tables(text)
        assert len(tables) >= 8
        for table in tables:
            width = table_columns(table[0])
            assert re.fullmatch(r"\|(---\|)+", table[1]), table[:2]
            assert table[1].count("---") == width
            assert all(table_columns(line) == width for line in table), table
        for heading in (
            "## At a glance",
            "## Per-cell summaries",
            "## Steady state",
            "## Parity table",
            "## Environments",
        ):
            assert heading in text

    def test_headline_names_the_gap_and_comes_before_the_tables(self, planted_run):
        """80 steps, 15 s of 100 s planted in generate: slower, mostly in generate; the equal pair's interval lies
        inside the 2% threshold, so it reads "no practical difference"."""
        run_dir, _ = planted_run
        text = (run_dir / "report.md").read_text()
        glance = text.split("## At a glance", 1)[1].split("\n## ", 1)[0]
        assert text.index("## At a glance") < text.index("\n|")
        assert re.search(r"\*\*fsdp / colocate\*\*: \*\*Miles 1\d% slower\*\* \(CI \+1\d\.\d%", glance), glance
        assert ", mostly in rollout_wait (+" in glance  # colocated: the trainer's wait for the rollout
        assert "**megatron / colocate**: **no practical difference**" in glance

    def test_report_json_validates_against_its_contract(self, planted_run):
        run_dir, _ = planted_run
        text = (run_dir / "report.json").read_text()
        json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
        report = validate_report_file(run_dir / "report.json")
        assert report.schema_version == 2 and report.preset == "qwen3-1.7b-base" and report.spec_hash == "0123456789ab"
        assert report.practical_thresholds["step_time_s"] == 0.02 and "phases_s.train" in report.practical_thresholds
        assert {c.id for c in report.cells} == {c.id for c in planted_cells()}
        cell = report.cells[0]
        assert cell.hardware == "8x NVIDIA H200" and cell.environment["driver"] == "570.86.15"
        assert cell.environment["packages"]["torch"]["version"] == "2.7.1"
        assert (
            len(cell.samples["step_time_s"]) == 1
            and len(cell.samples["step_time_s"][0]) == cell.summaries["step_time_s"].n
        )
        assert report.parity == parse_parity(matched_parity(planted_cells()))  # the planner's v1, upgraded
        assert [(s.role, s.name, s.label) for s in report.sides] == [
            ("candidate", "miles", "Miles"),
            ("reference", "verl", "VERL"),
        ]
        assert {(c.framework, c.side) for c in report.cells} == {("miles", "miles"), ("verl", "verl")}
        assert all(
            c.candidate_cell.startswith("miles-") and c.reference_cell.startswith("verl-") for c in report.comparisons
        )
        assert len(report.comparisons) == 2 * len(cell.summaries)

    def test_html_is_self_contained(self, planted_run):
        run_dir, _ = planted_run
        page = (run_dir / "report.html").read_text()
        assert page.count("data:image/svg+xml;base64,") == 3
        assert 'src="plots/' not in page and "<table>" in page


class TestRefusals:
    def test_unexplained_parity_row_refuses_the_comparison(self, tmp_path):
        """A MISMATCH row in the megatron table refuses megatron only; fsdp is still compared."""
        cells = planted_cells()
        parity = matched_parity(cells)
        megatron = next(p for p in parity["pairs"] if p["backend"] == "megatron")
        megatron["rows"].append(
            {"knob": "max_response_len", "group": "lengths", "miles": 8192, "verl": 4096, "status": "MISMATCH"}
            | {"note": "not a declared asymmetry"}
        )
        run_dir = write_run_folder(tmp_path, cells, parity=parity)
        doc, _ = report_impl(run_dir, AnalysisSettings(reps=REPS))
        assert {c.backend for c in doc.comparisons} == {"fsdp"}
        assert {a.backend for a in doc.attribution} == {"fsdp"}
        assert [(r.backend, r.layout) for r in doc.refused] == [("megatron", "colocate")]
        assert "max_response_len (MISMATCH: {'miles': 8192, 'verl': 4096})" in doc.refused[0].reason
        text = (run_dir / "report.md").read_text()
        assert "**megatron / colocate**: comparison refused: parity table has unexplained differences" in text

    @pytest.mark.parametrize(
        ("change", "reason"),
        [
            ("no_parity", "no parity.json in the run folder"),
            ("parity_error", "parity error: megatron/colocate: lr: miles=1e-06 verl=2e-06"),
            ("other_spec", "parity.json is for spec ffffffffffff, the plan for spec 0123456789ab"),
            ("missing_pair", "parity.json has no table for megatron/colocate"),
        ],
    )
    def test_a_comparison_without_a_valid_parity_proof_is_refused(self, tmp_path, change, reason):
        cells = planted_cells()
        parity = matched_parity(cells, spec_hash="ffffffffffff" if change == "other_spec" else "0123456789ab")
        if change == "parity_error":
            next(p for p in parity["pairs"] if p["backend"] == "megatron")[
                "error"
            ] = "megatron/colocate: lr: miles=1e-06 verl=2e-06"
        if change == "missing_pair":
            parity["pairs"] = [p for p in parity["pairs"] if p["backend"] != "megatron"]
        run_dir = write_run_folder(tmp_path, cells, parity=parity, write_parity=change != "no_parity")
        doc = analyse_run_folder(run_dir, AnalysisSettings(reps=REPS))
        refused = {r.backend: r.reason for r in doc.refused}
        assert reason in refused["megatron"]
        head = "parity table has unexplained differences" if change == "parity_error" else "no parity proof"
        assert refused["megatron"].startswith(head)

    def test_asymmetry_without_note_and_pair_scoped_rows(self):
        def pair(backend, rows):
            cells = {"candidate_cell": f"miles-{backend}-colocate", "reference_cell": f"verl-{backend}-colocate"}
            return {"backend": backend, "layout": "colocate", **cells, "rows": rows}

        def row(knob, status, note=""):
            return {"knob": knob, "group": "g", "candidate": 1, "reference": 2, "status": status, "note": note}

        shared = [row("a", "asymmetry"), row("c", "asymmetry", "declared")]
        parity = parse_parity(
            {
                "schema_version": 2,
                "spec_hash": None,
                "pairs": [pair("megatron", [*shared, row("b", "MISMATCH")]), pair("fsdp", shared)],
            }
        )
        assert [p.split(" ")[0] for p in unexplained(parity, "megatron", "colocate")] == ["a", "b"]
        assert [p.split(" ")[0] for p in unexplained(parity, "fsdp", "colocate")] == ["a"]

    @pytest.mark.parametrize("shape", [{"rows": []}, [{"knob": "a", "status": "matched"}]])
    def test_a_legacy_parity_shape_is_refused_not_guessed(self, tmp_path, shape):
        """The flat {"rows": [...]} and bare-list layouts are gone: such a file is unreadable, so nothing compares."""
        run_dir = write_run_folder(tmp_path, planted_cells(), parity=shape)
        doc, written = report_impl(run_dir, AnalysisSettings(reps=REPS))
        assert doc.comparisons == [] and doc.parity is None and doc.parity_error
        assert all("parity.json could not be read" in r.reason for r in doc.refused)
        assert "parity.json could not be read" in written["report.md"].read_text()

    def test_different_hardware_refuses_the_comparison(self, tmp_path):
        cells = planted_cells()[:2]
        cells[1].gpu_model = "NVIDIA H100 80GB HBM3"
        doc = analyse_run_folder(write_run_folder(tmp_path, cells), AnalysisSettings(reps=REPS))
        assert doc.comparisons == []
        assert "different hardware" in doc.refused[0].reason


class TestRepeatsAndFaults:
    def test_repeats_are_the_unit_and_failed_repeats_are_listed(self, tmp_path):
        common = {"warmup_steps": 6, "num_steps": 40, "repeats": 3}
        cells = [
            SyntheticCell(framework="miles", phase_means=SLOW_GENERATE, seed=21, failed_repeats=(2,), **common),
            SyntheticCell(framework="verl", seed=22, **common),
        ]
        run_dir = write_run_folder(tmp_path, cells)
        doc, written = report_impl(run_dir, AnalysisSettings(reps=REPS))
        miles = next(c for c in doc.cells if c.framework == "miles")
        assert miles.repeats == 2 and len(miles.samples["step_time_s"]) == 2
        assert "2 repeat medians" in miles.summaries["step_time_s"].method
        assert [r.model_dump() for r in doc.incomplete] == [
            {"cell_id": "miles-fsdp-colocate", "repeat": 2, "state": "failed", "reason": "exit code 1"}
        ]
        generate = comparison(doc, "fsdp", "phases_s.generate")
        assert generate.significant and generate.ci_low < 1.25 < generate.ci_high
        assert "## Incomplete cells" in written["report.md"].read_text()

    def test_short_run_and_empty_metrics_are_reported_not_fatal(self, tmp_path):
        """6 steps: never steady, no CI. A 'complete' repeat with an empty metrics.jsonl is listed as incomplete."""
        cells = [SyntheticCell(framework="miles", num_steps=6, seed=1), SyntheticCell(framework="verl", seed=2)]
        run_dir = write_run_folder(tmp_path, cells)
        (run_dir / "cells/verl-fsdp-colocate/rep-0/metrics.jsonl").write_text("")
        doc, written = report_impl(run_dir, AnalysisSettings(reps=REPS))
        (miles,) = doc.cells
        assert not miles.steady_state.reached and "too few" in miles.steady_state.repeats[0].method
        assert miles.summaries["step_time_s"].ci_low is None
        assert doc.incomplete[0].state == "empty" and doc.comparisons == []
        text = written["report.md"].read_text()
        assert "(no CI)" in text and "No steady state: `miles-fsdp-colocate`" in text

    def test_a_cell_too_noisy_to_place_its_warmup_end_is_not_claimed_steady_in_the_headline(self, tmp_path):
        """Step CV 10% in one cell: its steady state is refused with the sentence and the spread, beside its numbers;
        the quiet cell keeps its claim."""
        cells = [SyntheticCell(framework="miles", cv=0.10, seed=1), SyntheticCell(framework="verl", cv=0.01, seed=2)]
        doc, written = report_impl(write_run_folder(tmp_path, cells), AnalysisSettings(reps=REPS))
        miles, verl = doc.cells
        assert not miles.steady_state.reached and verl.steady_state.reached
        assert miles.steady_state.noise > 0.05 and "too noisy" in miles.steady_state.method
        assert miles.summaries["step_time_s"].median is not None
        text = written["report.md"].read_text()
        assert f"`miles-fsdp-colocate` (step time too noisy, {miles.steady_state.noise:.1%}" in text

    def test_records_written_in_schema_v1_are_read_like_their_v2_lines(self, tmp_path):
        """Folders recorded before schema v2 (no rollout_wait, no overlap_s) still report, with the same numbers."""
        cells = [SyntheticCell(framework="miles", seed=1), SyntheticCell(framework="verl", seed=2)]
        run_dir = write_run_folder(tmp_path, cells)
        doc_v2 = analyse_run_folder(run_dir, AnalysisSettings(reps=REPS))
        for metrics in run_dir.glob("cells/*/rep-*/metrics.jsonl"):
            lines = []
            for line in metrics.read_text().splitlines():
                record = json.loads(line)
                record.pop("overlap_s")
                record["phases_s"].pop("rollout_wait")
                lines.append(json.dumps({**record, "schema_version": 1}))
            metrics.write_text("\n".join(lines) + "\n")
        doc_v1 = analyse_run_folder(run_dir, AnalysisSettings(reps=REPS))
        for v1, v2 in zip(doc_v1.cells, doc_v2.cells, strict=True):
            assert v1.summaries["step_time_s"] == v2.summaries["step_time_s"]
            assert v1.summaries["phases_s.generate"] == v2.summaries["phases_s.generate"]
        for metric in ("step_time_s", "phases_s.generate", "train_tokens_per_s"):
            assert comparison(doc_v1, "fsdp", metric).ratio == comparison(doc_v2, "fsdp", metric).ratio

    def test_single_framework_run_reports_cells_without_comparison(self, tmp_path):
        run_dir = write_run_folder(tmp_path, planted_cells()[:1], write_parity=False)
        doc, written = report_impl(run_dir, AnalysisSettings(reps=REPS))
        assert doc.comparisons == [] and doc.parity is None
        text = written["report.md"].read_text()
        assert "No Miles/VERL pair to compare" in text and "No parity.json" in text


class TestCommand:
    @staticmethod
    def app() -> typer.Typer:
        app = typer.Typer()

        @app.callback()
        def main() -> None:
            """Stands in for the plan command's callback, so `report` is a subcommand as in run.py."""

        register(app)
        return wrap_commands(app)

    def test_report_command_writes_the_files(self, tmp_path):
        run_dir = write_run_folder(tmp_path, planted_cells()[:2])
        result = CliRunner().invoke(self.app(), ["report", str(run_dir), "--reps", "200"])
        assert result.exit_code == 0, result.output
        assert (
            result.output.startswith("**Miles vs VERL at a glance**")
            and "# Miles vs VERL throughput report" not in result.output
        )
        assert "environment" not in result.output.lower()  # the records stay in the files
        assert f"  {run_dir / 'report.md'}\n" in result.output and f"  {run_dir / 'report.json'}\n" in result.output
        for name in ("report.md", "report.json", "report.html", "plots/ratios.svg"):
            assert (run_dir / name).is_file(), name

    def test_run_py_report_as_a_maintainer_types_it(self, tmp_path):
        """The real entry point in a subprocess: `python3 scripts/benchmark/run.py report DIR`; it needs no plotting
        library (matplotlib is made unimportable here) and imports none."""
        run_dir = write_run_folder(tmp_path, planted_cells()[:2])
        repo = Path(__file__).resolve().parents[2]
        argv = [sys.executable, str(repo / "scripts/benchmark/run.py"), "report", str(run_dir), "--reps", "200"]
        blocker = repo / "tests/benchmark/standins/blocker"
        env = {**os.environ, "PYTHONPATH": str(blocker), "BENCH_TEST_BLOCK_MODULES": "matplotlib"}
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        assert "**Miles vs VERL at a glance**" in result.stdout and str(run_dir / "report.html") in result.stdout
        validate_report_file(run_dir / "report.json")
        assert all((run_dir / "plots" / f"{name}.svg").is_file() for name in ("phase_bars", "step_times", "ratios"))

    def test_not_a_run_folder_is_a_clear_error(self, tmp_path):
        result = CliRunner().invoke(self.app(), ["report", str(tmp_path)])
        assert result.exit_code == 2
        assert "manifest.json not found" in result.output

    def test_bad_confidence_is_rejected_before_any_work(self, tmp_path):
        result = CliRunner().invoke(self.app(), ["report", str(tmp_path), "--confidence", "95"])
        assert result.exit_code == 2
        assert "--confidence must be in (0, 1), got 95.0" in result.output

    def test_a_report_is_refused_while_another_harness_holds_the_run_folder(self, tmp_path):
        """Two writers of one report are kept apart by the run folder's lock, held here by another process."""
        run_dir = write_run_folder(tmp_path / "run", planted_cells()[:2])
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK, str(run_dir)], stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
            cwd=RUN_PY.parents[2],
        )  # fmt: skip
        try:
            assert holder.stdout.readline().strip() == "locked"
            result = CliRunner().invoke(self.app(), ["report", str(run_dir), "--reps", "200"])
        finally:
            holder.stdin.close()
            holder.wait(timeout=60)
        assert result.exit_code == 2, result.output
        assert f"{run_dir} is in use by a live run: harness pid {holder.pid}" in result.output
        assert not (run_dir / "report.json").exists()

    def test_a_full_disk_leaves_the_previous_report_whole_and_says_which_file_and_what_to_do(self, tmp_path):
        """A real small tmpfs, filled once the first report is written: the second report exits 2 naming the file,
        with no traceback, and leaves the first report.json byte for byte and no tmp file."""
        disk = tmp_path / "disk"
        if os.geteuid() != 0 or not _mount_tmpfs(disk, "16m"):
            pytest.skip("needs root to mount a small tmpfs")
        try:
            run_dir = write_run_folder(disk / "run", planted_cells()[:2])
            argv = [sys.executable, str(RUN_PY), "report", str(run_dir), "--reps", "200", "--quiet"]
            assert subprocess.run(argv, capture_output=True, timeout=120).returncode == 0
            before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
            (disk / "pad").write_bytes(b"\0" * 8192)
            _fill(disk / "ballast")
            (disk / "pad").unlink()  # two pages free: room for the lock's holder record, not for the report
            result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            assert result.returncode == 2, result.stdout + result.stderr
            assert "Traceback" not in result.stderr
            line = result.stderr.strip()
            assert line.startswith(f"error: {run_dir}/") and "No space left on device" in line, line
            assert "free space (or make the file system writable) and run the command again" in line
            assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
            validate_report_file(run_dir / "report.json")
        finally:
            subprocess.run(["umount", "-l", str(disk)], check=False)


class TestWrittenWholeOrNotAtAll:
    def _changed_run(self, tmp_path: Path) -> tuple[Path, dict[Path, bytes]]:
        """A run folder with its report, then one of its step times changed: the next report differs in every file."""
        run_dir = write_run_folder(tmp_path / "run", planted_cells()[:2])
        report_impl(run_dir, AnalysisSettings(reps=200))
        before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
        metrics = next(run_dir.glob("cells/miles-*/rep-0/metrics.jsonl"))
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        rows[-1]["step_time_s"] *= 2
        metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return run_dir, {p: data for p, data in before.items() if p != metrics}

    def test_a_full_disk_midway_keeps_the_previous_report_whole_and_names_the_file(self, tmp_path, monkeypatch):
        """report.html does not fit: no new report.json beside the old report.md, no staging folder left, and the
        error names the run folder's report.html."""
        import scripts.benchmark.report.write as write

        run_dir, before = self._changed_run(tmp_path)
        real = write.write_text_atomic

        def full_at_html(path: Path, text: str) -> None:
            if Path(path).name == "report.html":
                raise OSError(errno.ENOSPC, "No space left on device", str(path))
            real(path, text)

        monkeypatch.setattr(write, "write_text_atomic", full_at_html)
        with pytest.raises(OSError) as failed:
            report_impl(run_dir, AnalysisSettings(reps=200))
        assert failed.value.filename == str(run_dir / "report.html")
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p in before} == before
        assert [p.name for p in run_dir.iterdir() if p.name.startswith(".")] == []

    def test_the_end_of_run_report_on_a_full_disk_names_the_file_and_the_fix(self, tmp_path):
        from scripts.benchmark.contracts.manifest import Manifest
        from scripts.benchmark.runner.end_report import report_after_run
        from scripts.benchmark.runner.progress import MatrixProgress

        run_dir = write_run_folder(tmp_path / "run", planted_cells()[:2])
        manifest = Manifest.load(run_dir / "manifest.json")

        def full(folder: Path):
            raise OSError(errno.ENOSPC, "No space left on device", str(folder / "report.html"))

        report_after_run(manifest, MatrixProgress(total_cells=0), full)
        (warning,) = manifest.warnings
        assert warning.startswith(f"report: not written: {run_dir / 'report.html'}: No space left on device; free")
        assert f"run.py report {run_dir}" in warning

    def test_sigterm_while_the_report_is_written_leaves_the_previous_report_and_no_tmp_file(self, tmp_path):
        """SIGTERM arrives as headline.md is renamed into place (its tmp file written): exit 130, every file of the
        previous report as it was, nothing left of the interrupted one."""
        run_dir, before = self._changed_run(tmp_path)
        child = (
            "import os, signal, sys\n"
            "import miles.utils.bench_metrics as m\n"
            "from scripts.benchmark.run import build_app\n"
            "real = os.replace\n"
            "def replace(src, dst):\n"
            "    if str(dst).endswith('headline.md'):\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "    real(src, dst)\n"
            "m.os.replace = replace\n"
            "sys.argv = ['run.py', 'report', sys.argv[1], '--reps', '200', '--quiet']\n"
            "build_app()()\n"
        )
        done = subprocess.run([sys.executable, "-c", child, str(run_dir)], capture_output=True, text=True,
                              timeout=120, cwd=Path(RUN_PY).parents[2])  # fmt: skip
        assert done.returncode == 130, done.stdout + done.stderr
        assert "report: interrupted by SIGTERM: nothing written" in done.stderr and "Traceback" not in done.stderr
        assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p in before} == before
        assert [p.name for p in run_dir.rglob(".*")] == [] and not (run_dir / "run.lock").exists()


def test_a_pair_whose_side_lost_its_metrics_is_not_called_one_framework_only(tmp_path):
    cells = planted_cells()
    run_dir = write_run_folder(tmp_path, cells)
    for metrics in run_dir.glob("cells/verl-*/rep-*/metrics.jsonl"):
        metrics.unlink()
    report_impl(run_dir, AnalysisSettings(reps=REPS))
    text = (run_dir / "report.md").read_text()
    assert "one framework only" not in text
    assert "No Miles/VERL pair to compare: both ran, but VERL has no complete cell with metrics" in text


def test_a_missing_derived_metric_is_not_computed_rather_than_not_reported(tmp_path):
    run_dir = write_run_folder(tmp_path, planted_cells())
    for metrics in run_dir.glob("cells/*/rep-*/metrics.jsonl"):
        rows = [json.loads(line) | {"train_mfu": None} for line in metrics.read_text().splitlines()]
        metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    doc = analyse_run_folder(run_dir, AnalysisSettings(reps=REPS))
    mfu = next(c for c in doc.comparisons if c.metric == "train_mfu")
    assert "not computed for miles and verl" in mfu.method and "not reported" not in mfu.method


def test_train_tflops_above_the_datasheet_peak_are_flagged(tmp_path):
    run_dir = write_run_folder(tmp_path, planted_cells())
    for metrics in run_dir.glob("cells/miles-fsdp-*/rep-*/metrics.jsonl"):
        rows = [json.loads(line) | {"train_mfu": 1.3} for line in metrics.read_text().splitlines()]
        metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    report_impl(run_dir, AnalysisSettings(reps=REPS))
    headline = (run_dir / "headline.md").read_text()
    assert "Train TFLOP/s above the datasheet peak: `miles-fsdp-colocate` MFU 1.30" in headline
    assert "verl-fsdp-colocate` MFU" not in headline


RUN_PY = Path(__file__).resolve().parents[2] / "scripts/benchmark/run.py"
HOLD_LOCK = """
import sys
from pathlib import Path
from scripts.benchmark.runner.folder_lock import hold_run_lock
with hold_run_lock(Path(sys.argv[1])):
    print("locked", flush=True)
    sys.stdin.read()
"""


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    return mounted.returncode == 0


def _fill(path: Path) -> None:
    """Write until the file system says it is full (unbuffered: no byte left to flush, and fail, at close)."""
    with open(path, "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


class TestStepFlagsReachTheReport:
    """What the readers flag on step records (and what reading metrics.jsonl finds) is summarised per cell in
    report.json, in a Step flags section, and named under the headline when a value is doubtful or left out."""

    @staticmethod
    def rewrite(path: Path, change) -> None:
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(record) + "\n" for record in change(lines)))

    def test_flags_duplicated_lines_and_non_numbers_are_counted_once_and_shown(self, tmp_path):
        settings = AnalysisSettings(reps=200)
        clean_dir = write_run_folder(tmp_path / "clean", gap_pair({"train": 1.0}, num_steps=120))
        clean = analyse_run_folder(clean_dir, settings)
        run_dir = write_run_folder(tmp_path / "run", gap_pair({"train": 1.0}, num_steps=120))
        miles = run_dir / "cells/miles-fsdp-colocate/rep-0/metrics.jsonl"
        verl = run_dir / "cells/verl-fsdp-colocate/rep-0/metrics.jsonl"

        def stepped_back(records):
            for record in records[40:43]:
                record["flags"] = [*record["flags"], "negative_duration:phases_s.rollout_wait"]
                record["step_time_s"] = None
            return records

        def fast(records):
            records[50]["step_time_s"] = "fast"
            return records

        self.rewrite(miles, stepped_back)
        self.rewrite(verl, fast)
        verl.write_text(verl.read_text() * 2)  # every line written twice
        doc = analyse_run_folder(run_dir, settings)
        write_report(doc, run_dir)
        cells = {c.id: c for c in doc.cells}
        clean_cells = {c.id: c for c in clean.cells}
        flags = {c: {f.flag: f for f in cells[c].step_flags} for c in cells}
        assert flags["miles-fsdp-colocate"]["negative_duration:phases_s.rollout_wait"].steps == 3
        duplicated = flags["verl-fsdp-colocate"]["duplicate_line"]
        assert duplicated.steps == duplicated.of_steps == 120
        assert flags["verl-fsdp-colocate"]["non_numeric:step_time_s"].steps == 1
        verl_steps = cells["verl-fsdp-colocate"].summaries["step_time_s"].n
        assert verl_steps == clean_cells["verl-fsdp-colocate"].summaries["step_time_s"].n - 1  # not twice
        assert all(f.defect for f in cells["verl-fsdp-colocate"].step_flags)
        assert clean_cells["verl-fsdp-colocate"].step_flags == []
        markdown = (run_dir / "report.md").read_text()
        assert "## Step flags" in markdown
        assert "| `miles-fsdp-colocate` | `negative_duration:phases_s.rollout_wait` | defect | 3 of " in markdown
        glance = markdown.split("## At a glance", 1)[1].split("\n## ", 1)[0]
        assert "Flagged steps: `miles-fsdp-colocate` negative_duration:phases_s.rollout_wait on 3 of" in glance
        assert "`verl-fsdp-colocate` duplicate_line on" in glance and "non_numeric:step_time_s" in glance
        write_report(clean, clean_dir)
        assert "Flagged steps" not in (clean_dir / "report.md").read_text()
