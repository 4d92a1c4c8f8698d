"""One markdown table renderer for every table of the harness (report, parity, check, change points, FLOPs,
simulation), so escaping and alignment are the same everywhere."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str] | None = None) -> str:
    """A GitHub markdown table; cells are escaped (`|`, newlines); `align` per column: "left" or "right"."""
    rule = ["---:" if a == "right" else "---" for a in (align or ["left"] * len(header))]
    lines = ["| " + " | ".join(md_cell(h) for h in header) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(md_cell(str(c)) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
