"""The two sides of a comparison: who is measured (the candidate) against whom (the reference).

A comparison is never "Miles against VERL" in code: it is a candidate side against a reference side, each an
adapter of the framework registry plus what distinguishes it (a target version, a checkout). Miles against VERL is
one pair; Miles against Miles (a PR head against its merge base, two targets) is another, through the same code.

- `Side`: role, `name` (unique; the prefix of its cell ids, `<name>-<backend>-<layout>`), `framework` (the registry
  key of its adapter), `label` (what reports print), an optional `target` (the version its launch is written for)
  and an optional `root` (the checkout it runs, absolute on the GPU node; None: the framework's own root option).
  Two builds of one framework differ by target, by checkout, or both (a PR head against its merge base).
- `SidePair`: the candidate and, when the run compares, the reference. Ratios are candidate / reference.
- plan.json and manifest.json carry `sides` (a list of `Side`); every cell carries `side` (a side's name).

Caveats:
- Folders written before sides existed have no `sides`: readers rebuild them with `sides_from_cells`, one side per
  framework, roles taken from the registry's default pair (the first framework seen is the candidate otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

Role = Literal["candidate", "reference"]
ROLES: tuple[Role, ...] = ("candidate", "reference")
SIDE_NAME = re.compile(r"[a-z][a-z0-9_.]*(?:-[a-z0-9_.]+)*")


class Side(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    name: str
    framework: str
    label: str
    target: str | None = None
    root: str | None = None

    @field_validator("root")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"a side's checkout must be an absolute path on the GPU node, got {value!r}")
        return value

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        if not SIDE_NAME.fullmatch(value) or len(value) > 40:
            raise ValueError(f"side name {value!r} must be a lower-case slug of at most 40 characters")
        return value

    def cell_id(self, backend: str, layout: str) -> str:
        return f"{self.name}-{backend}-{layout}"


class SidePair(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    candidate: Side
    reference: Side | None = None

    def sides(self) -> list[Side]:
        return [self.candidate] + ([self.reference] if self.reference is not None else [])

    def by_name(self, name: str) -> Side | None:
        return next((side for side in self.sides() if side.name == name), None)

    @classmethod
    def from_list(cls, sides: Iterable[Side | dict]) -> SidePair:
        """From plan.json / manifest.json `sides`; ValueError when roles are missing, repeated or names clash."""
        parsed = [side if isinstance(side, Side) else Side.model_validate(side) for side in sides]
        by_role = {role: [s for s in parsed if s.role == role] for role in ROLES}
        if len(by_role["candidate"]) != 1 or len(by_role["reference"]) > 1:
            raise ValueError("sides must hold exactly one candidate and at most one reference")
        if len({s.name for s in parsed}) != len(parsed):
            raise ValueError("side names must differ")
        return cls(candidate=by_role["candidate"][0], reference=(by_role["reference"] or [None])[0])


def sides_from_cells(
    frameworks: Iterable[str], default_pair: tuple[str, str], labels: dict[str, str] | None = None
) -> SidePair:
    """Sides for a folder written before sides existed: one per framework, named after it.

    `default_pair` is the registry's (candidate, reference) framework pair; a framework outside it is the candidate
    when it comes first. `labels` maps a framework to its display label (the registry's), else the name is used.
    """
    seen = list(dict.fromkeys(frameworks))
    if not seen:
        raise ValueError("no cells: no side to build")
    candidate_name = default_pair[0] if default_pair[0] in seen else seen[0]
    others = [f for f in seen if f != candidate_name]
    reference_name = default_pair[1] if default_pair[1] in others else (others[0] if others else None)
    labels = labels or {}

    def side(framework: str, role: Role) -> Side:
        return Side(role=role, name=framework, framework=framework, label=labels.get(framework, framework))

    reference = side(reference_name, "reference") if reference_name else None
    return SidePair(candidate=side(candidate_name, "candidate"), reference=reference)
