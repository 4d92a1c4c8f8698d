"""The report's text blocks and their two renderings: markdown (GitHub step summary, PR comment) and one
self-contained HTML page. Every table of the harness (report, parity, regression check, change points, FLOPs,
simulation) is rendered by `markdown_table`, so escaping and alignment are the same everywhere."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


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


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str] | None = None) -> str:
    """A GitHub markdown table; cells are escaped (`|`, newlines); `align` per column: "left" or "right"."""
    rule = ["---:" if a == "right" else "---" for a in (align or ["left"] * len(header))]
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(_md_cell(str(c)) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


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
        elif isinstance(block, Details):
            inner = render_markdown(block.blocks)
            out.append(f"<details><summary>{html.escape(block.summary)}</summary>\n\n{inner}\n\n</details>")
    return "\n\n".join(out) + "\n"


_INLINE = [(re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"), (re.compile(r"`(.+?)`"), r"<code>\1</code>")]


def _inline_html(text: str) -> str:
    text = html.escape(text, quote=False)
    for pattern, replacement in _INLINE:
        text = pattern.sub(replacement, text)
    return text


def render_html(blocks: list[Any], base_dir: Path) -> str:
    """One self-contained page: the same blocks, images embedded as base64 PNG."""
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
            rows = "".join("<tr>" + "".join(f"<td>{_inline_html(c)}</td>" for c in r) + "</tr>" for r in block.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif isinstance(block, Code):
            body.append(f"<pre>{html.escape(block.text)}</pre>")
        elif isinstance(block, Image):
            data = base64.b64encode((base_dir / block.path).read_bytes()).decode("ascii")
            body.append(f'<figure><img alt="{html.escape(block.alt)}" src="data:image/png;base64,{data}"></figure>')
        elif isinstance(block, Details):
            inner = render_html(block.blocks, base_dir)
            inner = inner[inner.index("<body>") + 6 : inner.index("</body>")]
            body.append(f"<details><summary>{html.escape(block.summary)}</summary>{inner}</details>")
    style = (
        "body{font-family:sans-serif;max-width:1300px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}"
        "th{background:#f4f4f4}pre{background:#f8f8f8;padding:0.5em;overflow:auto}img{max-width:100%}"
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Miles vs VERL throughput report</title>'
        f"<style>{style}</style></head><body>" + "\n".join(body) + "</body></html>\n"
    )
