"""bisect.md: the answer of a bisect (history/bisect.py) in words a maintainer acts on, then every probe.

The headline says what is known: the commit named and the probe that saw it slower; or that the probe's workload
does not see a slowdown between the ends; or the range that is left, the commits in it and why the bisect stopped.
The table lists each probe: its head and base, the rounds it ran of the rounds it was allowed, the ratio of step
times with its 95% interval, the verdict and its node time. The cost line sums node time and GPU-hours.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from scripts.benchmark.common.markdown import markdown_table
from scripts.benchmark.history.bisect import BisectState, ProbeResult

SHORT = 12
LISTED = 12
"""Commits of a range left that the answer lists by name (the rest are counted)."""
VERDICT_WORDS = {
    "REGRESSED": "slower",
    "NO_DIFFERENCE": "no practical difference",
    "IMPROVED": "faster",
    "INCONCLUSIVE": "inconclusive (rerun with more rounds)",
    "COULD_NOT_JUDGE": "could not judge (rerun)",
    "UNTESTABLE": "the head did not run (skipped)",
}


def render_bisect(state: BisectState, subjects: list[str], *, gpus: int) -> str:
    """The whole of bisect.md."""
    lines = ["### Bisect: " + _headline(state, subjects), ""]
    lines += _body(state, subjects)
    if state.probes:
        lines += ["", markdown_table(_HEADER, [_row(i, p, state) for i, p in enumerate(state.probes, 1)])]
    hours = state.spent_s * gpus / 3600
    lines += [
        "",
        f"{len(state.probes)} probe(s), {state.spent_s / 60:.0f} min of the node, {hours:.1f} GPU-hours "
        f"({gpus} GPUs). Range: {state.commits[0][:SHORT]}..{state.commits[-1][:SHORT]}, "
        f"{len(state.commits) - 1} commit(s) after the good end.",
    ]
    return "\n".join(lines) + "\n"


_HEADER = ["probe", "head", "base (good end)", "rounds", "head/base [95% CI]", "verdict", "node min", "run folder"]


def _headline(state: BisectState, subjects: list[str]) -> str:
    outcome = state.outcome()
    if outcome == "named":
        return f"{_commit(state, state.bad, subjects)} made the step slower"
    if outcome == "not-reproduced":
        return f"no slowdown between {state.commits[state.good][:SHORT]} and {state.commits[state.bad][:SHORT]}"
    return f"stopped with {state.candidates} commit(s) left, {_range(state)}"


def _body(state: BisectState, subjects: list[str]) -> list[str]:
    outcome = state.outcome()
    if outcome == "named":
        saw = next(p for p in state.probes if p.head == state.bad and p.decision == "REGRESSED")
        return [
            f"Decided: the probe of {state.commits[state.bad][:SHORT]} against {state.commits[saw.base][:SHORT]} "
            f"found it slower, head/base {_ratio(saw)}; the commit before it, {state.commits[state.good][:SHORT]}, "
            + ("is the good end" if state.good == 0 else "was found not slower than the good end")
            + "; every step of the range was a decided verdict of the paired check."
        ]
    if outcome == "not-reproduced":
        return [
            "The bad end is not slower than the good end next to it in this workload. The probes run the PR "
            "check's workload (a small batch, short responses): a slowdown that grows with response length or batch "
            "size, in the other backend or layout, or outside the framework's code (node, driver, packages) is not "
            "seen there. Nothing is named."
        ]
    left = list(range(state.good + 1, state.bad + 1))
    shown = ", ".join(_commit(state, i, subjects) for i in left[:LISTED])
    more = f" and {len(left) - LISTED} more" if len(left) > LISTED else ""
    why = state.stopped or (
        "only commits that could not run are left between the ends" if state.untestable else "the probes went on"
    )
    untestable = [state.commits[i][:SHORT] for i in state.untestable]
    return [
        f"Stopped: {why}. The slowdown is in one of: {shown}{more}."
        + (f" Commits that could not run: {', '.join(untestable)}." if untestable else "")
        + " Run the same command again with a larger --budget-minutes to go on from here."
    ]


def _row(number: int, p: ProbeResult, state: BisectState) -> list[str]:
    return [
        str(number),
        state.commits[p.head][:SHORT],
        state.commits[p.base][:SHORT],
        f"{p.rounds} of {p.max_rounds}",
        _ratio(p),
        VERDICT_WORDS.get(p.decision, p.decision),
        f"{p.seconds / 60:.1f}",
        f"`probes/{PurePosixPath(p.run_dir).name}`" if p.run_dir else "-",
    ]


def _ratio(p: ProbeResult) -> str:
    if p.ratio is None:
        return "-"
    interval = f" [{p.ci_low:.3f}, {p.ci_high:.3f}]" if p.ci_low is not None and p.ci_high is not None else ""
    return f"{p.ratio:.3f}{interval}"


def _commit(state: BisectState, index: int, subjects: list[str]) -> str:
    subject = subjects[index] if index < len(subjects) else ""
    return f"{state.commits[index][:SHORT]} ({subject})" if subject else state.commits[index][:SHORT]


def _range(state: BisectState) -> str:
    return f"{state.commits[state.good][:SHORT]}..{state.commits[state.bad][:SHORT]}"
