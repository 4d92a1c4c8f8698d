"""The report's PNG plots, drawn from the report.json document (matplotlib imported inside each function, Agg).

- `phase_bars_figure(doc)`: per cell one horizontal bar of its median phase seconds, stacked; the cells of a
  Miles/VERL pair on adjacent rows under the pair's name, one scale for all; the median step time as a black tick
  and a number. Phases a framework does not report are left out of its bar and named once, under the plot.
- `step_times_figure(doc)`: one panel per pair, the Miles and VERL step-time traces overlaid (every repeat a line),
  each side's steady-state window shaded in its colour; the y range follows the steady steps, so a flat series
  looks flat even after a slow warm-up (points off the scale are counted in the panel).
- `ratios_figure(doc)`: the Miles/VERL ratio of every metric with its interval, coloured by the practical verdict
  (Miles better / worse beyond the threshold, no practical difference, inconclusive); the threshold band drawn.
- Legends sit outside the data (above the axes). Sizes are fixed in pixels (`DPI`, the `*_PX` constants, no
  tight bbox) and fonts are sized for GitHub's ~880 px display width. `plot_*` save a figure and return its path.

Caveats:
- Each `plot_*` returns None (and writes nothing) when there is nothing to draw.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from scripts.benchmark.analysis.verdict import Practical, practical_verdict
from scripts.benchmark.report.palette import PHASE_COLORS, VERDICT_COLORS, VERDICT_LABELS

DPI = 100
WIDTH_PX = 1000
BAR_ROW_PX = 34
PAIR_GAP_ROWS = 0.6
MARGIN_PX = 150
STEP_PANEL_PX = 300
RATIO_ROW_PX = 24
FONT = 11
SIDE_COLORS = {"miles": "#1f6feb", "verl": "#e36209"}
SIDE_NAMES = {"miles": "Miles", "verl": "VERL"}


class _Figures:
    """The little of pyplot the plots use, on bare Figures (no pyplot: its import and figure registry cost time)."""

    @staticmethod
    def subplots(figsize: tuple[float, float], dpi: int, **kwargs):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=figsize, dpi=dpi)
        FigureCanvasAgg(fig)  # a raster canvas: text extents can be measured before saving
        return fig, fig.subplots(**kwargs)

    @staticmethod
    def get_cmap(name: str):
        import matplotlib

        return matplotlib.colormaps[name]

    @staticmethod
    def close(fig) -> None:
        """A bare Figure is not registered anywhere; it goes with its last reference."""


def _pyplot():
    return _Figures


def _figure(height_px: float, **kwargs):
    plt = _pyplot()
    return plt.subplots(figsize=(WIDTH_PX / DPI, height_px / DPI), dpi=DPI, **kwargs)


def _fractions(fig, top_px: float, bottom_px: float) -> None:
    height = fig.get_figheight() * DPI
    fig.subplots_adjust(top=1 - top_px / height, bottom=bottom_px / height)


def save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # zlib level 1: a third of the encoding time of the default 6, files about a third larger.
    fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 1})
    _pyplot().close(fig)
    return path


def grouped_cells(doc: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """Cells by backend/layout (Miles before VERL), groups in sorted order."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for cell in sorted(doc["cells"], key=lambda c: (c["backend"], c["layout"], c["framework"])):
        groups.setdefault(f"{cell['backend']} / {cell['layout']}", []).append(cell)
    return list(groups.items())


def _bar_rows(doc: dict[str, Any]) -> list[tuple[float, str, dict[str, Any]]]:
    """(y, label, cell) with a gap between pairs; the pair name is in every label, so no row is ambiguous."""
    rows, y = [], 0.0
    for name, cells in grouped_cells(doc):
        for cell in cells:
            rows.append((y, f"{name}  {SIDE_NAMES.get(cell['framework'], cell['framework'])}", cell))
            y += 1
        y += PAIR_GAP_ROWS
    return rows


def phase_bars_size_px(doc: dict[str, Any]) -> tuple[int, int]:
    rows = _bar_rows(doc)
    return WIDTH_PX, round(MARGIN_PX + BAR_ROW_PX * (rows[-1][0] + 1 if rows else 0))


def phase_bars_figure(doc: dict[str, Any]):
    from miles.utils.bench_metrics import STEP_PHASES as PHASES  # the phases that stack up to the step

    rows = _bar_rows(doc)
    if not rows:
        return None
    fig, ax = _figure(phase_bars_size_px(doc)[1])
    missing: dict[str, set[str]] = {}
    longest = 0.0
    for y, _, cell in rows:
        left = 0.0
        for phase in PHASES:
            value = cell["summaries"][f"phases_s.{phase}"]["median"]
            if value is None:
                missing.setdefault(SIDE_NAMES.get(cell["framework"], cell["framework"]), set()).add(phase)
                continue
            ax.barh(y, value, left=left, height=0.8, color=PHASE_COLORS[phase], label=phase)
            left += value
        step = cell["summaries"]["step_time_s"]["median"]
        end = max(left, step or 0.0)
        longest = max(longest, end)
        if step is not None:
            ax.plot([step, step], [y - 0.45, y + 0.45], color="black", linewidth=2.5, label="step time (median)")
        ax.annotate(
            "n/a" if step is None else f"{step:.1f} s",
            (end, y), xytext=(6, 0), textcoords="offset points", va="center", fontsize=FONT - 1,
        )  # fmt: skip
    ax.set_yticks([y for y, _, _ in rows], [label for _, label, _ in rows], fontsize=FONT)
    ax.invert_yaxis()
    ax.set_xlim(0, longest * 1.12 or 1)
    ax.set_xlabel("median seconds per step (steady state)", fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT - 1)
    _legend_above(fig, ax, ncol=7)
    fig.subplots_adjust(left=0.28, right=0.97)
    _fractions(fig, top_px=70, bottom_px=80 if missing else 55)
    if missing:
        text = "; ".join(f"{side}: {', '.join(sorted(p))}" for side, p in sorted(missing.items()))
        fig.text(0.01, 0.01, f"Not reported, left out of the bar: {text}", fontsize=FONT - 1, va="bottom")
    return fig


def _legend_above(fig, ax, *, ncol: int) -> None:
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles, strict=True))
    fig.legend(
        unique.values(), unique.keys(), loc="upper center", ncol=min(ncol, len(unique)), fontsize=FONT - 1,
        frameon=False, bbox_to_anchor=(0.5, 1.0),
    )  # fmt: skip


def _steady_values(cell: dict[str, Any]) -> list[float]:
    start = cell["steady_state"]["start_step"]
    values = []
    for series in cell["step_time_series"]:
        cut = start if start is not None else series["steps"][len(series["steps"]) // 2] if series["steps"] else 0
        values += [
            y for s, y in zip(series["steps"], series["step_time_s"], strict=True) if s >= cut and y is not None
        ]
    return [v for v in values if math.isfinite(v)]


def _y_range(cells: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The steady steps' range (0.5th to 99.5th percentile), padded; None when there is none."""
    import numpy as np

    values = [v for cell in cells for v in _steady_values(cell)]
    if not values:
        return None
    low, high = (float(x) for x in np.percentile(values, [0.5, 99.5]))
    pad = max(high - low, 0.02 * abs(high)) * 0.35
    return low - pad, high + pad


def _trace_panel(ax, name: str, cells: list[dict[str, Any]]) -> None:
    off_scale, last, starts = 0, 0, []
    y_range = _y_range(cells)
    for cell in cells:
        color = SIDE_COLORS.get(cell["framework"], "gray")
        side = SIDE_NAMES.get(cell["framework"], cell["framework"])
        for k, series in enumerate(cell["step_time_series"]):
            ys = [math.nan if y is None else y for y in series["step_time_s"]]
            ax.plot(
                series["steps"],
                ys,
                color=color,
                linewidth=1,
                alpha=0.9 if k == 0 else 0.5,
                label=side if k == 0 else None,
            )
            last = max([last, *series["steps"]])
            if y_range:
                off_scale += sum(1 for y in ys if math.isfinite(y) and not y_range[0] <= y <= y_range[1])
        steady = cell["steady_state"]
        if steady["start_step"] is not None:
            starts.append(steady["start_step"])
            how = f"steady from step {steady['start_step']}" if steady["reached"] else "never steady: last half used"
            ax.axvline(steady["start_step"], color=color, linestyle="--", linewidth=1.2, label=f"{side} {how}")
    if starts:
        ax.axvspan(max(starts), last, color="#8c959f", alpha=0.12, label="steady-state window (both)")
    if y_range:
        ax.set_ylim(*y_range)
    title = name + (f"  ({off_scale} warm-up/outlier points off the scale)" if off_scale else "")
    ax.set_title(title, fontsize=FONT, loc="left")
    ax.set_ylabel("step time (s)", fontsize=FONT)
    ax.tick_params(labelsize=FONT - 1)
    ax.legend(fontsize=FONT - 2, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def step_times_size_px(num_panels: int) -> tuple[int, int]:
    return WIDTH_PX, STEP_PANEL_PX * num_panels + 60


def step_times_figure(doc: dict[str, Any]):
    groups = grouped_cells(doc)
    if not groups:
        return None
    fig, axes = _figure(step_times_size_px(len(groups))[1], nrows=len(groups), ncols=1, squeeze=False)
    for ax, (name, cells) in zip(axes[:, 0], groups, strict=True):
        _trace_panel(ax, name, cells)
    axes[-1, 0].set_xlabel("step", fontsize=FONT)
    fig.subplots_adjust(left=0.08, right=0.70, hspace=0.45)
    _fractions(fig, top_px=35, bottom_px=50)
    return fig


def ratio_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Comparisons with a ratio, grouped by backend/layout, metrics in report order."""
    from scripts.benchmark.analysis.run_folder import REPORT_METRICS

    order = {name: i for i, name in enumerate(REPORT_METRICS)}
    rows = [c for c in doc["comparisons"] if c["ratio"] is not None]
    return sorted(rows, key=lambda c: (c["backend"], c["layout"], order.get(c["metric"], len(order))))


def ratio_verdict(doc: dict[str, Any], row: dict[str, Any]) -> tuple[Practical, float]:
    from scripts.benchmark.report.headline import threshold_of

    threshold = threshold_of(doc, row["metric"])
    low, high = (None, None) if row["ci_low"] is None else (row["ci_low"] - 1, row["ci_high"] - 1)
    return practical_verdict(low, high, threshold=threshold, direction=row["direction"]), threshold


def _ratio_ticks(rows: list[dict[str, Any]]) -> tuple[list[int], list[tuple[int, str, bool]]]:
    """Row positions of the ratios and the y ticks: a bold heading row per pair, then its metrics."""
    positions, ticks, y, pair = [], [], 0, None
    for row in rows:
        if (row["backend"], row["layout"]) != pair:
            pair = (row["backend"], row["layout"])
            ticks.append((y, f"{row['backend']} / {row['layout']}", True))
            y += 1
        positions.append(y)
        ticks.append((y, row["metric"], False))
        y += 1
    return positions, ticks


def ratio_chart_size_px(doc: dict[str, Any]) -> tuple[int, int]:
    return WIDTH_PX, MARGIN_PX + RATIO_ROW_PX * len(_ratio_ticks(ratio_rows(doc))[1])


def ratios_figure(doc: dict[str, Any]):
    rows = ratio_rows(doc)
    if not rows:
        return None
    positions, ticks = _ratio_ticks(rows)
    fig, ax = _figure(ratio_chart_size_px(doc)[1])
    for y, row in zip(positions, rows, strict=True):
        verdict, threshold = ratio_verdict(doc, row)
        ax.barh(y, 2 * threshold, left=1 - threshold, height=1.0, color="#d8dee4", label="practical threshold band")
        low = row["ci_low"] if row["ci_low"] is not None else row["ratio"]
        high = row["ci_high"] if row["ci_high"] is not None else row["ratio"]
        ax.errorbar(
            row["ratio"], y, xerr=[[max(0.0, row["ratio"] - low)], [max(0.0, high - row["ratio"])]], fmt="o",
            color=VERDICT_COLORS[verdict], capsize=3, markersize=5, label=VERDICT_LABELS[verdict],
        )  # fmt: skip
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks([t[0] for t in ticks], [t[1] for t in ticks], fontsize=FONT - 1)
    for label, (_, _, heading) in zip(ax.get_yticklabels(), ticks, strict=True):
        label.set_fontweight("bold" if heading else "normal")
    ax.set_ylim(ticks[-1][0] + 0.5, -0.5)
    ax.set_xlabel("Miles / VERL (above 1: Miles's number is larger)", fontsize=FONT)
    ax.tick_params(axis="x", labelsize=FONT - 1)
    _legend_above(fig, ax, ncol=5)
    fig.subplots_adjust(left=0.33, right=0.97)
    _fractions(fig, top_px=60, bottom_px=55)
    return fig


def plot_phase_bars(doc: dict[str, Any], path: Path) -> Path | None:
    fig = phase_bars_figure(doc)
    return None if fig is None else save(fig, path)


def plot_step_times(doc: dict[str, Any], path: Path) -> Path | None:
    fig = step_times_figure(doc)
    return None if fig is None else save(fig, path)


def plot_ratios(doc: dict[str, Any], path: Path) -> Path | None:
    fig = ratios_figure(doc)
    return None if fig is None else save(fig, path)
