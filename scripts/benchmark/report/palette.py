"""Colours shared by the SVG charts and the HTML cards, so a phase, a side or a verdict looks the same everywhere."""

from __future__ import annotations

from scripts.benchmark.contracts.report import Practical

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

ROLE_COLORS = {"candidate": "#1f6feb", "reference": "#e36209"}
"""A side's colour by its role, whatever framework it runs."""

VERDICT_COLORS = {
    Practical.BETTER: "#1a7f37",
    Practical.WORSE: "#cf222e",
    Practical.NO_PRACTICAL_DIFFERENCE: "#6e7781",
    Practical.INCONCLUSIVE: "#bf8700",
    Practical.NOT_COMPARED: "#8c959f",
}


def verdict_label(verdict: Practical, candidate: str) -> str:
    """A ratio's verdict in a table or a legend: '<candidate label> better' / 'worse', or the verdict's own words."""
    if verdict is Practical.BETTER:
        return f"{candidate} better"
    if verdict is Practical.WORSE:
        return f"{candidate} worse"
    return "not compared" if verdict is Practical.NOT_COMPARED else verdict.value
