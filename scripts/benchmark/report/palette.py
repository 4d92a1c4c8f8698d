"""Colours shared by the SVG charts and the HTML cards, so a phase or a verdict looks the same everywhere."""

from __future__ import annotations

from scripts.benchmark.analysis.verdict import Practical

PHASE_COLORS = {
    "generate": "#4c78a8",
    "rollout_wait": "#72b7b2",
    "old_logprob": "#f58518",
    "ref_logprob": "#e45756",
    "train": "#54a24b",
    "weight_sync": "#b279a2",
    "other": "#9d755d",
}
UNATTRIBUTED_COLOR = "#bab0ac"
"""Step time that no reported phase covers (overlap, scheduling, phases a framework does not report)."""

VERDICT_COLORS = {
    Practical.BETTER: "#1a7f37",
    Practical.WORSE: "#cf222e",
    Practical.NO_PRACTICAL_DIFFERENCE: "#6e7781",
    Practical.INCONCLUSIVE: "#bf8700",
    Practical.NOT_COMPARED: "#8c959f",
}
VERDICT_LABELS = {
    Practical.BETTER: "Miles better",
    Practical.WORSE: "Miles worse",
    Practical.NO_PRACTICAL_DIFFERENCE: "no practical difference",
    Practical.INCONCLUSIVE: "inconclusive",
    Practical.NOT_COMPARED: "not compared",
}
