"""The history record: what `run.py record` stores per cell of a report and what `check` / `history` read back.

One typed definition for both directions: the store writes `RunToRecord`s (built from report.json by
history/report_input.py) and returns `StoredRun`s; a series is a `SeriesKey`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SeriesKey(_Record):
    """What makes two runs comparable: same preset, side (its framework, and its name when that differs, as for the
    two sides of a Miles-vs-Miles pair), backend, layout, hardware (node type), resolved spec (steps run and
    measured) and the run's design: its repeats and sink format. A run-level value is a median of repeat medians, so
    its spread depends on the repeats; a 1-repeat run judged against a 3-repeat baseline is flagged about three
    times as often as it should be."""

    preset: str | None
    framework: str
    backend: str
    layout: str
    hardware: str | None
    spec_hash: str
    side: str | None = None
    """The side's name; a side named after its framework (every side of a Miles-vs-VERL run) keeps the label the
    series had before sides existed."""
    repeats: int | None = None
    sink: str | None = None

    def label(self) -> str:
        who = self.framework if self.side in (None, self.framework) else f"{self.framework}@{self.side}"
        parts = [self.preset or "-", who, self.backend, self.layout, self.hardware or "-", self.spec_hash]
        return "/".join(parts + self.design())

    def design(self) -> list[str]:
        """The label's design part: `r<repeats>` and `sink=<format>`, each only when known."""
        return ([f"r{self.repeats}"] if self.repeats is not None else []) + (
            [f"sink={self.sink}"] if self.sink else []
        )


class Provenance(_Record):
    """Where a run came from; every field is optional because a laptop run has none of them."""

    commit: str | None = None
    pr: int | None = None
    ci_run_id: str | None = None
    trigger: str | None = None
    ref: str | None = None


class MetricValue(_Record):
    """One metric of one run: the run-level value (median of the repeat medians) and what it was built from."""

    metric: str
    value: float | None
    repeat_values: list[float] = Field(default_factory=list)
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    unit: str | None = None
    direction: str | None = None


class RunToRecord(_Record):
    """One cell of one report.json, as `record` stores it: its series, provenance-free identity and values."""

    series: SeriesKey
    cell_id: str
    report_generated_at: str
    run_dir: str
    environment: dict[str, Any]
    values: list[MetricValue]


class StoredRun(_Record):
    """A recorded run as the check and `history` read it back."""

    id: int
    series: str
    cell_id: str
    commit: str | None
    pr: int | None
    ci_run_id: str | None
    trigger: str | None
    recorded_at: str
    trusted: bool
    trust_note: str | None
    baseline_reset: bool
