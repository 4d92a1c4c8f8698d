"""The report's headline: one card per Miles/VERL pair (backend x layout) that answers "who is faster, does it
matter, and where is the gap" before any table.

- The step-time verdict reads the Miles/VERL ratio's interval against the practical threshold (analysis/verdict.py):
  "Miles 10% slower (CI +9.4% to +11%), mostly in train", "no practical difference", or "inconclusive".
- "mostly in <phase>": the component (a phase, or the unattributed rest) carrying the largest share of the gap in
  the gap's direction, from the additive attribution of means.
- The bar: each side's mean step time split into its phases, Miles and VERL on the same scale; the totals are
  given in seconds per step and per 1k trained tokens.
- `headline_markdown(doc)`: the same cards, one line per pair, for the GitHub step summary and the PR comment.

Caveats:
- Each card carries the learning-signal guard's word on its pair (report/learning.py): learning differs,
  equivalence not shown, or not compared; nothing when every judged signal is equivalent.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from miles.utils.bench_metrics import STEP_PHASES as PHASES  # the phases that partition the step
from scripts.benchmark.analysis.step_columns import float_values
from scripts.benchmark.analysis.verdict import (
    DEFAULT_PRACTICAL_THRESHOLD,
    Practical,
    percent,
    practical_verdict,
    signed_percent,
)
from scripts.benchmark.report.learning import learning_warning
from scripts.benchmark.report.palette import PHASE_COLORS, UNATTRIBUTED_COLOR, VERDICT_COLORS
from scripts.benchmark.report.render import BarSegment, Bullets, Card, CardBar, Cards, Paragraph, render_markdown


def pairs_of(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted({(c["backend"], c["layout"]) for c in doc["comparisons"]})


def threshold_of(doc: dict[str, Any], metric: str) -> float:
    return (doc.get("practical_thresholds") or {}).get(metric, DEFAULT_PRACTICAL_THRESHOLD)


def threshold_text(threshold: float) -> str:
    return f"{threshold * 100:g}%"


def _rows(doc: dict[str, Any], key: str, backend: str, layout: str) -> list[dict[str, Any]]:
    return [r for r in doc[key] if (r["backend"], r["layout"]) == (backend, layout)]


def step_verdict(doc: dict[str, Any], backend: str, layout: str) -> tuple[Practical, dict[str, Any] | None]:
    step = next((c for c in _rows(doc, "comparisons", backend, layout) if c["metric"] == "step_time_s"), None)
    if step is None or step["ratio"] is None or step["ci_low"] is None:
        return Practical.NOT_COMPARED, step
    threshold = threshold_of(doc, "step_time_s")
    return practical_verdict(step["ci_low"] - 1, step["ci_high"] - 1, threshold=threshold, direction="lower"), step


def _ci_text(step: dict[str, Any]) -> str:
    return f"CI {signed_percent(step['ci_low'] - 1)} to {signed_percent(step['ci_high'] - 1)}"


def main_component(doc: dict[str, Any], backend: str, layout: str) -> str | None:
    """'train (+5.9 s of +6.0 s per step)': the component with the largest part of the gap, in its direction."""
    rows = _rows(doc, "attribution", backend, layout)
    step = next((a for a in rows if a["component"] == "step_time_s"), None)
    if step is None or step["gap_s"] is None or step["gap_s"] == 0:
        return None
    sign = math.copysign(1.0, step["gap_s"])
    parts = [a for a in rows if a["component"] != "step_time_s" and a["gap_s"] is not None and a["gap_s"] * sign > 0]
    if not parts:
        return None
    top = max(parts, key=lambda a: a["gap_s"] * sign)
    name = top["component"].removeprefix("phases_s.")
    where = "unattributed time" if name == "unattributed" else name
    return f"{where} ({top['gap_s']:+.2f} s of {step['gap_s']:+.2f} s per step)"


def pair_sentence(doc: dict[str, Any], backend: str, layout: str) -> tuple[Practical, str, str]:
    """The verdict on one pair's step time, in the report's words: (verdict, the verdict itself, its evidence)."""
    verdict, step = step_verdict(doc, backend, layout)
    threshold = threshold_text(threshold_of(doc, "step_time_s"))
    if verdict is Practical.NOT_COMPARED:
        why = step["method"].removeprefix("not compared: ") if step else "no step time"
        if step is not None and step["ratio"] is not None:
            why = "too few steps for an interval"
        return verdict, "step time not compared", f"({why})"
    change = step["ratio"] - 1
    if verdict in (Practical.WORSE, Practical.BETTER):
        word = "slower" if verdict is Practical.WORSE else "faster"
        where = main_component(doc, backend, layout)
        return (
            verdict,
            f"Miles {percent(change)} {word}",
            f"({_ci_text(step)})" + (f", mostly in {where}" if where else ""),
        )
    measured = f"(Miles/VERL step time {signed_percent(change)}, {_ci_text(step)}"
    if verdict is Practical.NO_PRACTICAL_DIFFERENCE:
        return verdict, "no practical difference", f"{measured}, inside ±{threshold})"
    settle = f"{measured}, crosses the ±{threshold} threshold: more steps or repeats would settle it)"
    return verdict, "inconclusive", settle


def tokens_per_step(cell: dict[str, Any]) -> float | None:
    """Mean trained tokens per steady step, from the per-step train seconds and train seconds per 1k tokens."""
    samples = cell.get("samples") or {}
    train, per_1k = samples.get("phases_s.train") or [], samples.get("train_s_per_1k_tokens") or []
    ratios = []
    for ts, cs in zip(train, per_1k, strict=False):
        n = min(len(ts), len(cs))
        t, c = float_values(ts[:n]), float_values(cs[:n])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = 1000 * t / c
        ratios.append(ratio[(c > 0) & np.isfinite(ratio)])
    tokens = np.concatenate(ratios) if ratios else np.zeros(0)
    return float(tokens.mean()) if len(tokens) else None


def _bar(label: str, phases: dict[str, float], step_s: float | None, cell: dict[str, Any] | None) -> CardBar:
    segments = [BarSegment(p, phases[p], PHASE_COLORS[p]) for p in PHASES if phases.get(p)]
    rest = (step_s or 0.0) - sum(phases.values())
    if rest > 0.005 * (step_s or 0):
        segments.append(BarSegment("unattributed", rest, UNATTRIBUTED_COLOR))
    tokens = tokens_per_step(cell) if cell else None
    per_1k = step_s / tokens * 1000 if step_s is not None and tokens else None
    return CardBar(label=label, segments=segments, total_s=step_s, per_1k_tokens_s=per_1k)


def pair_card(doc: dict[str, Any], backend: str, layout: str) -> Card:
    verdict, short, evidence = pair_sentence(doc, backend, layout)
    rows = _rows(doc, "attribution", backend, layout)
    cells = {c["framework"]: c for c in doc["cells"] if (c["backend"], c["layout"]) == (backend, layout)}
    step = next((a for a in rows if a["component"] == "step_time_s"), None)
    bars = []
    for side, label in (("miles", "Miles"), ("verl", "VERL")):
        phases = {
            a["component"].removeprefix("phases_s."): a[f"{side}_s"]
            for a in rows
            if a["component"].startswith("phases_s.") and a[f"{side}_s"] is not None
        }
        bars.append(_bar(label, phases, step[f"{side}_s"] if step else None, cells.get(side)))
    learning = learning_warning(doc, backend, layout)
    warnings = [learning] if learning else []
    return Card(
        title=f"{backend} / {layout}",
        verdict=short,
        text=evidence,
        color=VERDICT_COLORS[verdict],
        bars=bars if step else [],
        warnings=warnings,
    )


def _notes(doc: dict[str, Any]) -> list[str]:
    notes = [f"**{r['backend']} / {r['layout']}**: comparison refused: {r['reason']}." for r in doc["refused"]]
    unsteady = [c for c in doc["cells"] if not c["steady_state"]["reached"]]
    if unsteady:
        needs = [
            f"`{c['id']}`"
            + (f" (needs {c['steady_state']['more_steps']} more steps)" if c["steady_state"].get("more_steps") else "")
            for c in unsteady
        ]
        notes.append(
            "No steady state: " + ", ".join(needs) + " (their numbers include warm-up or drift; see Steady state)."
        )
    if doc["incomplete"]:
        notes.append(f"{len(doc['incomplete'])} cell repeat(s) did not complete; see Incomplete cells.")
    if not pairs_of(doc) and not doc["refused"]:
        notes.append("No Miles/VERL pair to compare in this run (one framework only).")
    return notes


def headline_blocks(doc: dict[str, Any]) -> list[Any]:
    """The cards, then what keeps a pair or a cell out of them."""
    cards = [pair_card(doc, b, lay) for b, lay in pairs_of(doc)]
    threshold = threshold_text(threshold_of(doc, "step_time_s"))
    blocks: list[Any] = []
    if cards:
        blocks.append(
            Cards(cards, legend=[(p, PHASE_COLORS[p]) for p in PHASES] + [("unattributed", UNATTRIBUTED_COLOR)])
        )
        blocks.append(
            Paragraph(
                f"Practical threshold {threshold} on step time: a verdict of faster or slower needs the whole "
                f"interval beyond ±{threshold}; inside it, no practical difference; otherwise inconclusive. "
                "Bars: mean seconds per step by phase (Miles and VERL on one scale)."
            )
        )
    notes = _notes(doc)
    if notes:
        blocks.append(Bullets(notes))
    return blocks


def headline_markdown(doc: dict[str, Any]) -> str:
    """Compact: one line per pair, then the notes; for the step summary, the PR comment and the terminal."""
    lines = []
    for backend, layout in pairs_of(doc):
        card = pair_card(doc, backend, layout)
        steps = [f"{b.label} {b.total_s:.2f} s" for b in card.bars if b.total_s is not None]
        tail = f" Step time {' vs '.join(steps)}." if len(steps) == 2 else ""
        warn = "".join(f" {w}" for w in card.warnings)
        lines.append(f"**{card.title}**: {card.verdict} {card.text}.{tail}{warn}")
    lines += _notes(doc)
    return render_markdown([Paragraph("**Miles vs VERL at a glance**"), Bullets(lines)])
