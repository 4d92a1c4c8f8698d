# doc-dev: docs/benchmark.md
"""The report's PNG plots, drawn from the report.json document (matplotlib imported inside each function, Agg).

- `plot_phase_bars(doc, path)`: per cell, the median seconds of each phase stacked, with the median step time as a
  marker; phases a framework does not report are left out of its bar (and named under it), never drawn as 0.
- `plot_step_times(doc, path)`: step time over steps, one panel per cell, every repeat a line, the steady-state
  window shaded; a cell that never reached steady state says so in its title.
- `plot_ratios(doc, path)`: Miles/VERL ratio per metric and backend/layout with its CI; 1 marked.
- Sizes are fixed in pixels (`DPI` and the `*_SIZE_PX` constants, no tight bbox), so a plot's size is predictable.

Caveats:
- Each function returns None (and writes nothing) when there is nothing to draw.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

DPI = 100
PHASE_BARS_SIZE_PX = (1000, 500)
STEP_TIMES_PANEL_PX = (600, 320)
RATIO_CHART_WIDTH_PX = 1000
RATIO_CHART_ROW_PX = 26
RATIO_CHART_MARGIN_PX = 140
STEP_TIMES_COLUMNS = 2


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(plt, size_px: tuple[int, int], **kwargs):
    return plt.subplots(figsize=(size_px[0] / DPI, size_px[1] / DPI), dpi=DPI, **kwargs)


def _save(fig, plt, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_phase_bars(doc: dict[str, Any], path: Path) -> Path | None:
    from miles.utils.bench_metrics import STEP_PHASES as PHASES  # the phases that stack up to the step

    cells = doc["cells"]
    if not cells:
        return None
    plt = _pyplot()
    fig, ax = _figure(plt, PHASE_BARS_SIZE_PX)
    colors = plt.get_cmap("tab10").colors
    labels = []
    for x, cell in enumerate(cells):
        bottom, missing = 0.0, []
        for k, phase in enumerate(PHASES):
            value = cell["summaries"][f"phases_s.{phase}"]["median"]
            if value is None:
                missing.append(phase)
                continue
            ax.bar(x, value, bottom=bottom, color=colors[k % len(colors)], label=phase if x == 0 else None)
            bottom += value
        step = cell["summaries"]["step_time_s"]["median"]
        if step is not None:
            ax.plot(
                [x - 0.4, x + 0.4], [step, step], color="black", linewidth=2, label="step time" if x == 0 else None
            )
        labels.append(cell["id"] + ("\nn/a: " + ", ".join(missing) if missing else ""))
    ax.set_xticks(range(len(cells)), labels, fontsize=8)
    ax.set_ylabel("median seconds per step (steady state)")
    ax.set_title("Phases per step")
    handles, names = ax.get_legend_handles_labels()
    by_name = dict(zip(names, handles, strict=True))
    ax.legend(by_name.values(), by_name.keys(), fontsize=8, loc="upper right")
    fig.subplots_adjust(bottom=0.2)
    return _save(fig, plt, path)


def step_times_size_px(num_cells: int) -> tuple[int, int]:
    rows = max(1, math.ceil(num_cells / STEP_TIMES_COLUMNS))
    return STEP_TIMES_PANEL_PX[0] * STEP_TIMES_COLUMNS, STEP_TIMES_PANEL_PX[1] * rows


def plot_step_times(doc: dict[str, Any], path: Path) -> Path | None:
    cells = doc["cells"]
    if not cells:
        return None
    plt = _pyplot()
    rows = max(1, math.ceil(len(cells) / STEP_TIMES_COLUMNS))
    fig, axes = _figure(plt, step_times_size_px(len(cells)), nrows=rows, ncols=STEP_TIMES_COLUMNS, squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index >= len(cells):
            ax.set_visible(False)
            continue
        cell = cells[index]
        last = 0
        for series in cell["step_time_series"]:
            ys = [math.nan if y is None else y for y in series["step_time_s"]]
            ax.plot(series["steps"], ys, marker=".", linewidth=1, label=f"repeat {series['repeat']}")
            last = max([last, *series["steps"]])
        steady = cell["steady_state"]
        if steady["start_step"] is not None:
            shade = "tab:green" if steady["reached"] else "tab:red"
            ax.axvspan(steady["start_step"], last, color=shade, alpha=0.12, label="steady-state window")
        title = cell["id"] + ("" if steady["reached"] else " (never reached steady state)")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("step time (s)", fontsize=8)
        ax.legend(fontsize=7)
    fig.subplots_adjust(hspace=0.45, wspace=0.25)
    return _save(fig, plt, path)


def ratio_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Comparisons with a ratio, grouped by backend/layout, metrics in report order."""
    from scripts.benchmark.analysis.run_folder import REPORT_METRICS

    order = {name: i for i, name in enumerate(REPORT_METRICS)}
    rows = [c for c in doc["comparisons"] if c["ratio"] is not None]
    return sorted(rows, key=lambda c: (c["backend"], c["layout"], order.get(c["metric"], len(order))))


def ratio_chart_size_px(num_rows: int) -> tuple[int, int]:
    return RATIO_CHART_WIDTH_PX, RATIO_CHART_MARGIN_PX + RATIO_CHART_ROW_PX * num_rows


def plot_ratios(doc: dict[str, Any], path: Path) -> Path | None:
    rows = ratio_rows(doc)
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = _figure(plt, ratio_chart_size_px(len(rows)))
    for y, row in enumerate(rows):
        low = row["ci_low"] if row["ci_low"] is not None else row["ratio"]
        high = row["ci_high"] if row["ci_high"] is not None else row["ratio"]
        color = "tab:red" if row["significant"] else "tab:gray"
        ax.errorbar(
            row["ratio"],
            y,
            xerr=[[max(0.0, row["ratio"] - low)], [max(0.0, high - row["ratio"])]],
            fmt="o",
            color=color,
            capsize=3,
        )
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_yticks(range(len(rows)), [f"{r['backend']}/{r['layout']}  {r['metric']}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("Miles / VERL (red: CI excludes 1)")
    ax.set_title("Miles / VERL ratio with confidence interval")
    top = RATIO_CHART_MARGIN_PX / 2 / ratio_chart_size_px(len(rows))[1]
    fig.subplots_adjust(left=0.35, right=0.97, top=1 - top, bottom=top)
    return _save(fig, plt, path)
