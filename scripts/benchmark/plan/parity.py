"""The parity proof: both emitted launches parsed back (never the spec) into one canonical table of knobs.

- `build_parity(candidate, reference, backend, layout) -> list[ParityRow]`: one row per knob: value per side,
  `matched` or `asymmetry` (declared, with a one-line note of the expected throughput effect). A difference that is
  not declared raises `ParityError`. The values come from each side's adapter (`parity_knobs`); the literal words
  that set the knob in each launch (`candidate_launch`, `reference_launch`) from its `launch_words`, so the table can
  be checked against the cell scripts word for word. Rows follow frameworks/knobs.py's order; a value outside its
  knob's declared type, or a knob it does not declare, is a `MISMATCH` naming the knob and the parser (even where
  both sides agree).
- Declared asymmetries: when the two sides run different frameworks, what each adapter's `inherent_differences`
  declares against the other's framework (a note that describes the other framework is keyed by it); two sides of
  one framework declare none, except their targets (a `target` row, which is the change under comparison). A knob
  one side does not read is a mismatch unless that side's adapter says why its launches cannot have it
  (`absent_knobs`).
- `parity_file(...)`, `parity_markdown(...)`: what the plan writes as parity.json (contracts/parity.py) / parity.md
  (with a legend, in the sides' labels, and a link to the manual).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from scripts.benchmark.common.markdown import markdown_table
from scripts.benchmark.contracts.parity import ParityFile, ParityPair, ParityRow
from scripts.benchmark.contracts.sides import SidePair
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.adapter import FrameworkAdapter
from scripts.benchmark.frameworks.knobs import BY_NAME, KNOBS

DOCS = "docs/benchmark/plan.md#the-parity-table-and-declared-asymmetries"
NOT_SET = "not set: framework default"
TARGET_NOTE = "the change under comparison: both sides run the same framework at these targets or checkouts"
BUNDLED_KNOBS = ("rollout_engine_version", "prefill_cuda_graphs", "cuda_graph_max_bs")
"""Knobs a target decides by what it bundles (its engine release and that release's defaults), not by its argv."""
BUNDLED_NOTE = (
    "what each target bundles (its SGLang release and that release's defaults): part of the change under comparison"
)
SINK_NOTE = (
    "each target's own sink (a target with the benchmark tracking backend writes its files, one without it its "
    "console): the reader takes both into the same records; the sink adds no work to the step"
)


def legend(candidate: str, reference: str, example: str) -> list[str]:
    """The legend of parity.md in the sides' labels; `example` is the pair's own example sentence (registry)."""
    return [
        f"Legend: **{candidate}** / **{reference}** are the canonical values both launches are read back into (the "
        f"same unit and name on both sides); **{candidate} sets it with** / **{reference} sets it with** are the "
        "literal flags and overrides of the cell scripts (`not set: framework default` when no word sets the knob); "
        "**status** is `matched`, `asymmetry` (declared, with its expected throughput effect) or `MISMATCH` (not "
        "declared: the plan is refused).",
        *([example] if example else []),
        "`train_state_offload` (weights and optimizer moved to CPU while SGLang generates) is not "
        "`optimizer_cpu_offload` (the optimizer step itself on CPU).",
    ]


class ParityError(ValueError):
    """A knob differs between the two launches and is not a declared asymmetry."""

    def __init__(self, message: str, rows: list | None = None):
        super().__init__(message)
        self.rows = rows or []


@dataclass(frozen=True)
class ParitySide:
    """One side's launch as the parity table reads it."""

    adapter: FrameworkAdapter
    argv: list[str]
    prepare_argv: list[str] | None = None
    target: str | None = None
    root: str | None = None
    sink_format: str | None = None
    """The plan sink the launch writes (`FrameworkLaunch.sink["format"]`): the metric_sink row says what it is."""


UNREAD = "nothing declares why it cannot exist there: read it back, or declare why in the adapter's absent_knobs"
REPLAY_NOTE = (
    "kept out of the training-step comparison: a train-only report compares old_logprob, ref_logprob and train (and "
    "training tokens/s, TFLOP/s, MFU) only, never step time, generate or weight_sync"
)
"""Train-only plans: what each side still does besides training in replay differs; the comparison leaves it out."""


def declared_asymmetries(candidate: FrameworkAdapter, reference: FrameworkAdapter, backend: str, layout: str):
    """Knob -> note: what each adapter declares against the other's framework when the frameworks differ (notes
    keyed by the pair that makes them true), none otherwise."""
    if candidate.name == reference.name:
        return {}
    return {
        **candidate.inherent_differences(backend, layout, reference.name),
        **reference.inherent_differences(backend, layout, candidate.name),
        "rollout_replay": REPLAY_NOTE,
    }


def _absent(knob: str, sides: tuple[tuple[ParitySide, dict[str, Any]], ...], backend: str, layout: str):
    """(status, note) of a knob one side does not read: declared where that side's adapter says why its launches
    cannot have it, a mismatch otherwise."""
    side = next(side for side, knobs in sides if knob not in knobs)
    why = side.adapter.absent_knobs(backend, layout).get(knob)
    if why:
        return "asymmetry", f"absent from {side.adapter.label}'s launches: {why}"
    return "MISMATCH", f"absent from {side.adapter.label}'s launches: its parser does not read it ({UNREAD})"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _words(knob: str, candidate: ParitySide, reference: ParitySide) -> tuple[str, str]:
    a = candidate.adapter.launch_words(knob, candidate.argv)
    b = reference.adapter.launch_words(knob, reference.argv)
    if a is None and b is None:
        return "", ""
    return a or NOT_SET, b or NOT_SET


def _target_row(candidate: ParitySide, reference: ParitySide) -> list[ParityRow]:
    """Two sides of one framework: the target row, and the checkout row when a side names its checkout (an asymmetry
    where they differ, which is the point)."""
    if candidate.adapter.name != reference.adapter.name:
        return []
    rows = []
    for knob, a, b in (("target", candidate.target, reference.target), ("checkout", candidate.root, reference.root)):
        if knob == "checkout" and a is None and b is None:
            continue
        status, note = ("matched", "") if a == b else ("asymmetry", TARGET_NOTE)
        rows.append(ParityRow(knob=knob, group="run", candidate=a, reference=b, status=status, note=note))
    return rows


def _knobs(side: ParitySide, backend: str) -> dict[str, Any]:
    """The side's knobs from its argv; the metric sink from the launch's own sink where the adapter names it (a
    sink switched on by the environment, not by a flag)."""
    knobs = side.adapter.parity_knobs(side.argv, backend, side.prepare_argv, side.target)
    described = side.adapter.metric_sink(side.sink_format) if side.sink_format else None
    return {**knobs, "metric_sink": described} if described else knobs


def _mistyped(side: ParitySide, knobs: dict[str, Any], errors: list[str]) -> dict[str, str]:
    """Knob -> why the side's parser returned a value outside its declared type (frameworks/knobs.py); a knob the
    model does not declare goes straight to `errors`."""
    parser, problems = f"{side.adapter.label}'s parity parser", {}
    for name, value in knobs.items():
        if name not in BY_NAME:
            errors.append(f"{name}: {parser} returns a knob that frameworks/knobs.py does not declare")
        elif (problem := BY_NAME[name].problem(value)) is not None:
            problems[name] = f"{parser} returned {value!r}: {problem}"
    return problems


def build_parity(candidate: ParitySide, reference: ParitySide, backend: str, layout: str) -> list[ParityRow]:
    """All rows; raises ParityError (carrying the rows) if a knob differs and is not a declared asymmetry."""
    a_knobs, b_knobs = _knobs(candidate, backend), _knobs(reference, backend)
    rows, errors = _target_row(candidate, reference), []
    mistyped: dict[str, list[str]] = {}
    for side, knobs in ((candidate, a_knobs), (reference, b_knobs)):
        for knob, problem in _mistyped(side, knobs, errors).items():
            mistyped.setdefault(knob, []).append(problem)
    declared = declared_asymmetries(candidate.adapter, reference.adapter, backend, layout)
    if candidate.adapter.name == reference.adapter.name and candidate.sink_format != reference.sink_format:
        declared["metric_sink"] = SINK_NOTE
    if candidate.adapter.name == reference.adapter.name and candidate.target != reference.target:
        declared.update(dict.fromkeys(BUNDLED_KNOBS, BUNDLED_NOTE))
    for declared_knob in KNOBS:
        knob = declared_knob.name
        if knob not in a_knobs and knob not in b_knobs:
            continue
        a, b = a_knobs.get(knob, "<absent>"), b_knobs.get(knob, "<absent>")
        words = dict(zip(("candidate_launch", "reference_launch"), _words(knob, candidate, reference), strict=True))
        row = {"knob": knob, "group": declared_knob.group, "candidate": a, "reference": b, **words}
        if knob in mistyped:
            note = "; ".join(dict.fromkeys(mistyped[knob]))  # one parser on both sides says it once
            rows.append(ParityRow(**row, status="MISMATCH", note=note))
            errors.append(f"{knob}: {note}")
        elif knob not in a_knobs or knob not in b_knobs:
            status, note = _absent(knob, ((candidate, a_knobs), (reference, b_knobs)), backend, layout)
            rows.append(ParityRow(**row, status=status, note=note))
            errors += [f"{knob}: {note}"] if status == "MISMATCH" else []
        elif _same(a, b):
            note = declared_knob.matched_cost if a not in ("off", "none") else ""
            rows.append(ParityRow(**row, status="matched", note=note))
        elif knob in declared:
            rows.append(ParityRow(**row, status="asymmetry", note=declared[knob]))
        else:
            rows.append(ParityRow(**row, status="MISMATCH", note="not a declared asymmetry"))
            errors.append(f"{knob}: {candidate.adapter.name}={a!r} {reference.adapter.name}={b!r}")
    if errors:
        raise ParityError(f"{backend}/{layout}: " + "; ".join(dict.fromkeys(errors)), rows)
    return rows


def parity_file(spec_hash: str, pairs: list[ParityPair]) -> ParityFile:
    """parity.json: one pair per backend x layout, with its status counts."""
    return ParityFile(spec_hash=spec_hash, pairs=[pair.with_counts() for pair in pairs])


def _knob_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _launch_text(text: str | None) -> str:
    if not text:
        return ""
    return text if text.startswith("not set") else f"`{text}`"


def parity_markdown(parity: ParityFile, title: str, sides: SidePair) -> str:
    candidate, reference = sides.candidate, sides.reference
    lines = [
        f"# Parity: {title}",
        "",
        f"spec_hash `{parity.spec_hash}`; what each row means: [{DOCS}]({DOCS}).",
        "",
    ]
    if reference is None or not parity.pairs:
        return "\n".join(lines + [registry.no_reference_note(candidate.framework), ""])
    example = registry.pair_example(candidate.framework, reference.framework)
    lines += [" ".join(legend(candidate.label, reference.label, example)), ""]
    for pair in parity.pairs:
        c = pair.counts
        lines += [f"## {pair.candidate_cell} vs {pair.reference_cell}", ""]
        lines += [f"{c['matched']} matched, {c['asymmetry']} declared asymmetries, {c['MISMATCH']} mismatches.", ""]
        if pair.error:
            lines += [f"**Parity error**: {pair.error}", ""]
        rows = [
            [r.group, r.knob, _knob_text(r.candidate), _knob_text(r.reference), r.status]
            + [_launch_text(r.candidate_launch), _launch_text(r.reference_launch), _knob_text(r.note)]
            for r in pair.rows
        ]
        header = ["group", "knob", candidate.label, reference.label, "status", f"{candidate.label} sets it with"]
        header += [f"{reference.label} sets it with", "expected throughput effect"]
        lines += [markdown_table(header, rows), ""]
    return "\n".join(lines)
