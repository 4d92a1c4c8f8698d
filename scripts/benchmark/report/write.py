"""Render the report document (contracts/report.py) as report.md, report.json, report.html and SVG charts.

- `build_blocks(doc, images)` turns the document into a list of blocks (headings, paragraphs, bullets, tables,
  collapsible details, code, images); `render_markdown` and `render_html` render the same blocks, so the two files
  never disagree.
- report.md fits a GitHub step summary and a PR comment (65,536 characters): when the full environment records
  would push it past `MARKDOWN_BUDGET`, they are left to report.json/report.html and the markdown says so.
- `write_report(doc, run_dir)` writes everything (report.json is the validated document itself, and headline.md:
  the headline, one line per pair, for a step summary or a PR comment) and returns the paths. Analysing a run
  folder first is `run.py report`'s job (commands/report.py): this package only renders. The report is written
  whole or not at all: every file into a staging folder beside it first, then each renamed into place, so a full
  disk (or an interruption) leaves the previous report whole, never a torn file nor a new report.json beside an
  old report.md; the error names the run folder's file, and the staging folder is removed on every path.

Caveats:
- A null number is printed "n/a", never 0. Fractions (MFU, wait ratio) are printed as percentages.
- report.md links the charts by relative path: they show next to an uploaded run folder, not inside a PR comment.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from scripts.benchmark.contracts.report import ReportDocument
from scripts.benchmark.report.headline import headline_markdown, labels
from scripts.benchmark.report.learning import learning_plot_title, plot_learning
from scripts.benchmark.report.plots import plot_phase_bars, plot_ratios, plot_step_times
from scripts.benchmark.report.render import render_html, render_markdown
from scripts.benchmark.report.sections import build_blocks, report_title

from miles.utils.bench_metrics import write_bytes_atomic, write_text_atomic

MARKDOWN_BUDGET = 60_000


def _plots(doc: ReportDocument) -> dict[str, tuple[str, Any]]:
    """Chart title -> (file name, plot function); titles name the sides by their labels."""
    candidate, reference = labels(doc)
    return {
        "Phases per step (median, steady state), by pair": ("phase_bars.svg", plot_phase_bars),
        f"Step time over steps, {candidate} and {reference} of a pair overlaid, steady-state windows shaded": (
            "step_times.svg",
            plot_step_times,
        ),
        f"{candidate}/{reference} ratios with confidence intervals, coloured by practical verdict": (
            "ratios.svg",
            plot_ratios,
        ),
        learning_plot_title(doc): ("learning.svg", plot_learning),
    }


def write_report(doc: ReportDocument, run_dir: Path) -> dict[str, Path]:
    """report.json, plots/*.svg, report.md, report.html and headline.md in `run_dir`, all or none (module
    docstring); returns what was written, by name."""
    run_dir = Path(run_dir)
    try:
        staging = Path(tempfile.mkdtemp(prefix=".report-", suffix=".tmp", dir=run_dir))
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(run_dir)) from exc
    try:
        try:
            staged = _write_files(doc, staging)
        except OSError as exc:  # name the file of the run folder, not its staged twin
            if exc.filename is None or not str(exc.filename).startswith(str(staging)):
                raise
            target = run_dir / Path(exc.filename).relative_to(staging)
            raise OSError(exc.errno, exc.strerror, str(target)) from exc
        written = {}
        for name, relative in staged.items():
            target = run_dir / relative
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / relative, target)
            except OSError as exc:  # the run folder's file, not its staged twin (a folder in its place, say)
                raise OSError(exc.errno, exc.strerror, str(target)) from exc
            written[name] = target
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write_files(doc: ReportDocument, folder: Path) -> dict[str, str]:
    """Every file of the report into `folder`; returns name -> path relative to it."""
    written: dict[str, str] = {}
    images = {}
    for title, (name, plot) in _plots(doc).items():
        if plot(doc, folder / "plots" / name) is not None:
            images[title] = written[name] = f"plots/{name}"
    write_bytes_atomic(folder / "report.json", report_json_bytes(doc))
    markdown = render_markdown(build_blocks(doc, images))
    if len(markdown) > MARKDOWN_BUDGET:
        markdown = render_markdown(build_blocks(doc, images, environment_json=False))
    write_text_atomic(folder / "report.md", markdown)
    write_text_atomic(folder / "report.html", render_html(build_blocks(doc, images), folder, report_title(doc)))
    write_text_atomic(folder / "headline.md", headline_markdown(doc))
    return written | {name: name for name in ("report.json", "report.md", "report.html", "headline.md")}


_NONFINITE_MARKERS = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def _strict(value: Any) -> Any:
    """NaN/Inf as bench_metrics' string markers; long all-finite float lists pass through without a copy."""
    if isinstance(value, float):
        return value if math.isfinite(value) else _NONFINITE_MARKERS[repr(float(value))]
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and _all_finite_numbers(value):
            return value
        return [_strict(v) for v in value]
    return value


def _all_finite_numbers(values: list[Any] | tuple[Any, ...]) -> bool:
    """True when every item (or nested item) is a finite number, so `_strict` would return it unchanged; one C
    pass (numpy) instead of a Python loop over a 10,000-step series."""
    try:
        return bool(np.isfinite(np.asarray(values, dtype=float)).all())
    except (TypeError, ValueError):  # None, strings, dicts, ragged lists: item by item
        return False


def report_json_bytes(doc: ReportDocument) -> bytes:
    """The document as strict JSON in UTF-8 (non-finite numbers as "NaN"/"Infinity" strings), by the C encoder: the
    samples of 10,000 steps x 8 cells are a million numbers, too many for the indenting pure-Python encoder. Bytes,
    not text: a 40 MB document is written without a second copy."""
    data = _strict(doc.model_dump(mode="python"))
    try:
        import orjson
    except ImportError:
        return (json.dumps(data, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
    return orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)
