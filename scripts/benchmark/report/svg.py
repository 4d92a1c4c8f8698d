"""A small SVG writer for the report's charts: a canvas of shapes and text, plot frames with linear scales, axes with
round-number ticks, and legends.

Why not matplotlib: the report's charts are bars, lines and intervals, and matplotlib costs half a second to import
plus about a tenth of a second per panel to lay out and rasterise text; a report with a learning panel per signal
took seconds. SVG text is laid out by the viewer, so nothing here needs a font engine.

Caveats:
- Text widths are estimated (`text_width`: an average sans-serif character is about 0.56 em), so margins that hold
  labels are sized with some room to spare.
- Every value and label goes through `xml.sax.saxutils` escaping; ids (clip paths) are prefixed per chart so charts
  inlined into one page never collide.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

import numpy as np

from miles.utils.bench_metrics import write_text_atomic

FONT_FAMILY = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
TEXT_COLOR = "#1f2328"
AXIS_COLOR = "#57606a"
GRID_COLOR = "#eaeef2"
_CHAR_EM = 0.56


def text_width(text: str, size: float) -> float:
    """Estimated width in pixels of `text` at font size `size` (no font engine: an average character width)."""
    return len(text) * size * _CHAR_EM


def nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round-number ticks (steps of 1, 2, 2.5 or 5 times a power of ten) inside [low, high], as close to `count`
    ticks as those steps allow."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else []
    power = 10 ** math.floor(math.log10((high - low) / max(1, count - 1)))
    candidates = [m * power for m in (0.5, 1, 2, 2.5, 5, 10)]
    return min((_ticks_with_step(low, high, step) for step in candidates), key=lambda t: abs(len(t) - count))


def _ticks_with_step(low: float, high: float, step: float) -> list[float]:
    first = math.ceil(low / step - 1e-9) * step
    count = int(math.floor((high - first) / step + 1e-9)) + 1
    return [round(first + k * step, 12) for k in range(max(0, count))]


def tick_label(value: float, ticks: Sequence[float]) -> str:
    """A tick's number with as many decimals as the tick spacing needs."""
    step = min((b - a for a, b in zip(ticks, ticks[1:], strict=False)), default=abs(value) or 1.0)
    decimals = max(0, -math.floor(math.log10(step) + 1e-9)) if step > 0 else 0
    scaled = step * 10**decimals
    if step > 0 and abs(scaled - round(scaled)) > 1e-9 * max(1.0, scaled):  # 2.5 x 10^k needs one decimal more
        decimals += 1
    return f"{value:.{decimals}f}"


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


@dataclass
class Canvas:
    """Shapes in drawing order; `to_svg()` is the document (white background, fixed pixel size)."""

    width: float
    height: float
    title: str
    parts: list[str] = field(default_factory=list)

    def rect(self, x: float, y: float, w: float, h: float, fill: str, *, opacity: float = 1.0, cls: str = "") -> None:
        if w <= 0 or h <= 0:
            return
        extra = f' fill-opacity="{_number(opacity)}"' if opacity < 1 else ""
        self.parts.append(
            f'<rect{_class(cls)} x="{_number(x)}" y="{_number(y)}" width="{_number(w)}" height="{_number(h)}" '
            f"fill={quoteattr(fill)}{extra}/>"
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, **style: float | str) -> None:
        self.parts.append(
            f'<line x1="{_number(x1)}" y1="{_number(y1)}" x2="{_number(x2)}" y2="{_number(y2)}"'
            f"{_stroke(stroke, **style)}/>"
        )

    def path(
        self,
        points: Iterable[tuple[float, float]],
        stroke: str,
        *,
        columns: int = 0,
        cls: str = "",
        **style: float | str,
    ) -> None:
        """A polyline; a non-finite point breaks it (the gap a missing step leaves). With `columns` (the pixel width
        it spans), a line of more points than two per column keeps each column's lowest and highest point: the
        same picture, and a 10,000-step trace stays a small file."""
        xy = np.asarray(points if isinstance(points, np.ndarray) else list(points), dtype=float).reshape(-1, 2)
        if columns and len(xy) > 2 * columns:
            xy = thin_to_columns(xy, columns)
        commands, pen_down = [], False
        for x, y in xy.tolist():
            if not (math.isfinite(x) and math.isfinite(y)):
                pen_down = False
                continue
            commands.append(f"{'L' if pen_down else 'M'}{_number(x)} {_number(y)}")
            pen_down = True
        if commands:
            self.parts.append(f'<path{_class(cls)} d="{" ".join(commands)}" fill="none"{_stroke(stroke, **style)}/>')

    def circle(self, x: float, y: float, r: float, fill: str, *, cls: str = "") -> None:
        self.parts.append(
            f'<circle{_class(cls)} cx="{_number(x)}" cy="{_number(y)}" r="{_number(r)}" fill={quoteattr(fill)}/>'
        )

    def text(
        self,
        x: float,
        y: float,
        text: str,
        *,
        size: float,
        anchor: str = "start",
        weight: str = "normal",
        fill: str = TEXT_COLOR,
        rotate: bool = False,
        cls: str = "",
    ) -> None:
        """Text centred vertically on y; `anchor` is start, middle or end."""
        turn = f' transform="rotate(-90 {_number(x)} {_number(y)})"' if rotate else ""
        bold = ' font-weight="bold"' if weight == "bold" else ""
        self.parts.append(
            f'<text{_class(cls)} x="{_number(x)}" y="{_number(y)}" font-size="{_number(size)}" text-anchor="{anchor}" '
            f'dominant-baseline="central" fill={quoteattr(fill)}{bold}{turn}>{escape(text)}</text>'
        )

    def group(self, clip_id: str, left: float, top: float, width: float, height: float) -> None:
        """Open a group clipped to a rectangle; `end_group` closes it."""
        self.parts.append(
            f'<clipPath id={quoteattr(clip_id)}><rect x="{_number(left)}" y="{_number(top)}" '
            f'width="{_number(width)}" height="{_number(height)}"/></clipPath><g clip-path="url(#{clip_id})">'
        )

    def end_group(self) -> None:
        self.parts.append("</g>")

    def to_svg(self) -> str:
        w, h = round(self.width), round(self.height)
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f"font-family={quoteattr(FONT_FAMILY)}><title>{escape(self.title)}</title>"
            f'<rect width="{w}" height="{h}" fill="#ffffff"/>' + "".join(self.parts) + "</svg>\n"
        )


def thin_to_columns(xy: np.ndarray, columns: int) -> np.ndarray:
    """Per pixel column (x in pixels, left to right), its lowest and highest point, in x order; missing points stay
    where they were, so gaps stay gaps."""
    x, y = xy[:, 0], xy[:, 1]
    finite = np.isfinite(x) & np.isfinite(y)
    if not finite.any():
        return xy
    column = np.floor((x - np.nanmin(x)) / ((np.nanmax(x) - np.nanmin(x)) or 1.0) * (columns - 1))
    column = np.where(np.isfinite(column), column, -1).astype(np.int64)
    keep = np.zeros(len(xy), dtype=bool)
    for y_key in (np.where(finite, y, np.inf), np.where(finite, -y, np.inf)):  # lowest, then highest
        order = np.lexsort((y_key, column))  # by column, then by the key: each column's first is its extreme
        keep[order[np.r_[True, np.diff(column[order]) != 0]]] = True
    keep[~finite] = True  # breaks are kept where they were
    return xy[keep]


def _class(cls: str) -> str:
    """A class attribute: how tests and style sheets find a chart's parts (labels, markers, legends)."""
    return f" class={quoteattr(cls)}" if cls else ""


def _stroke(stroke: str, *, width: float = 1.0, dash: str = "", opacity: float = 1.0) -> str:
    out = f' stroke={quoteattr(stroke)} stroke-width="{_number(width)}"'
    if dash:
        out += f" stroke-dasharray={quoteattr(dash)}"
    if opacity < 1:
        out += f' stroke-opacity="{_number(opacity)}"'
    return out


@dataclass(frozen=True)
class Frame:
    """A plotting area in pixels with linear scales: data x in `x_range` maps left to right, data y in `y_range`
    bottom to top (or top to bottom with `y_down`, for rows of categories)."""

    left: float
    top: float
    width: float
    height: float
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    y_down: bool = False

    def x(self, value: float | np.ndarray) -> float | np.ndarray:
        low, high = self.x_range
        return self.left + (value - low) / ((high - low) or 1.0) * self.width

    def y(self, value: float | np.ndarray) -> float | np.ndarray:
        low, high = self.y_range
        share = (value - low) / ((high - low) or 1.0)
        return self.top + (share if self.y_down else 1 - share) * self.height

    def pixels(self, xs: Sequence[float | None], ys: Sequence[float | None]) -> np.ndarray:
        """(n, 2) pixel coordinates of data points, vectorised; a missing (None) or non-finite value gives NaN,
        which breaks a line there."""
        # numpy reads None as NaN; x() and y() are arithmetic, so they map whole arrays
        return np.column_stack([self.x(np.asarray(xs, dtype=float)), self.y(np.asarray(ys, dtype=float))])

    @property
    def bottom(self) -> float:
        return self.top + self.height

    @property
    def right(self) -> float:
        return self.left + self.width


def draw_border(canvas: Canvas, frame: Frame) -> None:
    canvas.parts.append(
        f'<rect class="frame" x="{_number(frame.left)}" y="{_number(frame.top)}" width="{_number(frame.width)}" '
        f'height="{_number(frame.height)}" fill="none" stroke="{AXIS_COLOR}" stroke-width="1"/>'
    )


def draw_x_axis(canvas: Canvas, frame: Frame, *, label: str, size: float, count: int = 7, grid: bool = True) -> None:
    """Ticks and numbers under the frame, the axis label below them; light vertical grid lines when `grid`."""
    ticks = nice_ticks(*frame.x_range, count=count)
    for value in ticks:
        x = frame.x(value)
        if grid:
            canvas.line(x, frame.top, x, frame.bottom, GRID_COLOR, width=1)
        canvas.line(x, frame.bottom, x, frame.bottom + 4, AXIS_COLOR)
        canvas.text(x, frame.bottom + 8 + size / 2, tick_label(value, ticks), size=size - 1, anchor="middle")
    if label:
        canvas.text(frame.left + frame.width / 2, frame.bottom + 14 + 1.6 * size, label, size=size, anchor="middle")


def draw_y_axis(canvas: Canvas, frame: Frame, *, label: str, size: float, count: int = 5, grid: bool = True) -> None:
    """Ticks and numbers left of the frame, the axis label rotated beside them."""
    ticks = nice_ticks(*frame.y_range, count=count)
    labels = [tick_label(v, ticks) for v in ticks]
    for value, text in zip(ticks, labels, strict=True):
        y = frame.y(value)
        if grid:
            canvas.line(frame.left, y, frame.right, y, GRID_COLOR, width=1)
        canvas.line(frame.left - 4, y, frame.left, y, AXIS_COLOR)
        canvas.text(frame.left - 7, y, text, size=size - 1, anchor="end")
    if label:
        widest = max((text_width(t, size - 1) for t in labels), default=0.0)
        x = frame.left - 14 - widest - size / 2
        canvas.text(x, frame.top + frame.height / 2, label, size=size, anchor="middle", rotate=True)


@dataclass(frozen=True)
class LegendKey:
    label: str
    color: str
    kind: str = "box"
    """box (a filled square), line, dashed (a dashed line), marker (a dot with an interval), band (a pale box)."""


def _draw_key(canvas: Canvas, x: float, y: float, key: LegendKey) -> None:
    if key.kind in ("box", "band"):
        canvas.rect(x, y - 6, 14, 12, key.color)
    elif key.kind == "marker":
        canvas.line(x, y, x + 16, y, key.color, width=1.5)
        canvas.circle(x + 8, y, 3.5, key.color)
    else:
        canvas.line(x, y, x + 18, y, key.color, width=2.5, dash="5 3" if key.kind == "dashed" else "")


def legend_row(canvas: Canvas, keys: Sequence[LegendKey], *, center_x: float, y: float, size: float) -> None:
    """Keys side by side, centred on `center_x`."""
    widths = [24 + text_width(k.label, size) + 18 for k in keys]
    x = center_x - sum(widths) / 2
    for key, width in zip(keys, widths, strict=True):
        _draw_key(canvas, x, y, key)
        canvas.text(x + 24, y, key.label, size=size, cls="legend")
        x += width


def legend_column(canvas: Canvas, keys: Sequence[LegendKey], *, left: float, top: float, size: float) -> None:
    """Keys one under another, from (left, top)."""
    for index, key in enumerate(keys):
        y = top + index * (size + 8)
        _draw_key(canvas, left, y, key)
        canvas.text(left + 24, y, key.label, size=size, cls="legend")


def save(svg: Canvas, path: Path) -> Path:
    """Write a chart and return its path."""
    write_text_atomic(path, svg.to_svg())
    return path
