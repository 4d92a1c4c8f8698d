"""report.html in a real browser (headless Chromium) at 1280 px: the headline cards come before the first table,
nothing overflows horizontally, the embedded plots load, the cards lead with their verdict (no bold red paragraph
beside it); at phone widths no card text is cut; and a screenshot of it is kept in the docs.

Regenerate the docs screenshot: MILES_BENCH_UPDATE_SCREENSHOT=1 python -m pytest tests/benchmark/test_report_browser.py
"""

from __future__ import annotations

import html
import json
import os
import re
import struct
from pathlib import Path

import pytest

from scripts.benchmark.analysis.document import analyse_run_folder
from scripts.benchmark.analysis.settings import AnalysisSettings
from scripts.benchmark.report.write import write_report
from tests.benchmark.headless_chromium import chromium_binary, dump_dom, screenshot
from tests.benchmark.synthetic_runs import gap_pair, write_run_folder

WIDTH = 1280
PHONE_FRAME_ABOVE = 500
"""Headless Chromium lays a page out at least this wide, whatever --window-size says."""
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "benchmark" / "report-screenshot.png"
SCREENSHOT_HEIGHT = 1100

MEASURE = """<script>
window.addEventListener("load", () => {
  const root = document.documentElement;
  const cards = document.querySelector(".cards");
  const table = document.querySelector("table");
  const wide = [...document.body.querySelectorAll("*")]
    .filter((e) => e.getBoundingClientRect().right > root.clientWidth + 1 && !e.closest(".scroll"))
    .map((e) => e.tagName + "." + e.className);
  const result = {
    scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, tooWide: wide.slice(0, 5),
    cards: document.querySelectorAll(".card").length,
    cardsTop: cards ? cards.getBoundingClientRect().top : null,
    firstTableTop: table ? table.getBoundingClientRect().top : null,
    cardsBeforeTable: !!(cards && table && (cards.compareDocumentPosition(table) & Node.DOCUMENT_POSITION_FOLLOWING)),
    images: [...document.images].map((i) => i.complete && i.naturalWidth > 0),
    verdicts: [...document.querySelectorAll(".card .verdict")].map((v) => v.textContent),
    clipped: [...document.querySelectorAll(".card .who, .card .tot, .card .verdict, .card .card-title, .card .seg")]
      .filter((e) => e.textContent && getComputedStyle(e).fontSize !== "0px")
      .filter((e) => e.scrollWidth > e.clientWidth + 1 || e.getBoundingClientRect().right > root.clientWidth + 1)
      .map((e) => e.className + ": " + e.textContent),
    boldRedBesideVerdict: [...document.querySelectorAll(".card p:not(.verdict)")]
      .filter((e) => getComputedStyle(e).color === "rgb(207, 34, 46)" && Number(getComputedStyle(e).fontWeight) >= 600)
      .map((e) => e.textContent),
  };
  const out = document.createElement("pre");
  out.id = "measured";
  out.textContent = JSON.stringify(result);
  document.body.appendChild(out);
});
</script>"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    if chromium_binary() is None:
        pytest.fail("chromium is not installed: apt-get install chromium (.ci/run installs it)")
    cells = gap_pair({"train": 8.0, "generate": 2.0}, num_steps=300, cv=0.01, seed=1)
    cells += gap_pair({"generate": 0.3}, layout="disaggregated", num_steps=300, cv=0.01, seed=5)
    cells += gap_pair({"train": -5.0}, backend="megatron", num_steps=300, cv=0.01, seed=9)
    cells += gap_pair({"train": 1.5}, backend="megatron", layout="disaggregated", num_steps=60, cv=0.04, seed=13)
    run_dir = write_run_folder(tmp_path_factory.mktemp("browser"), cells)
    doc = analyse_run_folder(run_dir, AnalysisSettings(reps=1000))
    doc.run_dir = "bench-out/qwen3-1.7b-base"  # as the nightly names it; no path of the test machine in the docs
    write_report(doc, run_dir)
    return run_dir


def measure(report: Path, tmp_path: Path, width: int = WIDTH) -> dict:
    """The measuring script's results on the report at `width` px. Below Chromium's smallest headless window the
    report is measured inside an iframe of that width, whose viewport (its media queries too) is that width."""
    page = tmp_path / "measured.html"
    measured = report.read_text().replace("</body>", MEASURE + "</body>")
    if width < PHONE_FRAME_ABOVE:
        copy = "window.addEventListener('load', () => document.body.appendChild(document.querySelector('iframe')"
        copy += ".contentDocument.getElementById('measured').cloneNode(true)));"
        frame = f'<iframe style="width:{width}px;height:900px;border:0" srcdoc="{html.escape(measured)}"></iframe>'
        measured = f"<!DOCTYPE html><html><body style='margin:0'>{frame}<script>{copy}</script></body></html>"
    page.write_text(measured)
    dom = dump_dom(page, width=max(width, PHONE_FRAME_ABOVE), height=900)
    found = re.search(r'<pre id="measured">(.*?)</pre>', dom, re.S)
    assert found, "the measuring script did not run"
    return json.loads(html.unescape(found[1]))


def test_cards_come_first_and_nothing_overflows_at_1280px(rendered, tmp_path):
    measured = measure(rendered / "report.html", tmp_path)
    assert measured["cards"] == 4
    assert measured["cardsBeforeTable"] and measured["cardsTop"] < measured["firstTableTop"]
    assert measured["scrollWidth"] <= measured["clientWidth"], measured["tooWide"]
    assert not measured["tooWide"]
    assert measured["images"] == [True, True, True]
    assert measured["verdicts"][0].startswith("Miles 10% slower")
    assert measured["verdicts"][1].startswith("no practical difference")


def test_cards_lead_with_their_verdict_no_bold_red_paragraph_beside_it(rendered, tmp_path):
    """One repeat and no learning signals in every cell: what the cards say besides the verdict is a plain note
    (the one-repeat caution once under the cards), never a bold red block competing with it."""
    measured = measure(rendered / "report.html", tmp_path)
    assert measured["cards"] == 4 and measured["boldRedBesideVerdict"] == []
    text = (rendered / "report.html").read_text()
    assert text.count("One repeat: the interval covers this run") == 1


@pytest.mark.parametrize("width", [390, 768, WIDTH])
def test_on_a_phone_no_card_text_is_cut_and_nothing_overflows(rendered, tmp_path, width):
    measured = measure(rendered / "report.html", tmp_path, width=width)
    assert measured["clientWidth"] == width and measured["cards"] == 4
    assert measured["clipped"] == []
    assert measured["scrollWidth"] <= measured["clientWidth"], measured["tooWide"]


def test_overflow_check_catches_a_page_wider_than_the_window(rendered, tmp_path):
    wide = tmp_path / "wide.html"
    wide.write_text(
        (rendered / "report.html").read_text().replace("<body>", '<body><div style="width:1600px">x</div>')
    )
    measured = measure(wide, tmp_path)
    assert measured["scrollWidth"] > measured["clientWidth"] and measured["tooWide"]


def test_screenshot_of_the_top_of_the_page(rendered, tmp_path):
    shot = screenshot(rendered / "report.html", tmp_path / "report.png", width=WIDTH, height=SCREENSHOT_HEIGHT)
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == (WIDTH, SCREENSHOT_HEIGHT)
    assert shot.stat().st_size > 50_000  # a rendered page, not a blank one
    if os.environ.get("MILES_BENCH_UPDATE_SCREENSHOT") == "1":
        DOCS_SCREENSHOT.write_bytes(shot.read_bytes())
    assert DOCS_SCREENSHOT.is_file(), "docs/benchmark/report-screenshot.png is missing: regenerate it (see above)"
