"""Render the report document (analysis.py) as report.md, report.json, report.html and SVG charts in the run folder.

- `build_blocks(doc, images)` turns the document into a list of blocks (headings, paragraphs, bullets, tables,
  collapsible details, code, images); `render_markdown` and `render_html` render the same blocks, so the two files
  never disagree.
- report.md fits a GitHub step summary and a PR comment (65,536 characters): when the full environment records
  would push it past `MARKDOWN_BUDGET`, they are left to report.json/report.html and the markdown says so.
- `write_report(doc, run_dir)` writes everything (and headline.md: the headline, one line per pair, for a step
  summary or a PR comment) and returns the paths; `analyse_and_write(run_dir)` analyses a run folder first (what
  `run.py report` and the end of every run call); `verdict_markdown(doc)` is the headline, one line per pair.

Caveats:
- A null number is printed "n/a", never 0. Fractions (MFU, wait ratio) are printed as percentages.
- report.md links the charts by relative path: they show next to an uploaded run folder, not inside a PR comment.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.benchmark.analysis.document import report_json_bytes
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.contracts.report import ReportDocument
from scripts.benchmark.report.headline import headline_markdown
from scripts.benchmark.report.render import render_html, render_markdown
from scripts.benchmark.report.sections import build_blocks

MARKDOWN_BUDGET = 60_000


def calibration_readers() -> tuple[Callable, Callable, Callable]:
    """Measured peak, roofline and weight-sync floor, from the committed JSON under calibration/results/."""
    from scripts.benchmark.calibration.results import measured_peak_tflops, roofline_tflops, weight_sync_floor_s

    return measured_peak_tflops, roofline_tflops, weight_sync_floor_s


def analyse_and_write(
    run_dir: Path,
    settings: AnalysisSettings | None = None,
    *,
    calibration: bool = True,
) -> tuple[dict[str, Any], dict[str, Path]]:
    """Analyse a run folder and write the report; returns the report document and the written files."""
    from scripts.benchmark.analysis.document import analyse_run_folder
    from scripts.benchmark.calibration.results import roofline_spread

    measured_peak, roofline, sync_floor = calibration_readers() if calibration else (None, None, None)
    doc = analyse_run_folder(
        run_dir,
        settings,
        measured_peak_tflops=measured_peak,
        roofline_tflops=roofline,
        weight_sync_floor_s=sync_floor,
        roofline_spread=roofline_spread if calibration else None,
    )
    if not calibration:
        doc["calibration_note"] = "disabled by --no-calibration"
    return doc, write_report(doc, run_dir)


def write_report(doc: dict[str, Any], run_dir: Path) -> dict[str, Path]:
    """report.json, plots/*.svg, report.md and report.html in `run_dir`; returns what was written, by name."""
    from scripts.benchmark.report.learning import LEARNING_PLOT_TITLE, plot_learning
    from scripts.benchmark.report.plots import plot_phase_bars, plot_ratios, plot_step_times

    run_dir = Path(run_dir)
    written: dict[str, Path] = {}
    plots = {
        "Phases per step (median, steady state), by pair": ("phase_bars.svg", plot_phase_bars),
        "Step time over steps, Miles and VERL of a pair overlaid, steady-state windows shaded": (
            "step_times.svg",
            plot_step_times,
        ),
        "Miles/VERL ratios with confidence intervals, coloured by practical verdict": ("ratios.svg", plot_ratios),
        LEARNING_PLOT_TITLE: ("learning.svg", plot_learning),
    }
    images = {}
    for title, (name, plot) in plots.items():
        path = plot(doc, run_dir / "plots" / name)
        if path is not None:
            images[title] = f"plots/{name}"
            written[name] = path
    ReportDocument.model_validate(doc)  # the writer goes through the same definition as record and check
    (run_dir / "report.json").write_bytes(report_json_bytes(doc))
    written["report.json"] = run_dir / "report.json"
    markdown = render_markdown(build_blocks(doc, images))
    if len(markdown) > MARKDOWN_BUDGET:
        markdown = render_markdown(build_blocks(doc, images, environment_json=False))
    (run_dir / "report.md").write_text(markdown, encoding="utf-8")
    written["report.md"] = run_dir / "report.md"
    (run_dir / "report.html").write_text(render_html(build_blocks(doc, images), run_dir), encoding="utf-8")
    written["report.html"] = run_dir / "report.html"
    (run_dir / "headline.md").write_text(headline_markdown(doc), encoding="utf-8")
    written["headline.md"] = run_dir / "headline.md"
    return written
