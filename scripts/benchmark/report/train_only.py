"""The report's train-only section (a run whose cells replayed one recorded rollout): the training-step ratios on
the identical batch, beside the full-loop run's when given, and the first-step agreement of the learning signals.
Nothing is decided here: the document's `train_only` (analysis/train_only.py) holds every number and verdict."""

from __future__ import annotations

from typing import Any

from scripts.benchmark.contracts.report import ReportDocument, TrainOnlyModel
from scripts.benchmark.report.headline import labels
from scripts.benchmark.report.palette import verdict_label
from scripts.benchmark.report.render import Heading, Paragraph, Table

TITLE = "Train-only: the training step on one recorded rollout"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _interval(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def _value(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def _agrees(agrees: bool | None) -> str:
    return "n/a" if agrees is None else ("agrees" if agrees else "DIFFERS")


def _intro(view: TrainOnlyModel, cand: str, ref: str) -> Paragraph:
    digest = f"digest `{view.digest}`" if view.digest else "digest not recorded in this run's manifest"
    beside = f"; beside: the full-loop run `{view.full_loop_run}`" if view.full_loop_run else ""
    return Paragraph(
        f"{cand} and {ref} trained on one recording (key `{view.recording_key}`, {digest}), recorded once by "
        f"{view.recorder}; no step generated. Compared: the training phases and rates on the identical batch"
        f"{beside}. Not compared: {'; '.join(view.left_out)}."
    )


def _pair_blocks(view: TrainOnlyModel, backend: str, layout: str, cand: str, ref: str, pct: str) -> list[Any]:
    rows = [r for r in view.rows if (r.backend, r.layout) == (backend, layout)]
    table = [
        [r.metric, _ratio(r.ratio), _interval(r.ci_low, r.ci_high), verdict_label(r.verdict, cand)]
        + [_ratio(r.full_loop_ratio), _interval(r.full_loop_ci_low, r.full_loop_ci_high)]
        for r in rows
    ]
    header = ["metric", f"{cand}/{ref}", f"{pct} CI", "verdict", f"full loop {cand}/{ref}", f"full loop {pct} CI"]
    first = [f for f in view.first_step if (f.backend, f.layout) == (backend, layout)]
    agreement = [
        [f.signal, "n/a" if f.step is None else str(f.step), _value(f.candidate), _value(f.reference)]
        + [_value(f.difference), _value(f.tolerance), _agrees(f.agrees)]
        for f in first
    ]
    return [
        Heading(3, f"{backend} / {layout}"),
        Table(header, table),
        Paragraph("First-step agreement of the learning signals (identical tokens and initial weights):"),
        Table(["signal", "step", cand, ref, "difference", "tolerance", "verdict"], agreement),
    ]


def train_only_blocks(doc: ReportDocument) -> list[Any]:
    view = doc.train_only
    if view is None:
        return []
    cand, ref = labels(doc)
    blocks: list[Any] = [Heading(2, TITLE), _intro(view, cand, ref)]
    pairs = sorted({(r.backend, r.layout) for r in view.rows} | {(f.backend, f.layout) for f in view.first_step})
    for backend, layout in pairs:
        blocks += _pair_blocks(view, backend, layout, cand, ref, f"{doc.confidence:.0%}")
    if not pairs:
        blocks.append(Paragraph("No pair was compared (see the comparison and refusals above)."))
    return blocks
