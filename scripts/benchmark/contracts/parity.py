"""DIR/parity.json: the parity proof as the plan writes it and the report reads it, one typed definition.

- `ParityFile`: `schema_version` 2, `spec_hash`, and one `ParityPair` per backend x layout that compares a candidate
  cell with a reference cell; each pair holds its `rows` (one knob each: the canonical value read back from each
  launch, the status, the note and the literal launch words that set it), its status `counts`, and the digest of
  what each of its two cells runs (`contracts/plan.launch_digest`; absent in files written before).
- `read_parity_file(path)` validates a file and raises ValueError naming the file and the field at fault; a
  version-1 file (the same document with `miles`/`verl` keys, written before sides existed) is upgraded on read.
- `unexplained(parity, backend, layout)`: why the proof does not cover a pair (no table, a parity error, a row that
  is neither matched nor a declared asymmetry with its note).

Caveats:
- Values are JSON values of the types frameworks/knobs.py declares (numbers, shared spellings, notes), as each
  adapter's knob reader returns them; equality is decided by the planner, never re-decided from this file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SCHEMA_VERSION = 2
Status = Literal["matched", "asymmetry", "MISMATCH"]
STATUSES: tuple[str, ...] = ("matched", "asymmetry", "MISMATCH")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ParityRow(_Strict):
    knob: str
    group: str
    candidate: Any
    reference: Any
    status: Status
    note: str = ""
    candidate_launch: str = ""
    reference_launch: str = ""


class ParityPair(_Strict):
    backend: str
    layout: str
    candidate_cell: str
    reference_cell: str
    error: str | None = None
    counts: dict[str, int] = Field(default_factory=dict)
    rows: list[ParityRow] = Field(default_factory=list)
    candidate_digest: str | None = None
    reference_digest: str | None = None
    """What each cell runs, as proven (contracts/plan.launch_digest): `execute` refuses a cell whose words changed."""

    def with_counts(self) -> ParityPair:
        return self.model_copy(update={"counts": {s: sum(r.status == s for r in self.rows) for s in STATUSES}})


class ParityFile(_Strict):
    schema_version: Literal[2] = SCHEMA_VERSION
    spec_hash: str | None
    pairs: list[ParityPair] = Field(default_factory=list)

    def pair(self, backend: str, layout: str) -> ParityPair | None:
        return next((p for p in self.pairs if p.backend == backend and p.layout == layout), None)


_V1_KEYS = {"miles": "candidate", "verl": "reference", "miles_launch": "candidate_launch"}
_V1_KEYS |= {"verl_launch": "reference_launch", "miles_cell": "candidate_cell", "verl_cell": "reference_cell"}


def _renamed(entry: Any) -> Any:
    return {_V1_KEYS.get(k, k): v for k, v in entry.items()} if isinstance(entry, dict) else entry


def _upgrade_v1(data: dict[str, Any]) -> dict[str, Any]:
    pairs = data.get("pairs") if isinstance(data.get("pairs"), list) else data.get("pairs")
    if isinstance(pairs, list):
        pairs = [
            {**_renamed(p), "rows": [_renamed(r) for r in p.get("rows", [])]} if isinstance(p, dict) else p
            for p in pairs
        ]
    return {**data, "schema_version": SCHEMA_VERSION, "pairs": pairs}


def parse_parity(data: Any, where: str = "parity.json") -> ParityFile:
    """A parity document (v2, or v1 upgraded) as `ParityFile`; ValueError naming `where` and the field at fault."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: not a JSON object")
    if data.get("schema_version") == 1:
        data = _upgrade_v1(data)
    try:
        return ParityFile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = ".".join(str(part) for part in error["loc"]) or "document"
        raise ValueError(f"{where}: {loc}: {error['msg']}") from exc


def read_parity_file(path: Path) -> ParityFile:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read as JSON: {exc}") from exc
    return parse_parity(data, str(path))


def parity_text(parity: ParityFile) -> str:
    """parity.json as the planner writes it."""
    return json.dumps(parity.model_dump(mode="json"), indent=2, default=str) + "\n"


def unexplained(
    parity: ParityFile | None, backend: str, layout: str, *, names: tuple[str, str] | None = None
) -> list[str]:
    """Why the parity proof does not cover this backend/layout pair ([] when it does); with the sides' `names`, a
    row's values are shown by side name ({'miles': 8192, 'verl': 4096}), as the report prints them."""
    if parity is None:
        return ["no parity.json in the run folder: the launches were never proven matched"]
    pair = parity.pair(backend, layout)
    if pair is None:
        return [f"parity.json has no table for {backend}/{layout}"]
    problems = [f"parity error: {pair.error}"] if pair.error else []
    for row in pair.rows:
        if row.status == "matched" or (row.status == "asymmetry" and row.note):
            continue
        values = (
            f"candidate {row.candidate!r}, reference {row.reference!r}"
            if names is None
            else repr(dict(zip(names, (row.candidate, row.reference), strict=True)))
        )
        problems.append(f"{row.knob} ({row.status}: {values})")
    return problems
