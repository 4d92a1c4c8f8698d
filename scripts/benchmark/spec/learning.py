"""The spec's optional `learning:` section: how the report judges whether Miles and VERL learn the same.

Margins default to `LEARNING_SIGNALS` (miles/utils/bench_metrics.py, each with its reason); report.json keeps the
margins a report judged with, and `check` uses them.
The section sets how a run is judged, not what runs, so it is left out of the spec hash: changing a margin keeps a
run comparable with its history.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator
from scripts.benchmark.spec.pins import Count, Number

from miles.utils.bench_metrics import LEARNING_SIGNALS


class LearningSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    margins: dict[str, Number | None] = Field(default_factory=dict)
    """Per-signal equivalence margin in the signal's margin kind (absolute units, or a relative fraction);
    null = plot only, never judged. Signals not named keep their default."""
    from_step: Count | None = Field(None, ge=1)
    """Judge from this step on instead of the throughput steady window's first step."""
    alpha: Number = Field(0.05, gt=0, lt=0.5)
    """Level of each test (TOST: "same" needs every 1 - 2 alpha interval inside the margin)."""

    @field_validator("margins")
    @classmethod
    def _known_positive(cls, margins: dict[str, float | None]) -> dict[str, float | None]:
        for name, value in margins.items():
            if name not in LEARNING_SIGNALS:
                raise ValueError(f"learning.margins: unknown signal {name!r} (known: {sorted(LEARNING_SIGNALS)})")
            if value is not None and not value > 0:
                raise ValueError(f"learning.margins.{name}: must be > 0 or null, got {value}")
        return margins

    def margin(self, name: str) -> float | None:
        return self.margins[name] if name in self.margins else LEARNING_SIGNALS[name].margin
