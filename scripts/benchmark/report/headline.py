"""The report's headline: one card per candidate/reference pair (backend x layout, e.g. Miles vs VERL) that answers
"who is faster, does it matter, and where is the gap" before any table.

- The step-time verdict is the document's (analysis decides it against the practical threshold): "Miles 10% slower
  (CI +9.4% to +11%), mostly in train", "no practical difference", or "inconclusive". Side names are the sides'
  labels.
- "mostly in <phase>": the component (a phase, or the unattributed rest) carrying the largest share of the gap in
  the gap's direction, from the additive attribution of means; "largest part in <phase>" when that share is half
  of the gap or less. A component larger than the whole gap (others went the other way) is named with what
  offset it: "in rollout +12.42 s, offset by train -0.67 s (+11.75 s per step in all)".
- The bar: each side's mean step time split into its phases, both sides on the same scale; the totals are given in
  seconds per step and per 1k trained tokens.
- `headline_markdown(doc)`: the same cards, one line per pair, for the GitHub step summary and the PR comment.

Caveats:
- Each card carries the learning-signal guard's word on its pair (report/learning.py): learning differs,
  same learning not shown, or not compared; nothing when every judged signal is the same.
"""

from __future__ import annotations

import math
from typing import Any

from scripts.benchmark.contracts.report import (
    AttributionModel,
    CellModel,
    ComparisonModel,
    Practical,
    ReportDocument,
    percent,
    signed_percent,
)
from scripts.benchmark.contracts.settle import MAX_REPEATS_TO_SETTLE, settle_estimate
from scripts.benchmark.report.learning import learning_warning, power_warning
from scripts.benchmark.report.palette import PHASE_COLORS, UNATTRIBUTED_COLOR, VERDICT_COLORS
from scripts.benchmark.report.render import BarSegment, Bullets, Card, CardBar, Cards, Paragraph, render_markdown

from miles.utils.bench_metrics import STEP_PHASES as PHASES  # the phases that partition the step


def labels(doc: ReportDocument) -> tuple[str, str]:
    """(candidate label, reference label) as the report prints them."""
    pair = doc.side_pair()
    return pair.candidate.label, pair.reference.label if pair.reference is not None else "reference"


def threshold_text(threshold: float) -> str:
    return f"{threshold * 100:g}%"


def _attribution(doc: ReportDocument, backend: str, layout: str) -> list[AttributionModel]:
    return [r for r in doc.attribution if (r.backend, r.layout) == (backend, layout)]


def step_comparison(
    doc: ReportDocument, backend: str, layout: str, metric: str = "step_time_s"
) -> ComparisonModel | None:
    return next((c for c in doc.comparisons if (c.backend, c.layout, c.metric) == (backend, layout, metric)), None)


def _ci_text(step: ComparisonModel) -> str:
    return f"CI {signed_percent(step.ci_low - 1)} to {signed_percent(step.ci_high - 1)}"


def _component_name(row: AttributionModel) -> str:
    name = row.component.removeprefix("phases_s.")
    return "unattributed time" if name == "unattributed" else name


def main_component(doc: ReportDocument, backend: str, layout: str) -> str | None:
    """'mostly in train (+5.9 s of +6.0 s per step)': the component with the largest part of the gap, in its
    direction; "mostly" only when it carries more than half of the gap, else "largest part in". A component larger
    than the whole gap is never called a part "of" it: the components against the gap are named as its offset
    ('in rollout +12.42 s, offset by train -0.67 s (+11.75 s per step in all)')."""
    rows = _attribution(doc, backend, layout)
    step = next((a for a in rows if a.component == "step_time_s"), None)
    if step is None or step.gap_s is None or step.gap_s == 0:
        return None
    sign = math.copysign(1.0, step.gap_s)
    parts = [a for a in rows if a.component != "step_time_s" and a.comparable and a.gap_s is not None]
    along = [a for a in parts if a.gap_s * sign > 0]
    if not along:
        return None
    top = max(along, key=lambda a: a.gap_s * sign)
    if top.gap_s * sign < step.gap_s * sign + 0.005:  # not larger than the gap as printed (1/100 s)
        words = "mostly in" if top.gap_s / step.gap_s > 0.5 else "largest part in"
        return f"{words} {_component_name(top)} ({top.gap_s:+.2f} s of {step.gap_s:+.2f} s per step)"
    against = sorted((a for a in parts if a.gap_s * sign <= -0.005), key=lambda a: a.gap_s * sign)
    offset = " and ".join(f"{_component_name(a)} {a.gap_s:+.2f} s" for a in against) or "parts not attributed"
    return f"in {_component_name(top)} {top.gap_s:+.2f} s, offset by {offset} ({step.gap_s:+.2f} s per step in all)"


TRAINING_STEP = "phases_s.train"
"""What a train-only card's verdict is on: the actor update, the training phase both sides run on the recording."""
TRAINING_PHASES = ("old_logprob", "ref_logprob", "train")
"""The phases a train-only card's bars show: the training step, without what each side does besides it in replay."""


def pair_sentence(
    doc: ReportDocument, backend: str, layout: str, metric: str = "step_time_s"
) -> tuple[Practical, str, str]:
    """The verdict on one pair's step time (or another time, `metric`), in the report's words: (verdict, the verdict
    itself, its evidence)."""
    step = step_comparison(doc, backend, layout, metric)
    verdict = Practical.NOT_COMPARED if step is None or step.ratio is None else step.verdict
    threshold = threshold_text(doc.threshold(metric))
    candidate, reference = labels(doc)
    what = "step time" if metric == "step_time_s" else f"`{metric}`"
    if verdict is Practical.NOT_COMPARED:
        why = step.method.removeprefix("not compared: ") if step else f"no {what}"
        if step is not None and step.ratio is not None:
            why = "too few steps for an interval"
        return verdict, f"{what} not compared", f"({why})"
    change = step.ratio - 1
    if verdict in (Practical.WORSE, Practical.BETTER):
        word = "slower" if verdict is Practical.WORSE else "faster"
        where = main_component(doc, backend, layout) if metric == "step_time_s" else None
        return (
            verdict,
            f"{candidate} {percent(change)} {word}" + ("" if metric == "step_time_s" else " in the actor update"),
            f"({_ci_text(step)})" + (f", {where}" if where else ""),
        )
    measured = f"({candidate}/{reference} {what} {signed_percent(change)}, {_ci_text(step)}"
    if verdict is Practical.NO_PRACTICAL_DIFFERENCE:
        return verdict, "no practical difference", f"{measured}, inside ±{threshold})"
    settle = f"{measured}, crosses the ±{threshold} threshold: {settle_words(doc, step)})"
    return verdict, "inconclusive", settle


def settle_words(doc: ReportDocument, step: ComparisonModel) -> str:
    """How many repeats a side would make an inconclusive step-time interval decisive, where that can be said."""
    estimate = settle_estimate(step, {c.id: c.repeats for c in doc.cells})
    if estimate is None:
        return "more steps or repeats would settle it (--repeats 3 or more: intervals over repeats)"
    now, needed = estimate
    if needed is None:
        return (
            f"more than {MAX_REPEATS_TO_SETTLE} repeats a side if the change and the spread of these {now} held: the "
            "change is near the threshold, or one repeat far from the others widens the spread (see each repeat)"
        )
    return f"about {needed} repeats a side would settle it (--repeats {needed}; {now} now)"


def _bar(label: str, phases: dict[str, float], step_s: float | None, cell: CellModel | None) -> CardBar:
    segments = [BarSegment(p, phases[p], PHASE_COLORS[p]) for p in PHASES if phases.get(p)]
    rest = (step_s or 0.0) - sum(phases.values())
    if rest > 0.005 * (step_s or 0):
        segments.append(BarSegment("unattributed", rest, UNATTRIBUTED_COLOR))
    tokens = cell.tokens_per_step if cell else None
    per_1k = step_s / tokens * 1000 if step_s is not None and tokens else None
    return CardBar(label=label, segments=segments, total_s=step_s, per_1k_tokens_s=per_1k)


def _rates(doc: ReportDocument, backend: str, layout: str) -> str:
    """The training rates' ratios of a train-only pair, as one clause: tokens/s and MFU with their intervals."""
    words = []
    for metric, name in (("train_tokens_per_s", "train tokens/s"), ("train_mfu", "MFU")):
        row = step_comparison(doc, backend, layout, metric)
        if row is not None and row.ratio is not None:
            words.append(f"{name} {row.ratio:.3f}x ({_ci_text(row)})")
    return f"; {', '.join(words)}" if words else ""


def _training_card(doc: ReportDocument, backend: str, layout: str) -> Card:
    """A train-only pair: the verdict on the actor update, the bars of the training phases only, the rates beside;
    what each side does besides training in replay (parity row rollout_replay) is in none of them."""
    verdict, short, evidence = pair_sentence(doc, backend, layout, TRAINING_STEP)
    rows = {a.component: a for a in _attribution(doc, backend, layout)}
    cells = {c.id: c for c in doc.cells}
    bars = []
    step = rows.get("step_time_s")
    for role, label in zip(("candidate", "reference"), labels(doc), strict=True):
        phases = {
            p: getattr(rows[f"phases_s.{p}"], f"{role}_s")
            for p in TRAINING_PHASES
            if f"phases_s.{p}" in rows and getattr(rows[f"phases_s.{p}"], f"{role}_s") is not None
        }
        cell = cells.get(getattr(step, f"{role}_cell")) if step is not None else None
        if phases:
            bars.append(_bar(label, phases, sum(phases.values()), cell))
    return Card(
        title=f"{backend} / {layout}: training step",
        verdict=short,
        text=evidence + _rates(doc, backend, layout),
        color=VERDICT_COLORS[verdict],
        bars=bars,
        warnings=[w for w in (learning_warning(doc, backend, layout),) if w],
    )


def pair_card(doc: ReportDocument, backend: str, layout: str) -> Card:
    if doc.train_only is not None:
        return _training_card(doc, backend, layout)
    verdict, short, evidence = pair_sentence(doc, backend, layout)
    rows = _attribution(doc, backend, layout)
    cells = {c.id: c for c in doc.cells}
    step = next((a for a in rows if a.component == "step_time_s"), None)
    bars = []
    if step is not None:
        for role, label in zip(("candidate", "reference"), labels(doc), strict=True):
            phases = {
                a.component.removeprefix("phases_s."): getattr(a, f"{role}_s")
                for a in rows
                if a.component.startswith("phases_s.") and getattr(a, f"{role}_s") is not None
            }
            cell = cells.get(getattr(step, f"{role}_cell"))
            bars.append(_bar(label, phases, getattr(step, f"{role}_s"), cell))
    learning = learning_warning(doc, backend, layout)
    return Card(
        title=f"{backend} / {layout}",
        verdict=short,
        text=evidence,
        color=VERDICT_COLORS[verdict],
        bars=bars,
        warnings=[w for w in (learning, power_warning(doc, backend, layout)) if w],
    )


def _single_repeat_note(doc: ReportDocument) -> str | None:
    """Cells measured in one repeat: their intervals are this run's step noise only, however tight they look. Said
    once under the cards, not in every card: it is true of the whole run, and the verdict stays the card's lead."""
    paired = {cell for backend, layout in doc.pairs() for cell in _pair_cells(doc, backend, layout)}
    single = [c.id for c in doc.cells if c.id in paired and c.repeats < 2]
    if not single:
        return None
    return (
        "One repeat: the interval covers this run's steps only, not run-to-run variation; "
        f"run 3 repeats (--repeats 3) before acting on it ({', '.join(f'`{c}`' for c in single)})."
    )


def _pair_cells(doc: ReportDocument, backend: str, layout: str) -> list[str]:
    step = next((a for a in _attribution(doc, backend, layout) if a.component == "step_time_s"), None)
    return [step.candidate_cell, step.reference_cell] if step is not None else []


def _notes(doc: ReportDocument) -> list[str]:
    notes = [f"**{r.backend} / {r.layout}**: comparison refused: {r.reason}." for r in doc.refused]
    single = _single_repeat_note(doc)
    if single:
        notes.append(single)
    unsteady = [c for c in doc.cells if not c.steady_state.reached]
    if unsteady:
        notes.append(
            "No steady state: " + ", ".join(_unsteady(c) for c in unsteady) + " (their numbers may include warm-up "
            "or drift; see Steady state)."
        )
    if doc.incomplete:
        notes.append(f"{len(doc.incomplete)} cell repeat(s) did not complete; see Incomplete cells.")
    flagged = [
        f"`{c.id}` " + ", ".join(f"{f.flag} on {f.steps} of {f.of_steps} steps" for f in c.step_flags if f.defect)
        for c in doc.cells
        if any(f.defect for f in c.step_flags)
    ]
    if flagged:
        notes.append("Flagged steps: " + "; ".join(flagged) + " (values doubtful or left out; see Step flags).")
    over = [(c.id, c.summaries["train_mfu"].median) for c in doc.cells if _above_peak(c)]
    if over:
        notes.append(
            "Train TFLOP/s above the datasheet peak: "
            + ", ".join(f"`{cell}` MFU {mfu:.2f}" for cell, mfu in over)
            + " (impossible on that GPU: check the FLOPs model's inputs, the GPU count and the device name)."
        )
    if not doc.pairs() and not doc.refused:
        notes.append(_no_pair_note(doc))
    if doc.train_only is not None:
        notes.append(TRAIN_ONLY_NOTE)
    return notes


def _unsteady(cell) -> str:
    steady = cell.steady_state
    if steady.noise is not None:
        return f"`{cell.id}` (step time too noisy, {steady.noise:.1%}, to place the end of its warm-up)"
    return f"`{cell.id}`" + (f" (needs {steady.more_steps} more steps)" if steady.more_steps else "")


TRAIN_ONLY_NOTE = (
    "Train-only run: every cell trained on one recorded rollout. The cards compare the training step (the actor "
    "update, its phases and rates); step time, generate and weight sync are not compared, since they include what "
    "each side does besides training in replay (parity row rollout_replay). The Train-only section has every ratio."
)


def _above_peak(cell: CellModel) -> bool:
    summary = cell.summaries.get("train_mfu")
    return summary is not None and summary.median is not None and summary.median > 1.0


def _no_pair_note(doc: ReportDocument) -> str:
    """Why there is no card: one side only in the run, or both ran but a side has no complete cell to compare."""
    candidate, reference = labels(doc)
    sides = doc.side_pair()
    if sides.reference is None:
        return f"No {candidate}/{reference} pair to compare in this run (one framework only)."
    measured = {cell.side for cell in doc.cells}
    missing = [side.label for side in sides.sides() if side.name not in measured]
    which = " and ".join(missing) + (" has" if len(missing) == 1 else " have") if missing else "the two sides have"
    shared = "" if missing else " of the same backend and layout"
    return (
        f"No {candidate}/{reference} pair to compare: both ran, but {which} no complete cell with metrics{shared} "
        "(see Incomplete cells)."
    )


def headline_blocks(doc: ReportDocument) -> list[Any]:
    """The cards, then what keeps a pair or a cell out of them."""
    cards = [pair_card(doc, b, lay) for b, lay in doc.pairs()]
    train_only = doc.train_only is not None
    metric = TRAINING_STEP if train_only else "step_time_s"
    threshold = threshold_text(doc.threshold(metric))
    candidate, reference = labels(doc)
    blocks: list[Any] = []
    if cards:
        shown = [p for p in PHASES if p in TRAINING_PHASES] if train_only else list(PHASES)
        legend = [(p, PHASE_COLORS[p]) for p in shown] + ([] if train_only else [("unattributed", UNATTRIBUTED_COLOR)])
        blocks.append(Cards(cards, legend=legend))
        what = "the actor update (`phases_s.train`)" if train_only else "step time"
        bars = "the training phases' mean seconds per step" if train_only else "mean seconds per step by phase"
        blocks.append(
            Paragraph(
                f"Practical threshold {threshold} on {what}: a verdict of faster or slower needs the whole "
                f"interval beyond ±{threshold}; inside it, no practical difference; otherwise inconclusive. "
                f"Bars: {bars} ({candidate} and {reference} on one scale)."
            )
        )
    notes = _notes(doc)
    if notes:
        blocks.append(Bullets(notes))
    return blocks


def headline_markdown(doc: ReportDocument) -> str:
    """Compact: one line per pair, then the notes; for the step summary, the PR comment and the terminal."""
    lines = []
    for backend, layout in doc.pairs():
        card = pair_card(doc, backend, layout)
        steps = [f"{b.label} {b.total_s:.2f} s" for b in card.bars if b.total_s is not None]
        what = "Training step" if doc.train_only is not None else "Step time"
        tail = f" {what} {' vs '.join(steps)}." if len(steps) == 2 else ""
        warn = "".join(f" {w}" for w in card.warnings)
        lines.append(f"**{card.title}**: {card.verdict} {card.text}.{tail}{warn}")
    lines += _notes(doc)
    candidate, reference = labels(doc)
    return render_markdown([Paragraph(f"**{candidate} vs {reference} at a glance**"), Bullets(lines)])
