"""The one entry point of the metric readers: a framework's sink files -> schema records with derived fields.

`build_step_records(framework, sources, ctx)` reads (VERL's FileLogger, Miles's event log or stdout), merges
processes and restarts, normalises (Miles's step shift), maps to the schema and derives TFLOPs, MFU and rates.
A folder among the sources stands for its *.jsonl files.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from miles.utils.bench_metrics import Framework, RunContext, StepRecord, derive_step_fields
from scripts.benchmark.frameworks.learning_signals import fill_learning
from scripts.benchmark.frameworks.miles import sink as miles_sink
from scripts.benchmark.frameworks.native_events import NoStepsError, SinkIssue, merge_native_events
from scripts.benchmark.frameworks.verl import sink as verl_sink


def expand_sources(sources: Iterable[str | Path]) -> list[Path]:
    """Files as given; a folder stands for its *.jsonl files (a Miles event dir, a sink/ folder), sorted."""
    paths: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            found = sorted(path.rglob("*.jsonl"))
            if not found:
                raise ValueError(f"{path}: folder holds no *.jsonl file")
            paths.extend(found)
        elif path.is_file():
            paths.append(path)
        else:
            raise ValueError(f"{path}: no such file or folder")
    return paths


def build_step_records(framework: Framework, sources: Iterable[str | Path], ctx: RunContext) -> list[StepRecord]:
    """Read a framework's sink files, merge processes and restarts, normalise, map to the schema, derive.

    Raises NoStepsError when the files hold no step metrics yet, ValueError when they cannot be read.
    """
    paths = expand_sources(sources)
    issues: list[SinkIssue] = []
    if framework == "verl":
        events, anchors = verl_sink.verl_events(paths, issues), verl_sink.COMPLETE_ANCHORS
    elif framework == "miles":
        events, anchors = miles_sink.miles_events(paths, issues), miles_sink.COMPLETE_ANCHORS
    else:
        raise ValueError(f"framework must be 'miles' or 'verl', got {framework!r}")
    if not events:
        raise NoStepsError(f"no {framework} step metrics found in {', '.join(str(p) for p in paths)}")
    steps = merge_native_events(events, issues, complete_anchors=anchors)
    if framework == "verl":
        records = [verl_sink.verl_record(steps[s], ctx) for s in sorted(steps)]
    else:
        records = miles_sink.normalize_miles_steps(steps, ctx)
    records = fill_learning(framework, records, paths, ctx)
    return [derive_step_fields(record, ctx) for record in records]
