"""The report's charts as SVG files, drawn from the report.json document (svg.py: no plotting library).

- `phase_bars_svg(doc)`: per cell one horizontal bar of its median phase seconds, stacked; the cells of a
  candidate/reference pair on adjacent rows under the pair's name, one scale for all; the median step time as a
  black tick and a number. Phases a side does not report are left out of its bar and named once, under the chart.
- `step_times_svg(doc)`: one panel per pair, both sides' step-time traces overlaid (every repeat a line, coloured
  by the side's role), each side's steady-state start dashed in its colour and the common steady window shaded;
  the y range follows the steady steps, so a flat series looks flat even after a slow warm-up (points off the
  scale are counted in the panel's title).
- `ratios_svg(doc)`: the candidate/reference ratio (e.g. Miles/VERL) of every metric with its interval, coloured by
  the document's practical verdict (candidate better / worse beyond the threshold, no practical difference,
  inconclusive); the threshold band drawn.
- Legends sit outside the data (above the chart, or beside a panel). Sizes are fixed in pixels (the `*_PX`
  constants) and fonts are sized for GitHub's ~880 px display width. `plot_*` write a file and return its path.

Caveats:
- Each `plot_*` returns None (and writes nothing) when there is nothing to draw.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from scripts.benchmark.contracts.report import CellModel, ComparisonModel, ReportDocument
from scripts.benchmark.report.palette import PHASE_COLORS, ROLE_COLORS, VERDICT_COLORS, verdict_label
from scripts.benchmark.report.svg import (
    Canvas,
    Frame,
    LegendKey,
    draw_border,
    draw_x_axis,
    draw_y_axis,
    legend_column,
    legend_row,
    save,
    text_width,
)

from miles.utils.bench_metrics import REPORT_METRICS, STEP_PHASES

WIDTH_PX = 1000
BAR_ROW_PX = 34
PAIR_GAP_ROWS = 0.6
MARGIN_PX = 150
STEP_PANEL_PX = 300
RATIO_ROW_PX = 24
FONT = 13
INK = "#1f2328"


def _labels(doc: ReportDocument) -> tuple[str, str]:
    pair = doc.side_pair()
    return pair.candidate.label, pair.reference.label if pair.reference is not None else "reference"


def _role(doc: ReportDocument, cell: CellModel) -> str:
    side = doc.side(cell.side)
    return side.role if side is not None else "candidate"


def _label(doc: ReportDocument, cell: CellModel) -> str:
    side = doc.side(cell.side)
    return side.label if side is not None else cell.side


def _label_margin(labels: list[str], size: float, *, minimum: float = 120.0) -> float:
    """Room left of a frame for its row labels (bold labels run wider than the estimate)."""
    return max([minimum, *(1.1 * text_width(label, size) + 24 for label in labels)])


def grouped_cells(doc: ReportDocument) -> list[tuple[str, list[CellModel]]]:
    """Cells by backend/layout (candidate before reference), groups in sorted order."""
    groups: dict[str, list[CellModel]] = {}
    for cell in sorted(doc.cells, key=lambda c: (c.backend, c.layout, _role(doc, c), c.side)):
        groups.setdefault(f"{cell.backend} / {cell.layout}", []).append(cell)
    return list(groups.items())


def _bar_rows(doc: ReportDocument) -> list[tuple[float, str, CellModel]]:
    """(y, label, cell) with a gap between pairs; the pair name is in every label, so no row is ambiguous."""
    rows, y = [], 0.0
    for name, cells in grouped_cells(doc):
        for cell in cells:
            rows.append((y, f"{name}  {_label(doc, cell)}", cell))
            y += 1
        y += PAIR_GAP_ROWS
    return rows


def phase_bars_size_px(doc: ReportDocument) -> tuple[int, int]:
    rows = _bar_rows(doc)
    return WIDTH_PX, round(MARGIN_PX + BAR_ROW_PX * (rows[-1][0] + 1 if rows else 0))


def _bar_segments(
    doc: ReportDocument, rows: list[tuple[float, str, CellModel]]
) -> tuple[list[tuple], dict[str, set[str]]]:
    """Per row: (y, [(phase, left, seconds)], step median, bar end); and the phases each side does not report."""
    out, missing = [], {}
    for y, _, cell in rows:
        left, segments = 0.0, []
        for phase in STEP_PHASES:  # the phases that stack up to the step
            value = cell.summaries[f"phases_s.{phase}"].median
            if value is None:
                missing.setdefault(_label(doc, cell), set()).add(phase)
                continue
            segments.append((phase, left, value))
            left += value
        step = cell.summaries["step_time_s"].median
        out.append((y, segments, step, max(left, step or 0.0)))
    return out, missing


def phase_bars_svg(doc: ReportDocument) -> Canvas | None:
    rows = _bar_rows(doc)
    if not rows:
        return None
    width, height = phase_bars_size_px(doc)
    bars, missing = _bar_segments(doc, rows)
    longest = max(end for *_, end in bars)
    left = _label_margin([label for _, label, _ in rows], FONT)
    bottom = height - (80 if missing else 55)
    x_range, y_range = (0.0, longest * 1.12 or 1.0), (-0.5, rows[-1][0] + 0.5)
    frame = Frame(left, 70, WIDTH_PX - 30 - left, bottom - 70, x_range, y_range, y_down=True)
    svg = Canvas(width, height, "Phases per step (median, steady state), by pair")
    draw_x_axis(svg, frame, label="median seconds per step (steady state)", size=FONT)
    for (y, segments, step, end), (_, label, _) in zip(bars, rows, strict=True):
        svg.text(frame.left - 8, frame.y(y), label, size=FONT, anchor="end", cls="ylabel")
        for phase, start, seconds in segments:
            svg.rect(frame.x(start), frame.y(y - 0.4), frame.x(start + seconds) - frame.x(start), 0.8 * _row(frame),
                     PHASE_COLORS[phase], cls=f"bar {phase}")  # fmt: skip
        if step is not None:
            svg.line(frame.x(step), frame.y(y - 0.45), frame.x(step), frame.y(y + 0.45), INK, width=3)
        number = "n/a" if step is None else f"{step:.1f} s"
        svg.text(frame.x(end) + 8, frame.y(y), number, size=FONT - 1, cls="value")
    draw_border(svg, frame)
    shown = dict.fromkeys(phase for _, segments, _, _ in bars for phase, _, _ in segments)
    keys = [LegendKey("step time (median)", INK, "line")] + [LegendKey(p, PHASE_COLORS[p]) for p in shown]
    legend_row(svg, keys, center_x=WIDTH_PX / 2, y=22, size=FONT - 1)
    if missing:
        text = "; ".join(f"{side}: {', '.join(sorted(p))}" for side, p in sorted(missing.items()))
        svg.text(10, height - 14, f"Not reported, left out of the bar: {text}", size=FONT - 1, cls="note")
    return svg


def _row(frame: Frame) -> float:
    """Pixels per category row of a frame whose y axis counts rows."""
    return abs(frame.y(1.0) - frame.y(0.0))


def _steady_values(cell: CellModel) -> np.ndarray:
    start = cell.steady_state.start_step
    values = []
    for series in cell.step_time_series:
        steps, times = np.asarray(series.steps, dtype=float), np.asarray(series.step_time_s, dtype=float)
        cut = start if start is not None else (steps[len(steps) // 2] if len(steps) else 0)
        values.append(times[(steps >= cut) & np.isfinite(times)])
    return np.concatenate(values) if values else np.zeros(0)


def _y_range(cells: list[CellModel]) -> tuple[float, float] | None:
    """The steady steps' range (0.5th to 99.5th percentile), padded; None when there is none."""
    values = np.concatenate([_steady_values(cell) for cell in cells])
    if not len(values):
        return None
    low, high = (float(x) for x in np.percentile(values, [0.5, 99.5]))
    pad = max(high - low, 0.02 * abs(high)) * 0.35
    return low - pad, high + pad


def _trace_panel(
    svg: Canvas, frame: Frame, name: str, cells: list[CellModel], index: int, doc: ReportDocument
) -> None:
    off_scale, starts, keys = 0, [], []
    low, high = frame.y_range
    svg.group(f"step-times-{index}", frame.left, frame.top, frame.width, frame.height)
    for cell in cells:
        color = ROLE_COLORS[_role(doc, cell)]
        side = _label(doc, cell)
        for k, series in enumerate(cell.step_time_series):
            points = frame.pixels(series.steps, series.step_time_s)
            ys = np.asarray(series.step_time_s, dtype=float)
            svg.path(points, color, width=1.2, opacity=0.9 if k == 0 else 0.5, columns=int(frame.width),
                     cls=f"trace {cell.side}")  # fmt: skip
            off_scale += int(np.sum(np.isfinite(ys) & ((ys < low) | (ys > high))))
        keys.append(LegendKey(side, color, "line"))
        steady = cell.steady_state
        if steady.start_step is not None:
            starts.append(steady.start_step)
            x = frame.x(steady.start_step)
            svg.line(x, frame.top, x, frame.bottom, color, width=1.4, dash="6 4")
            how = f"steady from step {steady.start_step}" if steady.reached else "never steady: last half used"
            keys.append(LegendKey(f"{side} {how}", color, "dashed"))
    if starts:
        svg.rect(frame.x(max(starts)), frame.top, frame.right - frame.x(max(starts)), frame.height, "#8c959f",
                 opacity=0.15, cls="steady-window")  # fmt: skip
        keys.append(LegendKey("steady-state window (both)", "#d5d9de", "band"))
    svg.end_group()
    draw_y_axis(svg, frame, label="step time (s)", size=FONT - 1)
    draw_x_axis(svg, frame, label="", size=FONT - 1, grid=False)
    draw_border(svg, frame)
    title = name + (f"  ({off_scale} warm-up/outlier points off the scale)" if off_scale else "")
    svg.text(frame.left, frame.top - 14, title, size=FONT, cls="title")
    legend_column(svg, keys, left=frame.right + 18, top=frame.top + 8, size=FONT - 2)


def step_times_size_px(num_panels: int) -> tuple[int, int]:
    return WIDTH_PX, STEP_PANEL_PX * num_panels + 60


def step_times_svg(doc: ReportDocument) -> Canvas | None:
    groups = grouped_cells(doc)
    if not groups:
        return None
    width, height = step_times_size_px(len(groups))
    candidate, reference = _labels(doc)
    svg = Canvas(width, height, f"Step time over steps, {candidate} and {reference} of a pair overlaid")
    for index, (name, cells) in enumerate(groups):
        steps = [s for cell in cells for series in cell.step_time_series for s in series.steps]
        x_range = (float(min(steps, default=0)), float(max(steps, default=1)))
        top = 40 + index * STEP_PANEL_PX
        frame = Frame(90, top, 590, STEP_PANEL_PX - 85, x_range, _y_range(cells) or (0.0, 1.0))
        _trace_panel(svg, frame, name, cells, index, doc)
    svg.text(frame.left + frame.width / 2, frame.bottom + 44, "step", size=FONT - 1, cls="xlabel")
    return svg


def ratio_rows(doc: ReportDocument) -> list[ComparisonModel]:
    """Comparisons with a ratio, grouped by backend/layout, metrics in report order."""
    order = {name: i for i, name in enumerate(REPORT_METRICS)}
    rows = [c for c in doc.comparisons if c.ratio is not None]
    return sorted(rows, key=lambda c: (c.backend, c.layout, order.get(c.metric, len(order))))


def _ratio_ticks(rows: list[ComparisonModel]) -> tuple[list[int], list[tuple[int, str, bool]]]:
    """Row positions of the ratios and the y ticks: a bold heading row per pair, then its metrics."""
    positions, ticks, y, pair = [], [], 0, None
    for row in rows:
        if (row.backend, row.layout) != pair:
            pair = (row.backend, row.layout)
            ticks.append((y, f"{row.backend} / {row.layout}", True))
            y += 1
        positions.append(y)
        ticks.append((y, row.metric, False))
        y += 1
    return positions, ticks


def ratio_chart_size_px(doc: ReportDocument) -> tuple[int, int]:
    return WIDTH_PX, MARGIN_PX + RATIO_ROW_PX * len(_ratio_ticks(ratio_rows(doc))[1])


def _ratio_range(rows: list[ComparisonModel]) -> tuple[float, float]:
    thresholds = [row.threshold for row in rows]
    values = [1.0 - max(thresholds), 1.0 + max(thresholds)]
    values += [v for row in rows for v in (row.ratio, row.ci_low, row.ci_high) if v is not None]
    values = [v for v in values if math.isfinite(v)]
    low, high = min(values), max(values)
    pad = 0.05 * (high - low or 0.1)
    return low - pad, high + pad


def ratios_svg(doc: ReportDocument) -> Canvas | None:
    rows = ratio_rows(doc)
    if not rows:
        return None
    positions, ticks = _ratio_ticks(rows)
    width, height = ratio_chart_size_px(doc)
    candidate, reference = _labels(doc)
    left = _label_margin([label for _, label, _ in ticks], FONT - 1)
    y_range = (-0.5, ticks[-1][0] + 0.5)
    frame = Frame(left, 60, WIDTH_PX - 30 - left, height - 115, _ratio_range(rows), y_range,
                  y_down=True)  # fmt: skip
    svg = Canvas(
        width, height, f"{candidate}/{reference} ratios with confidence intervals, coloured by practical verdict"
    )
    axis = f"{candidate} / {reference} (above 1: {candidate}'s number is larger)"
    draw_x_axis(svg, frame, label=axis, size=FONT)
    for y, text, heading in ticks:
        svg.text(frame.left - 8, frame.y(y), text, size=FONT - 1, anchor="end", weight="bold" if heading else "normal",
                 cls="ylabel")  # fmt: skip
    for y, row in zip(positions, rows, strict=True):
        threshold = row.threshold
        svg.rect(frame.x(1 - threshold), frame.y(y - 0.5), frame.x(1 + threshold) - frame.x(1 - threshold),
                 _row(frame), "#d8dee4", cls="band")  # fmt: skip
    svg.line(frame.x(1.0), frame.top, frame.x(1.0), frame.bottom, INK, width=1)
    for y, row in zip(positions, rows, strict=True):
        color, center = VERDICT_COLORS[row.verdict], frame.y(y)
        low = row.ci_low if row.ci_low is not None else row.ratio
        high = row.ci_high if row.ci_high is not None else row.ratio
        svg.line(frame.x(low), center, frame.x(high), center, color, width=1.5)
        for end in (low, high):
            svg.line(frame.x(end), center - 4, frame.x(end), center + 4, color, width=1.5)
        svg.circle(frame.x(row.ratio), center, 4, color, cls="ratio")
    draw_border(svg, frame)
    shown = dict.fromkeys(row.verdict for row in rows)
    keys = [LegendKey("practical threshold band", "#d8dee4", "band")]
    keys += [LegendKey(verdict_label(v, candidate), VERDICT_COLORS[v], "marker") for v in shown]
    legend_row(svg, keys, center_x=WIDTH_PX / 2, y=22, size=FONT - 1)
    return svg


def plot_phase_bars(doc: ReportDocument, path: Path) -> Path | None:
    svg = phase_bars_svg(doc)
    return None if svg is None else save(svg, path)


def plot_step_times(doc: ReportDocument, path: Path) -> Path | None:
    svg = step_times_svg(doc)
    return None if svg is None else save(svg, path)


def plot_ratios(doc: ReportDocument, path: Path) -> Path | None:
    svg = ratios_svg(doc)
    return None if svg is None else save(svg, path)
