"""The report's text blocks and their two renderings: markdown (GitHub step summary, PR comment) and one
self-contained HTML page. Every table of the harness (report, parity, regression check, change points, FLOPs,
simulation) is rendered by `common/markdown.markdown_table`, so escaping and alignment are the same everywhere."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.benchmark.common.markdown import markdown_table


@dataclass(frozen=True)
class Heading:
    level: int
    text: str


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: list[str]


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Code:
    text: str


@dataclass(frozen=True)
class Image:
    path: str
    alt: str


@dataclass(frozen=True)
class Details:
    summary: str
    blocks: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class BarSegment:
    name: str
    seconds: float
    color: str


@dataclass(frozen=True)
class CardBar:
    """One side of a pair: its mean step time split into phases."""

    label: str
    segments: list[BarSegment]
    total_s: float | None
    per_1k_tokens_s: float | None


@dataclass(frozen=True)
class Card:
    """One pair's headline: the verdict sentence, its colour, both sides' bars on one scale, warnings."""

    title: str
    verdict: str
    text: str
    color: str
    bars: list[CardBar]
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Cards:
    cards: list[Card]
    legend: list[tuple[str, str]] = field(default_factory=list)


TONES = {"inconclusive": "unsure", "no practical difference": "same"}
_SIDE_VERDICT = re.compile(r"[^:|]+ (better|worse)")
"""Table cells that hold a verdict ('<candidate> better', '... worse', 'inconclusive', 'no practical difference') are
coloured by it in the HTML page."""


def render_markdown(blocks: list[Any]) -> str:
    out = []
    for block in blocks:
        if isinstance(block, Heading):
            out.append("#" * block.level + " " + block.text)
        elif isinstance(block, Paragraph):
            out.append(block.text)
        elif isinstance(block, Bullets):
            out.append("\n".join(f"- {item}" for item in block.items))
        elif isinstance(block, Table):
            out.append(markdown_table(block.header, block.rows))
        elif isinstance(block, Code):
            out.append("```json\n" + block.text + "\n```")
        elif isinstance(block, Image):
            out.append(f"![{block.alt}]({block.path})")
        elif isinstance(block, Cards):
            out.append("\n".join(f"- {_card_markdown(card)}" for card in block.cards))
        elif isinstance(block, Details):
            inner = render_markdown(block.blocks)
            out.append(f"<details><summary>{html.escape(block.summary)}</summary>\n\n{inner}\n\n</details>")
    return "\n\n".join(out) + "\n"


def _card_markdown(card: Card) -> str:
    text = f"**{card.title}**: **{card.verdict}** {card.text}."
    for bar in card.bars:
        if bar.total_s is None:
            continue
        phases = ", ".join(f"{s.name} {s.seconds:.2f}" for s in bar.segments)
        text += f" {bar.label} {bar.total_s:.2f} s/step ({phases})."
    return text + "".join(f" {w}" for w in card.warnings)


def _card_html(card: Card) -> str:
    scale = max([b.total_s or sum(s.seconds for s in b.segments) for b in card.bars] + [1e-9])
    rows = []
    for bar in card.bars:
        total = bar.total_s or sum(s.seconds for s in bar.segments)
        # Shares of the bar as flex-grow: grow factors summing below 1 would leave part of the track empty.
        segments = "".join(
            f'<span class="seg" style="flex:{100 * s.seconds / (total or 1):.6g} 0 0;background:{s.color}" '
            f'title="{html.escape(s.name)}: {s.seconds:.2f} s">'
            f"{html.escape(s.name) if s.seconds / scale >= 0.12 else ''}</span>"
            for s in bar.segments
        )
        # Three significant digits: a sub-second step's few milliseconds per 1k tokens keep their difference.
        per_1k = "" if bar.per_1k_tokens_s is None else f" · {bar.per_1k_tokens_s:.3g} s/1k tokens"
        totals = "n/a" if bar.total_s is None else f"{bar.total_s:.2f} s/step{per_1k}"
        rows.append(
            f'<span class="who">{html.escape(bar.label)}</span><div class="track"><div class="bar" '
            f'style="width:{100 * total / scale:.2f}%">{segments}</div></div><span class="tot">{totals}</span>'
        )
    # a card's notes stay below its verdict in weight: the verdict is what the card says first
    warnings = "".join(f'<p class="note">{_inline_html(w)}</p>' for w in card.warnings)
    bars = f'<div class="bars">{"".join(rows)}</div>' if rows else ""
    return (
        f'<div class="card" style="border-left-color:{card.color}"><div class="card-title">'
        f"{html.escape(card.title)}</div>"
        f'<p class="verdict"><span style="color:{card.color}">{_inline_html(card.verdict)}</span> '
        f'<span class="evidence">{_inline_html(card.text)}</span></p>{bars}{warnings}</div>'
    )


def _cards_html(block: Cards) -> str:
    legend = "".join(
        f'<span class="key"><span class="swatch" style="background:{color}"></span>{html.escape(name)}</span>'
        for name, color in block.legend
    )
    return (
        f'<section class="cards"><div class="legend">{legend}</div>{"".join(map(_card_html, block.cards))}</section>'
    )


def _tone(text: str) -> str | None:
    side = _SIDE_VERDICT.fullmatch(text)
    if side:
        return "good" if side.group(1) == "better" else "bad"
    return next((t for prefix, t in TONES.items() if text.startswith(prefix)), None)


def _td(text: str) -> str:
    tone = _tone(text)
    return f'<td class="{tone}">{_inline_html(text)}</td>' if tone else f"<td>{_inline_html(text)}</td>"


_INLINE = [(re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"), (re.compile(r"`(.+?)`"), r"<code>\1</code>")]


def _inline_html(text: str) -> str:
    text = html.escape(text, quote=False)
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return text


def render_html(blocks: list[Any], base_dir: Path, title: str = "throughput report") -> str:
    """One self-contained page: the same blocks, images embedded as base64 data (SVG charts, PNG otherwise)."""
    body = []
    for block in blocks:
        if isinstance(block, Heading):
            body.append(f"<h{block.level}>{_inline_html(block.text)}</h{block.level}>")
        elif isinstance(block, Paragraph):
            body.append(f"<p>{_inline_html(block.text)}</p>")
        elif isinstance(block, Bullets):
            body.append("<ul>" + "".join(f"<li>{_inline_html(i)}</li>" for i in block.items) + "</ul>")
        elif isinstance(block, Table):
            head = "".join(f"<th>{_inline_html(h)}</th>" for h in block.header)
            rows = "".join("<tr>" + "".join(_td(c) for c in r) + "</tr>" for r in block.rows)
            body.append(
                f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'
            )
        elif isinstance(block, Cards):
            body.append(_cards_html(block))
        elif isinstance(block, Code):
            body.append(f"<pre>{html.escape(block.text)}</pre>")
        elif isinstance(block, Image):
            data = base64.b64encode((base_dir / block.path).read_bytes()).decode("ascii")
            mime = "image/svg+xml" if block.path.endswith(".svg") else "image/png"
            body.append(f'<figure><img alt="{html.escape(block.alt)}" src="data:{mime};base64,{data}"></figure>')
        elif isinstance(block, Details):
            inner = render_html(block.blocks, base_dir, title)
            inner = inner[inner.index("<body>") + 6 : inner.index("</body>")]
            body.append(f"<details><summary>{html.escape(block.summary)}</summary>{inner}</details>")
    return _page("\n".join(body), title)


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1200px;margin:auto;padding:1em;color:#1f2328}"
    ".scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;margin:0.5em 0}"
    "td,th{border:1px solid #d0d7de;padding:2px 6px;font-size:13px}th{background:#f6f8fa}"
    "td.good{color:#1a7f37;font-weight:600}td.bad{color:#cf222e;font-weight:600}td.unsure{color:#9a6700}"
    "td.same{color:#57606a}pre{background:#f6f8fa;padding:0.5em;overflow:auto;max-width:100%}"
    "img{max-width:100%;height:auto}p,li{overflow-wrap:break-word}"
    ".cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(520px,100%),1fr));gap:12px;margin:1em 0}"
    ".legend{grid-column:1/-1;font-size:13px;display:flex;flex-wrap:wrap;gap:4px 14px}"
    ".key{display:inline-flex;align-items:center;gap:4px}.swatch{width:12px;height:12px;display:inline-block}"
    ".card{border:1px solid #d0d7de;border-left:6px solid;border-radius:6px;padding:8px 12px;min-width:0}"
    ".card-title{font-weight:700;font-size:15px}.verdict{font-size:18px;font-weight:700;margin:4px 0 8px}"
    ".evidence{font-size:13px;font-weight:400;color:#57606a}"
    ".bars{display:grid;grid-template-columns:max-content minmax(0,1fr) auto;gap:4px 8px;align-items:center}"
    ".who{font-size:13px;font-weight:600;white-space:nowrap}.track{background:#f6f8fa;height:22px}"
    ".bar{display:flex;height:22px;overflow:hidden}.tot{font-size:12px;white-space:nowrap}"
    ".seg{color:#fff;font-size:11px;line-height:22px;text-align:center;overflow:hidden;white-space:nowrap}"
    ".note{color:#9a6700;font-size:13px;margin:6px 0 0}"
    # a phone: each side's totals go under its bar, so the label and the bar keep their width
    "@media (max-width:600px){.bars{grid-template-columns:max-content minmax(0,1fr)}"
    ".tot{grid-column:2;white-space:normal;margin-bottom:4px}}"
)


def _page(body: str, title: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>" + body + "</body></html>\n"
    )
