"""report.json's learning rows as pydantic models (contracts/report.py holds the pair that carries them): the
learning guard's words, each signal's tested quantities, its power (analysis/learning_power.py) and both sides'
trajectories. Open models: fields written by older reports still load."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class LastThirdModel(_Open):
    verdict: str
    difference: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None


SAME, DIFFERENT, UNSETTLED, NOT_JUDGED = "same", "different", "not enough steps to tell", "not judged"
"""The learning guard's words per signal (analysis/learning.py)."""


class TestedQuantityModel(_Open):
    estimate: float
    ci_low: float
    ci_high: float
    call: str


class LearningPowerModel(_Open):
    """What the guard can see on a signal (analysis/learning_power.py): its planted difference, the chance of
    calling it with this run's repeats, and the repeats a side that call it 9 times in 10 (None: more than 64)."""

    planted: str
    repeats: int
    power: float
    repeats_needed: int | None = None
    spread_source: str


class LearningSignalModel(_Open):
    signal: str
    unit: str
    margin_kind: Literal["absolute", "relative"]
    margin: float | None
    candidate: float | None
    reference: float | None
    paired_steps: int
    difference: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    verdict: str
    why: str
    block: float | None = None
    last_third: LastThirdModel | None = None
    """Written by reports before the level and last-third test; kept so they still load."""
    steps_needed: int | None = None
    repeats_needed: int | None = None
    """With "not enough steps to tell" decided by the spread between repeats: the repeats a side that would tell."""
    """With "not enough steps to tell": the paired steps that would tell at the observed noise."""
    tested: dict[str, TestedQuantityModel] = Field(default_factory=dict)
    """Per quantity tested (level, late, drift): its estimate, 1 - 2 alpha interval and call."""
    repeats: list[int] = Field(default_factory=list)
    """Repeats of the candidate and of the reference; a verdict needs two or more a side."""
    power: LearningPowerModel | None = None


class PointsModel(_Open):
    steps: list[int]
    values: list[float]


class SeriesPairModel(_Open):
    candidate: PointsModel
    reference: PointsModel


class LengthExplainsModel(_Open):
    generate_ratio: float | None
    length_ratio: float | None
    per_token_ratio: float | None
    share: float | None
