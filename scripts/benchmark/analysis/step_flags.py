"""The flags a cell's step records carry, summarised per cell for the report: which defect or note, on how many
of its steps (every repeat, warm-up included), with a few of the flags as written.

- `flag_kind(flag)`: what a flag says without where it happened: its leading words, up to the first part that names
  a place or a count (a file, a line, an attempt number, a value), e.g. `duplicate_step:train`,
  `negative_duration:perf/train_wait_time`, `truncated_last_line`.
- `step_flag_summary(columns) -> list[dict]`: one entry per kind, most frequent first; `defect` is False for the
  notes every healthy run of a framework carries (token totals rebuilt from means, each framework's own: the
  registry's `note_flags`), True for what makes a value doubtful or leaves it out.
"""

from __future__ import annotations

import re
from collections import Counter

from scripts.benchmark.analysis.step_columns import StepColumns
from scripts.benchmark.frameworks.registry import note_flags

NOTES = ("tokens:from_means", "seq_lens:uniform_mean", "samples:from_spec", "generate:not_recorded")
"""Kinds (or their beginnings) that describe how a healthy run's values are read, not a defect of the run; each
framework adds its own (`registry.note_flags`)."""
_PLACE = re.compile(r"\d|\s|=|\.(jsonl|txt|log)$")
EXAMPLES = 3


def flag_kind(flag: str) -> str:
    parts = flag.split(":")
    kept = [parts[0]]
    for part in parts[1:]:
        if not part or _PLACE.search(part):
            break
        kept.append(part)
    return ":".join(kept)


def step_flag_summary(columns: list[StepColumns]) -> list[dict]:
    steps: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    for repeat in columns:
        for flags in repeat.flags:
            for flag in flags:
                seen = examples.setdefault(flag_kind(flag), [])
                if flag not in seen and len(seen) < EXAMPLES:
                    seen.append(flag)
            steps.update({flag_kind(f) for f in flags})
    total = sum(len(repeat) for repeat in columns)
    return [
        {
            "flag": kind,
            "steps": count,
            "of_steps": total,
            "examples": examples[kind],
            "defect": not kind.startswith(NOTES + note_flags()),
        }
        for kind, count in sorted(steps.items(), key=lambda item: (-item[1], item[0]))
    ]
