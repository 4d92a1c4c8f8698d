"""The report's charts are readable: on an 8-cell run (four Miles/VERL pairs), laid out by a real browser (headless
Chromium), no two texts overlap, every text is inside the picture, legends sit outside the data, and colours say
what the verdicts say."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from scripts.benchmark.analysis.document import analyse_run_folder
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.analysis.verdict import Practical
from scripts.benchmark.report.learning import plot_learning
from scripts.benchmark.report.palette import VERDICT_COLORS
from scripts.benchmark.report.plots import phase_bars_svg, ratios_svg, step_times_svg
from scripts.benchmark.report.render import BarSegment, Card, CardBar, Cards, render_html
from scripts.benchmark.report.svg import Canvas, nice_ticks, thin_to_columns, tick_label
from tests.benchmark.headless_chromium import chromium_binary, dump_dom
from tests.benchmark.synthetic_runs import gap_pair, write_run_folder
from tests.benchmark.test_learning import add_learning

PAIRS = [
    ("fsdp", "colocate", {"train": 10.0}),
    ("fsdp", "disaggregated", {}),
    ("megatron", "colocate", {"train": -6.0}),
]
PAIRS += [("megatron", "disaggregated", {"generate": 0.2})]
SVG = "{http://www.w3.org/2000/svg}"

MEASURE = """<script>
window.addEventListener("load", () => {
  const boxes = (sel) => [...document.querySelectorAll(sel)].map((e) => {
    const r = e.getBoundingClientRect();
    return {text: e.textContent, cls: e.getAttribute("class") || "", x0: r.left, y0: r.top, x1: r.right, y1: r.bottom};
  });
  const svg = document.querySelector("svg").getBoundingClientRect();
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify({
    texts: boxes("svg text"), frames: boxes("svg rect.frame"),
    svg: {x0: svg.left, y0: svg.top, x1: svg.right, y1: svg.bottom},
  });
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def matrix_doc(tmp_path_factory):
    cells = []
    for k, (backend, layout, extra) in enumerate(PAIRS):
        cells += gap_pair(extra, backend=backend, layout=layout, num_steps=150, cv=0.01, seed=10 * k)
    run_dir = write_run_folder(tmp_path_factory.mktemp("matrix"), cells)
    add_learning(run_dir, {})
    return analyse_run_folder(run_dir, AnalysisSettings(reps=1000))


def measured_layout(svg_text: str, tmp_path: Path) -> dict:
    """Every text's box and every plot frame's box, as Chromium lays the chart out."""
    if chromium_binary() is None:
        pytest.fail("chromium is not installed: apt-get install chromium (.ci/run installs it)")
    page = tmp_path / "chart.html"
    page.write_text(f'<!DOCTYPE html><html><body style="margin:0">{svg_text}{MEASURE}</body></html>')
    width, height = (int(float(v)) for v in re.search(r'width="(\d+)" height="(\d+)"', svg_text).groups())
    dom = dump_dom(page, width=width + 20, height=height + 20)
    return json.loads(dom.split('<pre id="measured">', 1)[1].split("</pre>", 1)[0].replace("&quot;", '"'))


def overlaps(a: dict, b: dict, slack: float = 0.5) -> bool:
    return (
        a["x0"] < b["x1"] - slack
        and b["x0"] < a["x1"] - slack
        and a["y0"] < b["y1"] - slack
        and b["y0"] < a["y1"] - slack
    )


def assert_readable(layout: dict) -> None:
    texts = [t for t in layout["texts"] if t["text"].strip()]
    for i, a in enumerate(texts):
        for b in texts[i + 1 :]:
            assert not overlaps(a, b), f"{a['text']!r} overlaps {b['text']!r}"
    box = layout["svg"]
    for t in texts:
        inside = t["x0"] >= box["x0"] and t["y0"] >= box["y0"] and t["x1"] <= box["x1"] and t["y1"] <= box["y1"]
        assert inside, f"{t['text']!r} is cut off: {t}"


def assert_legends_outside_the_data(layout: dict) -> None:
    legends = [t for t in layout["texts"] if "legend" in t["cls"].split()]
    assert legends and layout["frames"]
    for legend in legends:
        for frame in layout["frames"]:
            assert not overlaps(legend, frame), f"legend {legend['text']!r} lies on the data"


def learning_svg(doc: dict, tmp_path: Path) -> str:
    path = plot_learning(doc, tmp_path / "learning.svg")
    return path.read_text()


@pytest.mark.parametrize(
    "build",
    [
        lambda doc, _: phase_bars_svg(doc).to_svg(),
        lambda doc, _: ratios_svg(doc).to_svg(),
        lambda doc, _: step_times_svg(doc).to_svg(),
        learning_svg,
    ],
    ids=["phase_bars", "ratios", "step_times", "learning"],
)
def test_no_text_overlaps_or_is_cut_off(matrix_doc, build, tmp_path):
    layout = measured_layout(build(matrix_doc, tmp_path), tmp_path)
    assert_readable(layout)
    assert_legends_outside_the_data(layout)


def test_overlap_check_catches_overprinted_labels(tmp_path):
    """The check itself fails on a chart whose labels are printed on top of each other."""
    svg = Canvas(300, 100, "overprinted")
    for k in range(3):
        svg.text(10 + 4 * k, 50, f"megatron / disaggregated {k}", size=13)
    with pytest.raises(AssertionError, match="overlaps"):
        assert_readable(measured_layout(svg.to_svg(), tmp_path))


def _texts(svg: Canvas, cls: str) -> list[ET.Element]:
    root = ET.fromstring(svg.to_svg())
    return [e for e in root.iter(f"{SVG}text") if cls in (e.get("class") or "").split()]


def test_phase_bars_put_each_pair_side_by_side(matrix_doc):
    svg = phase_bars_svg(matrix_doc)
    labels = [e.text for e in _texts(svg, "ylabel")]
    assert labels[:2] == ["fsdp / colocate  Miles", "fsdp / colocate  VERL"] and len(labels) == 8
    notes = [e.text for e in _texts(svg, "note")]
    assert notes == ["Not reported, left out of the bar: VERL: ref_logprob"]  # once, not under every label


def test_ratio_forest_colours_follow_the_practical_verdict(matrix_doc):
    root = ET.fromstring(ratios_svg(matrix_doc).to_svg())
    labels = [(e.text, float(e.get("y"))) for e in root.iter(f"{SVG}text") if e.get("class") == "ylabel"]
    colours = {float(c.get("cy")): c.get("fill") for c in root.iter(f"{SVG}circle") if c.get("class") == "ratio"}
    names = [name for name, _ in labels]
    fsdp_step = labels[names.index("step_time_s")][1]  # the first pair: Miles 10% slower
    megatron_step = labels[names.index("step_time_s", names.index("megatron / colocate"))][1]  # Miles 6% faster
    equal_step = labels[names.index("step_time_s", names.index("fsdp / disaggregated"))][1]
    assert colours[fsdp_step] == VERDICT_COLORS[Practical.WORSE]
    assert colours[megatron_step] == VERDICT_COLORS[Practical.BETTER]
    assert colours[equal_step] == VERDICT_COLORS[Practical.NO_PRACTICAL_DIFFERENCE]
    frame = next(r for r in root.iter(f"{SVG}rect") if r.get("class") == "frame")
    ticks = {e.text: float(e.get("x")) for e in root.iter(f"{SVG}text") if e.get("y") and not e.get("class")}
    scale = _pixels_per_unit(ticks)
    bands = [float(r.get("width")) for r in root.iter(f"{SVG}rect") if r.get("class") == "band"]
    assert bands and all(abs(w / scale - 0.04) < 1e-3 for w in bands), (bands, scale, frame.attrib)  # +-2% around 1


def _pixels_per_unit(ticks: dict[str, float]) -> float:
    """Pixels per data unit along x, from two numeric tick labels of the x axis."""
    numeric = sorted((float(t), x) for t, x in ticks.items() if re.fullmatch(r"-?\d+(\.\d+)?", t or ""))
    (v0, x0), (v1, x1) = numeric[0], numeric[-1]
    return (x1 - x0) / (v1 - v0)


def test_step_times_overlay_a_pair_in_one_panel(matrix_doc):
    svg = step_times_svg(matrix_doc)
    root = ET.fromstring(svg.to_svg())
    assert sum(1 for r in root.iter(f"{SVG}rect") if r.get("class") == "frame") == 4
    legend = [e.text for e in _texts(svg, "legend")]
    assert legend.count("Miles") == 4 and legend.count("VERL") == 4
    assert sum("steady from step" in t for t in legend) == 8
    ticks = [float(e.text) for e in root.iter(f"{SVG}text") if e.get("text-anchor") == "end" and not e.get("class")]
    assert ticks and 80 < min(ticks) and max(ticks) < 130  # scaled to the 100-110 s steady steps, not the warm-up


@pytest.mark.parametrize(
    "low, high, labels",
    [
        (0.0, 112.0, ["0", "20", "40", "60", "80", "100"]),
        (0.93, 1.07, ["0.94", "0.96", "0.98", "1.00", "1.02", "1.04", "1.06"]),
        (-0.021, 0.024, ["-0.02", "-0.01", "0.00", "0.01", "0.02"]),
        (2.2, 14.9, ["4", "6", "8", "10", "12", "14"]),
        (0.0, 14.0, ["0.0", "2.5", "5.0", "7.5", "10.0", "12.5"]),
        (0.0, 0.14, ["0.000", "0.025", "0.050", "0.075", "0.100", "0.125"]),
        (0.0, 140.0, ["0", "25", "50", "75", "100", "125"]),
    ],
)
def test_ticks_are_round_numbers_inside_the_range(low, high, labels):
    ticks = nice_ticks(low, high, count=6)
    assert [tick_label(t, ticks) for t in ticks] == labels
    assert low <= ticks[0] and ticks[-1] <= high


def test_labels_are_escaped(tmp_path):
    svg = Canvas(200, 50, 'a <title> & "quote"')
    svg.text(10, 20, "<b>&amp;</b>", size=12)
    root = ET.fromstring(svg.to_svg())  # well-formed XML whatever the label holds
    assert next(root.iter(f"{SVG}text")).text == "<b>&amp;</b>"


def test_a_long_trace_keeps_its_spikes_and_gaps_when_thinned():
    """10,000 steps on 500 pixel columns: at most two points per column, the one slow step and the gap both kept."""
    x = np.arange(10_000.0)
    y = np.sin(x / 300)
    y[5_000] = 9.0
    y[3_000:3_100] = np.nan
    thin = thin_to_columns(np.column_stack([x, y]), 500)
    finite = thin[np.isfinite(thin[:, 1])]
    assert len(finite) <= 2 * 500 and np.all(np.diff(thin[:, 0]) > 0)  # in step order
    assert finite[:, 1].max() == 9.0 and finite[:, 1].min() == pytest.approx(-1.0, abs=1e-3)
    assert np.isnan(thin[:, 1]).sum() == 100


def test_a_sub_second_bar_fills_its_track():
    """The phase segments' flex-grow factors are shares of the bar: below 1 in total, they would fill that fraction."""
    segments = [BarSegment("generate", 0.12, "#111"), BarSegment("train", 0.06, "#222")]
    card = Card("fsdp / colocate", "no practical difference", "", "#000", [CardBar("Miles", segments, 0.18, None)])
    page = render_html([Cards([card])], Path("."))
    grows = [float(g) for g in re.findall(r'class="seg" style="flex:([0-9.e+-]+) 0 0', page)]
    assert len(grows) == 2 and sum(grows) >= 1 and grows[0] == pytest.approx(2 * grows[1], rel=1e-4)


def test_seconds_per_1k_tokens_keep_a_20_percent_gap_visible():
    bars = [CardBar("Miles", [BarSegment("train", 0.2, "#111")], 0.2, 0.0058), CardBar("VERL", [], 0.2, 0.0048)]
    page = render_html([Cards([Card("fsdp / colocate", "x", "", "#000", bars)])], Path("."))
    assert "0.0058 s/1k tokens" in page and "0.0048 s/1k tokens" in page
