"""The report's plots are readable: on an 8-cell run (four Miles/VERL pairs), no two texts overlap, every text is
inside the picture, legends sit outside the data, and colours say what the verdicts say."""

from __future__ import annotations

import itertools

import pytest
from matplotlib.container import ErrorbarContainer

from scripts.benchmark.analysis.document import analyse_run_folder
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.analysis.verdict import Practical
from scripts.benchmark.report.palette import VERDICT_COLORS
from scripts.benchmark.report.plots import phase_bars_figure, ratios_figure, step_times_figure
from tests.benchmark.synthetic_runs import gap_pair, write_run_folder

PAIRS = [
    ("fsdp", "colocate", {"train": 10.0}),
    ("fsdp", "disaggregated", {}),
    ("megatron", "colocate", {"train": -6.0}),
]
PAIRS += [("megatron", "disaggregated", {"generate": 0.2})]


@pytest.fixture(scope="module")
def matrix_doc(tmp_path_factory):
    cells = []
    for k, (backend, layout, extra) in enumerate(PAIRS):
        cells += gap_pair(extra, backend=backend, layout=layout, num_steps=150, cv=0.01, seed=10 * k)
    return analyse_run_folder(write_run_folder(tmp_path_factory.mktemp("matrix"), cells), AnalysisSettings(reps=1000))


def _tick_labels(ax) -> tuple[list, set[int]]:
    """The tick labels matplotlib draws (ticks inside the view, label shown), and the ids of all tick labels."""
    drawn, every = [], set()
    for axis in (ax.xaxis, ax.yaxis):
        low, high = sorted(axis.get_view_interval())
        for tick in axis.get_major_ticks() + axis.get_minor_ticks():
            every |= {id(tick.label1), id(tick.label2)}
            if low - 1e-9 <= tick.get_loc() <= high + 1e-9:
                drawn += [label for label in (tick.label1, tick.label2) if label.get_visible()]
    return drawn, every


def visible_texts(fig) -> list[tuple[str, object]]:
    """(text, window extent) of every drawn, non-empty text of the figure, tick labels and legends included."""
    from matplotlib.text import Text

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    drawn, tick_ids = [], set()
    for ax in fig.axes:
        labels, ids = _tick_labels(ax)
        drawn += labels
        tick_ids |= ids
    drawn += [t for t in fig.findobj(Text) if id(t) not in tick_ids and t.get_visible()]
    return [(t.get_text(), t.get_window_extent(renderer)) for t in drawn if t.get_text().strip()]


def assert_readable(fig) -> None:
    texts = visible_texts(fig)
    for (a, box_a), (b, box_b) in itertools.combinations(texts, 2):
        assert not box_a.overlaps(box_b), f"{a!r} overlaps {b!r}"
    width, height = fig.canvas.get_width_height()
    for text, box in texts:
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= width and box.y1 <= height, f"{text!r} is cut off: {box}"


def assert_legends_outside_the_data(fig) -> None:
    renderer = fig.canvas.get_renderer()
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends
    for legend in legends:
        for ax in fig.axes:
            assert not legend.get_window_extent(renderer).overlaps(ax.get_window_extent(renderer))


@pytest.mark.parametrize("build", [phase_bars_figure, ratios_figure, step_times_figure])
def test_no_text_overlaps_or_is_cut_off(matrix_doc, build):
    fig = build(matrix_doc)
    try:
        assert_readable(fig)
        assert_legends_outside_the_data(fig)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_overlap_check_catches_overprinted_labels(matrix_doc):
    """The check itself fails on the old layout's fault: eight long labels on one x axis of 1000 px."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3), dpi=100)
    ax.set_xticks(range(8), [f"{c['id']}\nn/a: ref_logprob" for c in matrix_doc["cells"]])
    with pytest.raises(AssertionError, match="overlaps"):
        assert_readable(fig)
    plt.close(fig)


def test_phase_bars_put_each_pair_side_by_side(matrix_doc):
    fig = phase_bars_figure(matrix_doc)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels[:2] == ["fsdp / colocate  Miles", "fsdp / colocate  VERL"] and len(labels) == 8
    notes = [t.get_text() for t in fig.texts]
    assert notes == ["Not reported, left out of the bar: VERL: ref_logprob"]  # once, not under every label


def test_ratio_forest_colours_follow_the_practical_verdict(matrix_doc):
    fig = ratios_figure(matrix_doc)
    ax = fig.axes[0]
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    colours = {}
    for container in [c for c in ax.containers if isinstance(c, ErrorbarContainer)]:
        line = container.lines[0]
        y = round(float(line.get_ydata()[0]))
        colours[y] = line.get_color()
    fsdp_step = ticks.index("step_time_s")  # the first pair: Miles 10% slower
    megatron_step = ticks.index("step_time_s", ticks.index("megatron / colocate"))  # Miles 6% faster
    equal_step = ticks.index("step_time_s", ticks.index("fsdp / disaggregated"))
    assert colours[fsdp_step] == VERDICT_COLORS[Practical.WORSE]
    assert colours[megatron_step] == VERDICT_COLORS[Practical.BETTER]
    assert colours[equal_step] == VERDICT_COLORS[Practical.NO_PRACTICAL_DIFFERENCE]
    bands = [
        p for p in ax.patches if p.get_label() == "practical threshold band" or p.get_facecolor()[:3] != (0, 0, 0)
    ]
    assert bands and all(abs(p.get_width() - 0.04) < 1e-9 for p in bands)  # +-2% around 1


def test_step_times_overlay_a_pair_in_one_panel(matrix_doc):
    fig = step_times_figure(matrix_doc)
    assert len(fig.axes) == 4
    for ax in fig.axes:
        names = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
        assert names[0] == "Miles" and "VERL" in names
        assert any("steady from step" in n for n in names)
        low, high = ax.get_ylim()
        assert 80 < low and high < 130  # scaled to the 100-110 s steady steps, not to the 3x warm-up
