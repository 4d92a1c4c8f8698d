"""The report's "Do both learn the same?" section, its trajectory plot, and the learning warning of the headline.

- `learning_blocks(doc, images)`: per Miles/VERL pair, a table of every learning signal (both sides' window means,
  the paired difference with its interval, the margin, the verdict and why) and how much of the generate-time gap
  the response-length gap explains.
- `plot_learning(doc, path)`: one SVG, a panel per signal and pair, both frameworks' trajectories, the judged
  window shaded.
- `learning_warning(doc, backend, layout)`: the sentence a pair's throughput verdict must carry when its learning
  differs or its equivalence is not shown (None when every judged signal is equivalent).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from scripts.benchmark.report.plots import SIDE_COLORS, SIDE_NAMES, save
from scripts.benchmark.report.render import Heading, Paragraph, Table
from scripts.benchmark.report.svg import (
    Canvas,
    Frame,
    LegendKey,
    draw_border,
    draw_x_axis,
    draw_y_axis,
    legend_row,
)

LEARNING_PLOT_TITLE = "Learning signals over steps, Miles vs VERL, judged window shaded"
PANEL_PX = (520, 220)
PANEL_COLUMNS = 2
PANEL_FONT = 10
LEGEND_PX = 40


def learning_pair(doc: dict[str, Any], backend: str, layout: str) -> dict[str, Any] | None:
    return next((p for p in doc.get("learning") or [] if (p["backend"], p["layout"]) == (backend, layout)), None)


def learning_warning(doc: dict[str, Any], backend: str, layout: str) -> str | None:
    """What the throughput verdict of this pair must say about learning; None when nothing needs saying."""
    if "learning" not in doc:
        return None  # a report written before learning signals existed
    pair = learning_pair(doc, backend, layout)
    if pair is None or not pair["available"]:
        return "Learning not compared: the step records carry no learning signals."
    by_verdict: dict[str, list[str]] = {}
    for row in pair["signals"]:
        by_verdict.setdefault(row["verdict"], []).append(row["signal"])
    if by_verdict.get("different"):
        return (
            f"**Warning: learning differs** ({', '.join(by_verdict['different'])}): the two runs do not do the same "
            "learning work, so their speeds are not a like-for-like comparison."
        )
    if by_verdict.get("inconclusive"):
        return f"Learning equivalence not shown ({', '.join(by_verdict['inconclusive'])}: inconclusive)."
    if not by_verdict.get("equivalent"):
        return "Learning equivalence not judged: no signal both frameworks log comparably."
    return None


def with_learning_warning(verdict: str, warning: str | None) -> str:
    """A pair's throughput verdict followed by its learning warning: the verdict is never printed without it."""
    return verdict if warning is None else f"{verdict} {warning}"


def _number(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.4g}"


def _difference(row: dict[str, Any], key: str = "difference") -> str:
    value = row.get(key)
    if value is None:
        return "n/a"
    return f"{value * 100:+.1f}%" if row["margin_kind"] == "relative" else f"{value:+.4g}"


def _margin(row: dict[str, Any]) -> str:
    if row["margin"] is None:
        return "none"
    return f"±{row['margin'] * 100:.0f}%" if row["margin_kind"] == "relative" else f"±{row['margin']:g}"


def _verdict(row: dict[str, Any]) -> str:
    text = f"{row['verdict']} ({row['why']})"
    last = row.get("last_third")
    if last:
        text += f"; last third: {last['verdict']} ({_difference({**row, **last})})"
    return text


def _signal_line(row: dict[str, Any]) -> list[str]:
    interval = "n/a"
    if row.get("ci_low") is not None:
        interval = f"{_difference(row, 'ci_low')} .. {_difference(row, 'ci_high')}"
    return [
        f"`{row['signal']}`",
        row["unit"],
        _number(row["miles"]),
        _number(row["verl"]),
        f"{_difference(row)} [{interval}]",
        _margin(row),
        _verdict(row),
    ]


def length_sentence(explains: dict[str, float | None]) -> str:
    generate, length, per_token = (explains.get(k) for k in ("generate_ratio", "length_ratio", "per_token_ratio"))
    if generate is None or length is None:
        return "Response length vs generate time: not available (no generate time or no response length)."
    text = (
        f"Generate time Miles/VERL {generate:.3f}, response length Miles/VERL {length:.3f}, generate seconds per "
        f"response token Miles/VERL {_number(per_token)}."
    )
    if explains.get("share") is not None:
        text += f" The response-length gap explains {explains['share'] * 100:.0f}% of the generate-time gap (log)."
    else:
        text += " The generate-time gap is under 2%: no share to attribute."
    return text


def learning_blocks(doc: dict[str, Any], images: dict[str, str]) -> list[Any]:
    pairs = doc.get("learning") or []
    if not pairs:
        return []
    pct = f"{1 - 2 * pairs[0]['alpha']:.0%}"
    blocks: list[Any] = [
        Heading(2, "Do both learn the same?"),
        Paragraph(
            "Per signal, the mean over the judged window of the step-paired difference Miles - VERL (relative "
            f"signals: Miles/VERL - 1), its {pct} circular block-bootstrap interval, and the equivalence verdict "
            "against the signal's margin (docs/benchmark/analysis.md)."
        ),
    ]
    header = ["signal", "unit", "Miles", "VERL", f"Miles - VERL [{pct} CI]", "margin", "verdict"]
    for pair in pairs:
        blocks.append(Heading(3, f"{pair['backend']} / {pair['layout']}: from step {pair['from_step']}"))
        warning = learning_warning(doc, pair["backend"], pair["layout"])
        if warning:
            blocks.append(Paragraph(warning))
        blocks.append(Table(header, [_signal_line(row) for row in pair["signals"]]))
        blocks.append(Paragraph(length_sentence(pair["length_explains"])))
    if LEARNING_PLOT_TITLE in images:  # drawn once, under Plots, with the others
        blocks.append(
            Paragraph(f'Trajectories: "{LEARNING_PLOT_TITLE}" under Plots (`{images[LEARNING_PLOT_TITLE]}`).')
        )
    return blocks


def _draw_panel(svg: Canvas, frame: Frame, pair: dict[str, Any], row: dict[str, Any], index: int) -> None:
    series = pair["series"][row["signal"]]
    last = max([pair["from_step"], *series["miles"]["steps"], *series["verl"]["steps"]])
    svg.rect(frame.x(pair["from_step"]), frame.top, frame.x(last) - frame.x(pair["from_step"]), frame.height,
             "#e6e6e6", cls="judged-window")  # fmt: skip
    svg.group(f"learning-{index}", frame.left, frame.top, frame.width, frame.height)
    for framework in ("miles", "verl"):
        points = series[framework]
        svg.path(
            frame.pixels(points["steps"], points["values"]),
            SIDE_COLORS[framework],
            width=1.2,
            columns=int(frame.width),
            cls=f"trace {framework}",
        )
    svg.end_group()
    draw_y_axis(svg, frame, label="", size=PANEL_FONT, count=5)
    draw_x_axis(svg, frame, label="", size=PANEL_FONT, count=5, grid=False)
    draw_border(svg, frame)
    title = f"{pair['backend']}/{pair['layout']} {row['signal']} ({row['unit']}): {row['verdict']}"
    svg.text(frame.left, frame.top - 12, title, size=PANEL_FONT + 1, cls="title")


def _panel_range(pair: dict[str, Any], row: dict[str, Any]) -> tuple[tuple[float, float], tuple[float, float]]:
    series = pair["series"][row["signal"]]
    steps = [pair["from_step"], *series["miles"]["steps"], *series["verl"]["steps"]]
    values = np.concatenate([np.asarray(series[f]["values"], dtype=float) for f in ("miles", "verl")])
    values = values[np.isfinite(values)]
    low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    pad = 0.05 * (high - low or abs(high) or 1.0)
    return (float(min(steps)), float(max(steps))), (low - pad, high + pad)


def learning_size_px(num_panels: int) -> tuple[int, int]:
    return PANEL_PX[0] * PANEL_COLUMNS, PANEL_PX[1] * -(-num_panels // PANEL_COLUMNS) + LEGEND_PX


def plot_learning(doc: dict[str, Any], path: Path) -> Path | None:
    """Every signal of every pair, one panel each; None when no pair has learning signals."""
    panels = [(pair, row) for pair in doc.get("learning") or [] if pair["available"] for row in pair["signals"]]
    if not panels:
        return None
    width, height = learning_size_px(len(panels))
    svg = Canvas(width, height, LEARNING_PLOT_TITLE)
    keys = [LegendKey(SIDE_NAMES[f], SIDE_COLORS[f], "line") for f in ("miles", "verl")]
    legend_row(svg, [*keys, LegendKey("judged window", "#e6e6e6", "band")], center_x=width / 2, y=20, size=12)
    for index, (pair, row) in enumerate(panels):
        left = (index % PANEL_COLUMNS) * PANEL_PX[0]
        top = LEGEND_PX + (index // PANEL_COLUMNS) * PANEL_PX[1]
        x_range, y_range = _panel_range(pair, row)
        frame = Frame(left + 70, top + 30, PANEL_PX[0] - 90, PANEL_PX[1] - 62, x_range, y_range)
        _draw_panel(svg, frame, pair, row, index)
    return save(svg, Path(path))
