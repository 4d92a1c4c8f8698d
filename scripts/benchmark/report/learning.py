"""The report's "Do both learn the same?" section, its trajectory plot, and the learning warning of the headline.

- `learning_blocks(doc, images)`: per candidate/reference pair (e.g. Miles vs VERL), a table of every learning
  signal (both sides' window means, the paired difference with its interval, the margin, the verdict and why) and
  how much of the generate-time gap the response-length gap explains.
- `plot_learning(doc, path)`: one SVG, a panel per signal and pair, both sides' trajectories (coloured by role),
  the judged window shaded.
- `learning_warning(doc, backend, layout)`: the sentence a pair's throughput verdict must carry when its learning
  differs or its sameness is not shown, with the steps that would tell (None when every judged signal is the same).
- `power_warning(doc, backend, layout)`: the sentence a card carries when the run has fewer repeats a side than the
  guard needs to see its planted differences 9 times in 10 (analysis/learning_power.py).
- `too_short_note(doc)`: when the run has fewer steps than a learning run (`LEARNING_RUN_STEPS`), that it is too
  short for the guard, and the learning-run command that settles it (None otherwise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from scripts.benchmark.contracts.report import SAME, UNSETTLED, LearningPairModel, LearningSignalModel, ReportDocument
from scripts.benchmark.report.palette import ROLE_COLORS
from scripts.benchmark.report.render import Heading, Paragraph, Table
from scripts.benchmark.report.svg import (
    Canvas,
    Frame,
    LegendKey,
    draw_border,
    draw_x_axis,
    draw_y_axis,
    legend_row,
    save,
)
from scripts.benchmark.spec import LEARNING_RUN_STEPS

ROLES = ("candidate", "reference")
PANEL_PX = (520, 220)
PANEL_COLUMNS = 2
PANEL_FONT = 10
LEGEND_PX = 40


def learning_plot_title(doc: ReportDocument) -> str:
    pair = doc.side_pair()
    reference = pair.reference.label if pair.reference is not None else "reference"
    return f"Learning signals over steps, {pair.candidate.label} vs {reference}, judged window shaded"


def learning_pair(doc: ReportDocument, backend: str, layout: str) -> LearningPairModel | None:
    return next((p for p in doc.learning if (p.backend, p.layout) == (backend, layout)), None)


def learning_warning(doc: ReportDocument, backend: str, layout: str) -> str | None:
    """What the throughput verdict of this pair must say about learning; None when nothing needs saying."""
    pair = learning_pair(doc, backend, layout)
    if pair is None or not pair.available:
        return "Learning not compared: the step records carry no learning signals."
    by_verdict: dict[str, list[str]] = {}
    for row in pair.signals:
        by_verdict.setdefault(row.verdict, []).append(row.signal)
    if by_verdict.get("different"):
        return (
            f"**Warning: learning differs** ({', '.join(by_verdict['different'])}): the two runs do not do the same "
            "learning work, so their speeds are not a like-for-like comparison."
        )
    unsettled = [row for row in pair.signals if row.verdict == UNSETTLED]
    if unsettled and all(row.repeats and min(row.repeats) < 2 for row in unsettled):
        return (
            "Learning not judged: one repeat a side, so a run's own drift is not in the interval; at least 2 "
            "repeats a side give a verdict."
        )
    if unsettled:
        needed = [row.repeats_needed for row in unsettled if row.repeats_needed is not None]
        tell = f"; about {max(needed)} repeats a side would tell" if len(needed) == len(unsettled) else ""
        steps = [row.steps_needed for row in unsettled if row.steps_needed is not None]
        tell = f"; about {max(steps)} paired steps would tell" if len(steps) == len(unsettled) else tell
        names = ", ".join(row.signal for row in unsettled)
        return f"Same learning not shown ({names}: not enough steps to tell at {unsettled[0].paired_steps}{tell})."
    if not by_verdict.get(SAME):
        return "Learning not judged: no signal both frameworks log comparably."
    return None


def power_warning(doc: ReportDocument, backend: str, layout: str) -> str | None:
    """When this run has fewer repeats a side than the guard needs to see a planted difference 9 times in 10: which
    ones, the repeats they need, and where the spread between runs comes from (None when it has enough)."""
    pair = learning_pair(doc, backend, layout)
    short = [row.power for row in (pair.signals if pair else []) if row.power and _too_few(row.power)]
    if not short:
        return None
    parts = [
        f"{p.planted} ({_needed(p.repeats_needed)}; {p.power:.0%} with {p.repeats})"
        for p in sorted(short, key=lambda p: p.repeats_needed or 10**6)
    ]
    return (
        f"Too few repeats for the learning guard: 9 times in 10 it would see {', '.join(parts)} "
        f"(repeats a side; from {short[0].spread_source})."
    )


def _too_few(power) -> bool:
    return power.repeats_needed is None or power.repeats_needed > power.repeats


def _needed(count: int | None) -> str:
    return f"about {count} needed" if count else "more than 64 needed"


def _side_arg(side) -> str:
    return f"{side.framework}@{side.target}" if side.target else side.framework


def too_short_note(doc: ReportDocument) -> str | None:
    """Steps are counted from 1, so the last step recorded on either side is the run's length."""
    steps = [
        step
        for pair in doc.learning
        for series in pair.series.values()
        for step in [*series.candidate.steps, *series.reference.steps]
    ]
    if not steps or max(steps) >= LEARNING_RUN_STEPS:
        return None
    sides = doc.side_pair()
    reference = f" --reference {_side_arg(sides.reference)}" if sides.reference is not None else ""
    source = f"--preset {doc.preset}" if doc.preset else "--spec FILE"
    backends, layouts = sorted({pair.backend for pair in doc.learning}), sorted({pair.layout for pair in doc.learning})
    source += f" --layout {layouts[0]}" if len(layouts) == 1 else ""
    backend = backends[0] if len(backends) == 1 else "all"
    return (
        f"This run ends at step {max(steps)}, too short for the learning guard: its verdicts are validated at "
        f"{LEARNING_RUN_STEPS} steps, and at 24 steps a 10% lower solve rate is caught in about 3 pairs in 10 with 3 "
        "repeats a side. "
        f"To settle learning, plan a learning run ({LEARNING_RUN_STEPS} steps of the same batch, its own spec hash): "
        f"`python scripts/benchmark/run.py --backend {backend} --candidate {_side_arg(sides.candidate)}{reference} "
        f"{source} --learning-run --output-dir DIR` (docs/benchmark/analysis.md)."
    )


def _number(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4g}"


def _difference(value: float | None, margin_kind: str) -> str:
    if value is None:
        return "n/a"
    return f"{value * 100:+.1f}%" if margin_kind == "relative" else f"{value:+.4g}"


def _margin(row: LearningSignalModel) -> str:
    if row.margin is None:
        return "none"
    return f"±{row.margin * 100:.0f}%" if row.margin_kind == "relative" else f"±{row.margin:g}"


def _verdict(row: LearningSignalModel) -> str:
    text = f"{row.verdict} ({row.why})"
    late = row.tested.get("late")
    if late is not None:
        text += f"; last third {_difference(late.estimate, row.margin_kind)}"
        text += f" [{_difference(late.ci_low, row.margin_kind)} .. {_difference(late.ci_high, row.margin_kind)}]"
    return text


def _signal_line(row: LearningSignalModel) -> list[str]:
    interval = "n/a"
    if row.ci_low is not None:
        interval = f"{_difference(row.ci_low, row.margin_kind)} .. {_difference(row.ci_high, row.margin_kind)}"
    return [
        f"`{row.signal}`",
        row.unit,
        _number(row.candidate),
        _number(row.reference),
        f"{_difference(row.difference, row.margin_kind)} [{interval}]",
        _margin(row),
        _verdict(row),
        _power_cell(row),
    ]


def _power_cell(row: LearningSignalModel) -> str:
    """The planted difference's power with this run's repeats, and the repeats a side for 9 in 10."""
    p = row.power
    if p is None:
        return "n/a"
    needed = f"{p.repeats_needed}" if p.repeats_needed else "> 64"
    return f"{p.planted}: {p.power:.0%} with {p.repeats}, 90% with {needed}"


def length_sentence(pair: LearningPairModel, ratio: str) -> str:
    """How much of the generate-time gap the response-length gap explains; `ratio` names it ("Miles/VERL")."""
    explains = pair.length_explains
    generate, length, per_token = explains.generate_ratio, explains.length_ratio, explains.per_token_ratio
    if generate is None or length is None:
        return "Response length vs generate time: not available (no generate time or no response length)."
    text = (
        f"Generate time {ratio} {generate:.3f}, response length {ratio} {length:.3f}, generate seconds per "
        f"response token {ratio} {_number(per_token)}."
    )
    if explains.share is not None:
        text += f" The response-length gap explains {explains.share * 100:.0f}% of the generate-time gap (log)."
    else:
        text += " The generate-time gap is under 2%: no share to attribute."
    return text


def learning_blocks(doc: ReportDocument, images: dict[str, str]) -> list[Any]:
    pairs = doc.learning
    if not pairs:
        return []
    sides = doc.side_pair()
    c, r = sides.candidate.label, sides.reference.label if sides.reference is not None else "reference"
    pct = f"{1 - 2 * pairs[0].alpha:.0%}"
    blocks: list[Any] = [
        Heading(2, "Do both learn the same?"),
        Paragraph(
            f"Per signal, the mean over the judged window of the step-paired difference {c} - {r} (relative "
            f"signals: {c}/{r} - 1) with its {pct} interval, the same over the last third, and the verdict against "
            "the signal's margin: same, different, or not enough steps to tell (docs/benchmark/analysis.md)."
        ),
    ]
    short = too_short_note(doc)
    if short:
        blocks.append(Paragraph(short))
    header = ["signal", "unit", c, r, f"{c} - {r} [{pct} CI]", "margin", "verdict", "power (repeats a side)"]
    for pair in pairs:
        blocks.append(Heading(3, f"{pair.backend} / {pair.layout}: from step {pair.from_step}"))
        warning = learning_warning(doc, pair.backend, pair.layout)
        if warning:
            blocks.append(Paragraph(warning))
        blocks.append(Table(header, [_signal_line(row) for row in pair.signals]))
        blocks.append(Paragraph(length_sentence(pair, f"{c}/{r}")))
    title = learning_plot_title(doc)
    if title in images:  # drawn once, under Plots, with the others
        blocks.append(Paragraph(f'Trajectories: "{title}" under Plots (`{images[title]}`).'))
    return blocks


def _draw_panel(
    svg: Canvas, frame: Frame, pair: LearningPairModel, row: LearningSignalModel, index: int, names: dict[str, str]
) -> None:
    series = pair.series[row.signal]
    last = max([pair.from_step, *series.candidate.steps, *series.reference.steps])
    svg.rect(frame.x(pair.from_step), frame.top, frame.x(last) - frame.x(pair.from_step), frame.height,
             "#e6e6e6", cls="judged-window")  # fmt: skip
    svg.group(f"learning-{index}", frame.left, frame.top, frame.width, frame.height)
    for role in ROLES:
        points = getattr(series, role)
        svg.path(
            frame.pixels(points.steps, points.values),
            ROLE_COLORS[role],
            width=1.2,
            columns=int(frame.width),
            cls=f"trace {names[role]}",
        )
    svg.end_group()
    draw_y_axis(svg, frame, label="", size=PANEL_FONT, count=5)
    draw_x_axis(svg, frame, label="", size=PANEL_FONT, count=5, grid=False)
    draw_border(svg, frame)
    verdict = "not settled" if row.verdict == UNSETTLED else row.verdict  # the panel's width holds ~70 characters
    title = f"{pair.backend}/{pair.layout} {row.signal} ({row.unit}): {verdict}"
    svg.text(frame.left, frame.top - 12, title, size=PANEL_FONT + 1, cls="title")


def _panel_range(pair: LearningPairModel, row: LearningSignalModel) -> tuple[tuple[float, float], tuple[float, float]]:
    series = pair.series[row.signal]
    steps = [pair.from_step, *series.candidate.steps, *series.reference.steps]
    values = np.concatenate([np.asarray(getattr(series, role).values, dtype=float) for role in ROLES])
    values = values[np.isfinite(values)]
    low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    pad = 0.05 * (high - low or abs(high) or 1.0)
    return (float(min(steps)), float(max(steps))), (low - pad, high + pad)


def learning_size_px(num_panels: int) -> tuple[int, int]:
    return PANEL_PX[0] * PANEL_COLUMNS, PANEL_PX[1] * -(-num_panels // PANEL_COLUMNS) + LEGEND_PX


def plot_learning(doc: ReportDocument, path: Path) -> Path | None:
    """Every signal of every pair, one panel each; None when no pair has learning signals."""
    panels = [(pair, row) for pair in doc.learning if pair.available for row in pair.signals]
    sides = doc.side_pair()
    if not panels or sides.reference is None:
        return None
    width, height = learning_size_px(len(panels))
    svg = Canvas(width, height, learning_plot_title(doc))
    by_role = {"candidate": sides.candidate, "reference": sides.reference}
    names = {role: side.name for role, side in by_role.items()}
    keys = [LegendKey(by_role[role].label, ROLE_COLORS[role], "line") for role in ROLES]
    legend_row(svg, [*keys, LegendKey("judged window", "#e6e6e6", "band")], center_x=width / 2, y=20, size=12)
    for index, (pair, row) in enumerate(panels):
        left = (index % PANEL_COLUMNS) * PANEL_PX[0]
        top = LEGEND_PX + (index // PANEL_COLUMNS) * PANEL_PX[1]
        x_range, y_range = _panel_range(pair, row)
        frame = Frame(left + 70, top + 30, PANEL_PX[0] - 90, PANEL_PX[1] - 62, x_range, y_range)
        _draw_panel(svg, frame, pair, row, index, names)
    return save(svg, Path(path))
