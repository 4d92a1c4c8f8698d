"""The one entry point of the metric readers: a framework's sink files -> schema records with derived fields.

`build_step_records(framework, sources, ctx)` hands the files to the framework's adapter (registry), which reads,
merges processes and restarts, normalises and maps to the schema with its learning block; the fields every
framework derives alike (TFLOPs, MFU, rates) are derived here. A folder among the sources stands for its *.jsonl
files.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from scripts.benchmark.frameworks import registry

from miles.utils.bench_metrics import RunContext, StepRecord, derive_step_fields


def expand_sources(sources: Iterable[str | Path]) -> list[Path]:
    """Files as given; a folder stands for its *.jsonl files (an event dir, a sink/ folder), sorted."""
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


def build_step_records(framework: str, sources: Iterable[str | Path], ctx: RunContext) -> list[StepRecord]:
    """Read a framework's sink files, merge processes and restarts, normalise, map to the schema, derive.

    Raises NoStepsError when the files hold no step metrics yet, ValueError when they cannot be read or the
    framework is not registered.
    """
    adapter = registry.get(framework)
    records = adapter.read_sink(expand_sources(sources), ctx)
    return [derive_step_fields(record, ctx) for record in records]
