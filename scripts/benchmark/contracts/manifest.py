"""DIR/manifest.json: what the runner did to every cell repeat, written atomically after every change.

- Shared contract fields per cell: id, framework, side (the plan side it belongs to; None in older manifests),
  backend, layout, repeat, state (pending | running | complete | failed | interrupted | skipped: no room in the
  run's time budget | not-needed: a sequential pair decided before this round), reason, started_at, ended_at
  (ISO-8601 UTC to the millisecond, or null: a launch's wall time, read back by the cost model), dir
  ("cells/<id>/rep-<k>"), metrics
  ("cells/<id>/rep-<k>/metrics.jsonl").
- Additional fields (readers may ignore them): steps_completed, num_steps, exit_code, previous_attempts (folders of
  earlier attempts kept by --resume), processes (while the cell runs: its process group, session and every process
  by pid and start time, so a --resume after a killed harness finds what is left), ray (while the cell runs: its
  private Ray head's processes and its Ray job's submission id, which --resume stops), survivors (processes a stop
  could not end); top level: spec_hash, sides (copied from the plan), options (the execute options, reused by
  --resume), prepare (one entry per preparation step), harness (the process holding the run folder's lock),
  warnings.
- `ManifestFile` is the typed definition; `read_manifest_json(path)` is the one reader of the file (validated
  through it), `Manifest.save()` the one writer (also through it).
- `Manifest.save()` writes tmp + fsync + rename, so a reader never sees a half-written manifest.
- `set_state` enforces the transitions: pending -> running -> complete | failed | interrupted, pending -> skipped |
  not-needed, and a rerun (failed | interrupted | running | complete-but-short | skipped | not-needed) -> running.

Caveats:
- A cell left "running" by a harness that was SIGKILLed (no chance to write) is treated by --resume as partial.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from scripts.benchmark.contracts.sides import Side

from miles.utils.bench_metrics import write_text_atomic

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1

CellState = Literal["pending", "running", "complete", "failed", "interrupted", "skipped", "not-needed"]
NOT_NEEDED = "not-needed"
"""A round of a sequential pair that the paired check decided without (runner/rounds.py)."""
SKIPPED = "skipped"
"""A launch the run's time budget had no room for (runner/rounds.py): missing, as a failed one is."""
_ALLOWED: dict[str, frozenset[str]] = {
    "pending": frozenset({"running", SKIPPED, NOT_NEEDED}),
    SKIPPED: frozenset({"running", SKIPPED, NOT_NEEDED}),
    NOT_NEEDED: frozenset({"running"}),
    "running": frozenset({"complete", "failed", "interrupted", "running", SKIPPED, NOT_NEEDED}),
    "failed": frozenset({"running", SKIPPED, NOT_NEEDED}),
    "interrupted": frozenset({"running", SKIPPED, NOT_NEEDED}),
    "complete": frozenset({"running", SKIPPED, NOT_NEEDED}),
}


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, allow_nan=False) + "\n")


class ProcessRecord(BaseModel):
    """One process, named so that a reused pid never matches: pid and start time (clock ticks after boot)."""

    pid: int
    start_time: int


class CellProcesses(BaseModel):
    """What a running cell had started, as last seen by the harness: enough to find its leftovers after a crash."""

    host: str
    boot_id: str | None = None
    """Start times compare only within one boot of one host."""
    leader: ProcessRecord
    pgid: int
    sid: int
    members: list[ProcessRecord] = Field(default_factory=list)
    token: str | None = None
    """The value of BENCH_PROCESS_TOKEN in the command's environment, inherited by all it started (None: older)."""


class RayRecord(BaseModel):
    """The Ray work a running cell started, for a --resume after a killed harness: its private head's processes and
    its job (on an external cluster only the job: the cluster is not the run's)."""

    head: CellProcesses | None = None
    temp_dir: str | None = None
    """The private head's temp dir (its Ray session folder), removed once the head is stopped."""
    dashboard_url: str | None = None
    submission_id: str | None = None
    ray_argv: list[str] = Field(default_factory=list)
    """The words of the cell's Ray job submission before `job`: the Ray CLI that stops the job."""


class HarnessRecord(BaseModel):
    """The harness process holding the run folder's lock (run.lock holds the same fields)."""

    pid: int
    host: str
    start_time: int | None = None
    started_at: str
    boot_id: str | None = None


class CellRun(BaseModel):
    """One cell repeat as the runner tracks it (mutable: the runner updates it and saves the manifest)."""

    model_config = ConfigDict(extra="ignore")

    id: str
    framework: str
    side: str | None = None
    """The plan side the cell belongs to (None in manifests written before sides existed)."""
    backend: str
    layout: str
    repeat: int
    state: CellState = "pending"
    reason: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    dir: str = ""
    metrics: str = ""
    steps_completed: int = 0
    num_steps: int | None = None
    sink_format: str | None = None
    """The plan cell's metric sink format (which reader read it; None in manifests written before it was kept)."""
    exit_code: int | None = None
    previous_attempts: list[str] = Field(default_factory=list)
    processes: CellProcesses | None = None
    ray: RayRecord | None = None
    """The cell's Ray head and job while it runs (cleared when they are stopped)."""
    survivors: list[ProcessRecord] = Field(default_factory=list)

    @property
    def key(self) -> tuple[str, int]:
        return (self.id, self.repeat)


class ManifestFile(BaseModel):
    """manifest.json as written: top-level fields, then one entry per cell repeat."""

    model_config = ConfigDict(extra="allow")

    schema_version: Literal[1]
    plan: str = "plan.json"
    spec_hash: str | None = None
    sides: list[Side] | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    prepare: list[dict[str, Any]] = Field(default_factory=list)
    recording: dict[str, Any] | None = None
    """Train-only runs: the recording every cell replayed (key, folder, digest); absent otherwise."""
    harness: HarnessRecord | None = None
    warnings: list[str] = Field(default_factory=list)
    cells: list[CellRun]


def read_manifest_json(path: Path) -> dict[str, Any]:
    """manifest.json validated through `ManifestFile`: the one reader of the file (Manifest.load, the report)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except ValueError as exc:  # not JSON or not UTF-8: a copy cut short
        raise ValueError(f"{path} is damaged ({exc}); was the run folder fully copied?") from None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
        found = data.get("schema_version") if isinstance(data, dict) else data
        raise ValueError(f"{path}: schema_version {found!r}, expected {SCHEMA_VERSION}")
    if not isinstance(data.get("cells"), list):
        raise ValueError(f"{path}: field 'cells' must be a list, got {data.get('cells')!r}")
    if not data["cells"]:
        folders = sum(1 for folder in (Path(path).parent / "cells").glob("*/rep-*") if folder.is_dir())
        raise ValueError(
            f"{path} lists no cell repeat, while the runner lists every cell of its plan there "
            f"(cells/ holds {folders} repeat folders): it was damaged or replaced; restore it from a copy"
        )
    try:
        ManifestFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"{path}: {where}: {first['msg']}") from exc
    return data


@dataclass(kw_only=True)
class Manifest:
    path: Path
    cells: list[CellRun]
    spec_hash: str | None = None
    sides: list[Side] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    prepare: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    harness: HarnessRecord | None = None
    recording: dict[str, Any] | None = None
    scrub: Callable[[Any], Any] | None = None
    """Applied to the whole document before it is written (the run's secret redaction)."""

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    def to_json(self) -> dict[str, Any]:
        document = ManifestFile(
            schema_version=SCHEMA_VERSION,
            spec_hash=self.spec_hash,
            sides=self.sides,
            options=self.options,
            prepare=self.prepare,
            harness=self.harness,
            warnings=self.warnings,
            cells=self.cells,
            recording=self.recording,
        )
        data = document.model_dump(mode="json")
        if data["recording"] is None:
            del data["recording"]
        return self.scrub(data) if self.scrub is not None else data

    def save(self) -> None:
        write_json_atomic(self.path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> Manifest:
        document = ManifestFile.model_validate(read_manifest_json(path))
        return cls(
            path=path,
            cells=list(document.cells),
            spec_hash=document.spec_hash,
            sides=document.sides,
            options=document.options,
            prepare=document.prepare,
            warnings=document.warnings,
            harness=document.harness,
            recording=document.recording,
        )

    def find(self, cell_id: str, repeat: int) -> CellRun | None:
        return next((c for c in self.cells if c.key == (cell_id, repeat)), None)

    def set_state(self, cell: CellRun, state: CellState, *, reason: str | None = None) -> None:
        if state not in _ALLOWED[cell.state]:
            raise ValueError(f"cell {cell.id} rep {cell.repeat}: illegal transition {cell.state} -> {state}")
        cell.state = state
        cell.reason = reason
        if state == "running":
            cell.started_at, cell.ended_at, cell.exit_code = utc_now(), None, None
        else:
            cell.ended_at = utc_now()
        self.save()


def cell_dir_name(cell_id: str, repeat: int) -> str:
    return f"cells/{cell_id}/rep-{repeat}"


def new_cell_run(cell: dict[str, Any], repeat: int) -> CellRun:
    rel = cell_dir_name(cell["id"], repeat)
    return CellRun(
        id=cell["id"],
        framework=cell["framework"],
        side=cell.get("side"),
        backend=cell["backend"],
        layout=cell["layout"],
        repeat=repeat,
        dir=rel,
        metrics=f"{rel}/metrics.jsonl",
        num_steps=cell.get("num_steps"),
        sink_format=(cell.get("sink") or {}).get("format"),
    )
