"""DIR/plan.json: what `run.py --dry-run` writes and `run.py execute` runs, as one typed definition.

The planner validates the document through `PlanFile` before writing it, and the runner reads it back through
the same model, so a hand-edited plan with a wrong type, an empty command or a duplicate cell is refused before
anything starts. `plan_problems(data, known)` lists every problem as one line naming the field
(`cells[0] (<id>): ...`).

- `sides` (contracts/sides.py): the candidate and, when the plan compares, the reference; every cell's `side` names
  one of them. Plans written before sides existed have neither (readers rebuild them from the cells' frameworks).
- `origin`: the run folder the plan was written for and the harness folder of the checkout that wrote it (`execute`
  moves paths under either to its own run folder and checkout: runner/relocate.py, with `move_paths`); absent in
  older plans.
- `launch_digest(cell, prepare, origin)`: what a cell runs (launch words, environment, the prepare steps its
  framework runs), its origin's folders written as placeholders: parity.json keeps each compared cell's digest, and
  `execute` runs a plan only while its cells still have them (a launch edited after planning was never proven).
- `recording` (train-only plans, plan/train_only.py): the recording every cell replays, and its record launch.
- `repeats`: what `execute` runs when no --repeats is given (the number the dry run printed); absent: 1.
- `workload` (`full`, or `pr` for `--pr-workload`), `sequential` (a head/base pair in rounds: `min_rounds`,
  `max_rounds`), `cost` (plan/cost.py) and `budget_minutes`: what the dry run decided about the run's size and time;
  absent in older plans.
- `Known`: the frameworks and sink formats the reader of the plan can handle. Contracts name no framework: the
  runner passes the registry's (frameworks/registry.py); without it, any non-empty name passes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from scripts.benchmark.contracts.sides import Side, SidePair

SCHEMA_VERSION = 1
HARNESS_DIR = Path(__file__).resolve().parents[1]
"""This checkout's scripts/benchmark: the run.py and model configs a plan names."""
_Argv = list[str]
RECORD_SCRIPT = "recording/record.sh"
"""A train-only plan's recording pass beside plan.json (plan/train_only.py); `execute` copies it with the plan."""


@dataclass(frozen=True)
class Known:
    """What the reader of a plan handles (the registry's names and sink formats); empty: not checked."""

    frameworks: tuple[str, ...] = ()
    sink_formats: tuple[str, ...] = ()


def _known(info: ValidationInfo) -> Known:
    return (info.context or {}).get("known") or Known()


class CellSink(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    format: str
    path: str

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str, info: ValidationInfo) -> str:
        formats = _known(info).sink_formats
        if formats and value not in formats:
            raise ValueError(f"sink.format {value!r} is not one of {formats}")
        if not value:
            raise ValueError("sink.format is empty")
        return value


class PlanCell(BaseModel):
    """One framework x backend x layout launch of the matrix."""

    model_config = ConfigDict(extra="allow", strict=True)

    id: str
    framework: str
    side: str | None = None
    backend: str
    layout: str
    launch_argv: _Argv = Field(min_length=1)
    argv: _Argv | None = None
    env: dict[str, str] = Field(default_factory=dict)
    sink: CellSink
    num_steps: int
    gpus: dict[str, int] = Field(default_factory=dict)
    model_config_path: str | None = Field(default=None, alias="model_config")
    script: str | None = None
    ray_head_argv: _Argv | None = None

    @field_validator("framework")
    @classmethod
    def _registered(cls, value: str, info: ValidationInfo) -> str:
        frameworks = _known(info).frameworks
        if frameworks and value not in frameworks:
            raise ValueError(f"framework {value!r} is not one of {frameworks}")
        return value

    @field_validator("launch_argv")
    @classmethod
    def _has_a_program(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("launch_argv[0] (the program) is empty")
        return value

    @field_validator("num_steps")
    @classmethod
    def _positive_steps(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"num_steps must be a positive integer, got {value!r}")
        return value


class PrepareStep(BaseModel):
    """Harness work run once before the first cell (downloads, data conversion)."""

    model_config = ConfigDict(extra="allow", strict=True)

    name: str
    argv: _Argv = Field(min_length=1)
    creates: str | None = None
    skip_if_exists: bool = True
    needed_by: list[str] = Field(default_factory=list)


class SequentialRounds(BaseModel):
    """A head/base pair run in rounds until the paired check decides (runner/rounds.py)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    min_rounds: int = Field(ge=1)
    max_rounds: int = Field(ge=1)


class PlanFile(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)

    schema_version: int
    spec: dict[str, Any] = Field(default_factory=dict)
    spec_hash: str | None = None
    preset: str | None = None
    sides: list[Side] | None = None
    prepare: list[PrepareStep] = Field(default_factory=list)
    cells: list[PlanCell] = Field(min_length=1)
    warnings: list[str] = Field(default_factory=list)
    origin: dict[str, str] | None = None
    repeats: int | None = Field(default=None, ge=1)
    """Interleaved repeats of every cell that the plan was printed with; absent in plans written before it existed."""
    workload: Literal["full", "pr"] | None = None
    sequential: SequentialRounds | None = None
    cost: dict[str, Any] | None = None
    """What the plan costs (plan/cost.py `PlanCost.to_json`); the runner reads each cell's typical launch time."""
    budget_minutes: float | None = Field(default=None, gt=0)


def _where(data: dict[str, Any], loc: tuple) -> str:
    """`cells[2] (<id>)` / `prepare[0] (<name>)` / a top-level field name, from a pydantic error location."""
    if len(loc) >= 2 and loc[0] in ("cells", "prepare") and isinstance(loc[1], int):
        entries = data.get(loc[0]) if isinstance(data.get(loc[0]), list) else []
        entry = entries[loc[1]] if loc[1] < len(entries) and isinstance(entries[loc[1]], dict) else {}
        label = entry.get("id") if loc[0] == "cells" else entry.get("name")
        return f"{loc[0]}[{loc[1]}]" + (f" ({label})" if isinstance(label, str) else "")
    return str(loc[0]) if loc else "plan"


def _field_message(loc: tuple, error: dict[str, Any]) -> str:
    inner = [str(part) for part in loc[2:]] if len(loc) >= 2 and isinstance(loc[1], int) else [str(p) for p in loc]
    name = ".".join(inner)
    message = error["msg"].removeprefix("Value error, ")
    if name in ("launch_argv", "argv") or name.startswith(("launch_argv.", "argv.")):
        return f"{name.split('.')[0]} must be a non-empty list of strings"
    if name in ("num_steps", "sink.format", "framework") and error["type"] == "value_error":
        return message
    return f"{name}: {message}" if name else message


def _validation_lines(data: dict[str, Any], exc: ValidationError) -> list[str]:
    lines: list[str] = []
    missing: dict[str, list[str]] = {}
    for error in exc.errors():
        loc = tuple(error["loc"])
        where = _where(data, loc)
        if error["type"] == "missing" and len(loc) == 3 and loc[0] == "cells":
            missing.setdefault(f"cells[{loc[1]}]", []).append(str(loc[2]))
            continue
        if loc == ("cells",) and error["type"] in ("too_short", "list_type", "missing"):
            lines.append("cells must be a non-empty list")
            continue
        lines.append(f"{where}: {_field_message(loc, error)}")
    lines += [f"{where} lacks {', '.join(fields)}" for where, fields in missing.items()]
    return list(dict.fromkeys(lines))


def _side_problems(data: dict[str, Any]) -> list[str]:
    """`sides` hold one candidate and at most one reference, and every cell's `side` names one of them."""
    sides, cells = data.get("sides"), data.get("cells") if isinstance(data.get("cells"), list) else []
    if sides is None:
        return []
    try:
        names = {side.name for side in SidePair.from_list(sides).sides()}
    except (ValueError, TypeError) as exc:
        return [f"sides: {str(exc).splitlines()[0]}"]
    return [
        f"cells[{index}] ({cell.get('id')}): side {cell.get('side')!r} is not one of {sorted(names)}"
        for index, cell in enumerate(cells)
        if isinstance(cell, dict) and cell.get("side") not in names
    ]


def plan_problems(data: Any, known: Known | None = None) -> list[str]:
    """Every reason this document cannot be executed, one line each naming the field; [] when it can."""
    if not isinstance(data, dict):
        return ["the plan is not a JSON object"]
    problems: list[str] = []
    if data.get("schema_version") != SCHEMA_VERSION:
        problems.append(f"schema_version is {data.get('schema_version')!r}, expected {SCHEMA_VERSION}")
    try:
        PlanFile.model_validate(data, context={"known": known or Known()})
    except ValidationError as exc:
        problems += [line for line in _validation_lines(data, exc) if not line.startswith("schema_version")]
    else:
        problems += _side_problems(data)
    cells = data.get("cells") if isinstance(data.get("cells"), list) else []
    seen: set[str] = set()
    for index, cell in enumerate(cells):
        cell_id = cell.get("id") if isinstance(cell, dict) else None
        if isinstance(cell_id, str) and cell_id in seen:
            problems.append(f"cells[{index}] ({cell_id}): duplicate id")
        seen.add(cell_id)
    return problems


def read_plan_json(path: Path, known: Known | None = None) -> dict[str, Any]:
    """plan.json as checked JSON; ValueError naming the file and every problem."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"plan {path} is not valid JSON: {exc}") from exc
    problems = plan_problems(data, known)
    if problems:
        raise ValueError(f"plan {path} cannot be executed:\n  " + "\n  ".join(problems))
    return data


def checked_cells(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The launches a framework's own checks must accept: every cell, and a train-only plan's recording pass."""
    recording = data.get("recording") or {}
    return list(data["cells"]) + ([recording["record_cell"]] if recording.get("record_cell") else [])


def plan_origin(run_dir: Path) -> dict[str, str]:
    """What a plan written for `run_dir` by this checkout records as its origin."""
    return {"run_dir": str(run_dir), "harness": str(HARNESS_DIR)}


def quoted_path(path: str) -> str:
    """A path as it reads inside a single-quoted override value: backslashes before a quote or `${` doubled, the
    quote and `${` escaped (how a launch writes a path that is not plain)."""
    escapes = {"'": "\\'", "${": "\\${"}
    return re.sub(r"(\\*)('|\$\{)", lambda m: m.group(1) * 2 + escapes[m.group(2)], path)


def move_paths(word: Any, moves: list[tuple[str, str]]) -> Any:
    """`word` with each (old, new) folder moved; a folder matches only as a whole path prefix."""
    if not isinstance(word, str):
        return word
    for old, new in moves:
        pattern = rf"(?<![\w.\-/]){re.escape(old.rstrip('/'))}(?![\w.\-])"
        word = re.sub(pattern, new.replace("\\", "\\\\"), word)
    return word


def origin_moves(origin: Any, to: dict[str, str]) -> list[tuple[str, str]]:
    """The (old, new) folder moves from a plan's origin to `to` (its run folder and harness), quoted forms too."""
    if not isinstance(origin, dict):
        return []
    moves = [(origin.get(key), to[key]) for key in ("run_dir", "harness")]
    moves = [(old, new) for old, new in moves if isinstance(old, str) and old and old != new]
    return moves + [(quoted_path(old), quoted_path(new)) for old, new in moves if quoted_path(old) != old]


PLACEHOLDER_ORIGIN = {"run_dir": "/RUN_DIR", "harness": "/HARNESS"}
"""Where a launch digest writes the plan's own folders, so moving the plan elsewhere keeps its digests."""


def launch_digest(cell: dict[str, Any], prepare: list[dict[str, Any]], origin: Any) -> str:
    """What a cell runs, as the parity proof covers it: its launch words and environment, and the prepare steps its
    framework runs (the data it reads), with the plan's own folders as placeholders."""
    moves = origin_moves(origin, PLACEHOLDER_ORIGIN)

    def moved(words: Any) -> Any:
        return [move_paths(word, moves) for word in words] if isinstance(words, list) else words

    env = cell.get("env")
    what = {
        "launch_argv": moved(cell.get("launch_argv")),
        "env": {k: move_paths(v, moves) for k, v in env.items()} if isinstance(env, dict) else env,
        "prepare": [moved(s.get("argv")) for s in prepare if cell.get("framework") in s.get("needed_by", [])],
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def plan_json_text(data: dict[str, Any]) -> str:
    """The plan document as the planner writes it, after checking it against `PlanFile` (a bug if it fails)."""
    problems = plan_problems(data)
    if problems:
        raise AssertionError("the planner built an invalid plan: " + "; ".join(problems))
    return json.dumps(data, indent=2) + "\n"
