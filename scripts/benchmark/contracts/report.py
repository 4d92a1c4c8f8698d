"""report.json as pydantic models: what analysis returns, `run.py report` renders and writes, and `run.py record` /
`check` read back. One definition for all of them (schema_version 2).

- `ReportDocument`: the run's `sides` (candidate and reference, contracts/sides.py), its `cells` (each with its
  `framework` and `side`), the candidate/reference `comparisons`, the step-time `attribution`, the `learning` pairs,
  the `calibration` view, the typed `parity` proof (contracts/parity.py), what was refused and what is incomplete.
  Every row about a pair names its `candidate_cell` and `reference_cell`; ratios are candidate / reference.
- `validate_report_file(path)` reads a file and raises ValueError naming the first field at fault
  (`cells[0]: field 'layout' must be a string, got None`); a version-1 report.json (miles/verl keys) is refused with
  the command that rewrites it (the history store keeps records, never reports, so nothing else needs it).
- `percent`, `signed_percent`, `verdict_words`: the words a verdict is printed with, by the report and the check.
- Non-finite floats are written as the strings "NaN" / "Infinity" (bench_metrics markers) and decoded before
  validation; a metric that was never reported is null, never 0.

Caveats:
- `samples` hold every steady-state step of each repeat, in step order; a step whose value is missing or non-finite
  is NaN there (so a consumer can refuse it); a metric the framework never reported has an empty list.
"""

from __future__ import annotations

import enum
import json
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from scripts.benchmark.contracts.learning import (  # noqa: F401 (the learning words are report.json's)
    DIFFERENT,
    NOT_JUDGED,
    SAME,
    UNSETTLED,
    LearningSignalModel,
    LengthExplainsModel,
    SeriesPairModel,
)
from scripts.benchmark.contracts.parity import ParityFile
from scripts.benchmark.contracts.sides import Side, SidePair
from scripts.benchmark.spec.report import DEFAULT_PRACTICAL_THRESHOLD

from miles.utils.bench_metrics import decode_nonfinite


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Practical(str, enum.Enum):
    """The practical verdict on an interval of a relative change (analysis/verdict.py decides it)."""

    BETTER = "better"
    WORSE = "worse"
    NO_PRACTICAL_DIFFERENCE = "no practical difference"
    INCONCLUSIVE = "inconclusive"
    NOT_COMPARED = "n/a"


class RepeatSteadyModel(_Open):
    repeat: int
    start_step: int | None
    start_index: int | None = None
    reached: bool
    method: str
    more_steps: int | None = None
    noise: float | None = None
    """The steady steps' robust scale as a share of their level (analysis/steady_state.py::window_noise)."""
    steps: int
    steady_steps: int


class SteadyStateModel(_Open):
    start_step: int | None
    reached: bool
    method: str
    more_steps: int | None = None
    noise: float | None = None
    """Set when the claim is refused for noise: the largest robust scale (share of the level) of such a repeat."""
    repeats: list[RepeatSteadyModel] = Field(default_factory=list)


class SummaryModel(_Open):
    median: float | None
    ci_low: float | None
    ci_high: float | None
    n: int = Field(ge=0)
    method: str
    unit: str
    direction: Literal["lower", "higher"]


class ResponseLengthModel(_Open):
    mean: float | None = None
    std_of_step_means: float | None = None
    median_step_min: float | None = None
    median_step_max: float | None = None


class StepTimeSeriesModel(_Open):
    repeat: int
    steps: list[int]
    step_time_s: list[float | None]


class CellLearningModel(_Open):
    """A learning signal of one cell over its steady window: the median over repeats of each repeat's mean."""

    value: float | None
    repeat_values: list[float] = Field(default_factory=list)
    unit: str


class LaunchTimingModel(_Open):
    """A cell's launches in wall time (the manifest's start to end) and start-up (that less its steps' times)."""

    wall_s: float | None = None
    startup_s: float | None = None
    """Medians over the repeats."""
    repeats: list[dict[str, Any]] = Field(default_factory=list)


class StepFlagModel(_Open):
    """One kind of flag on a cell's step records (analysis/step_flags.py)."""

    flag: str
    steps: int
    """Steps (every repeat, warm-up included) carrying it."""
    of_steps: int
    examples: list[str] = Field(default_factory=list)
    defect: bool = True
    """False for a note every healthy run carries (how a value is read), True when a value is doubtful or left out."""


class CellModel(_Open):
    id: str
    framework: str
    side: str
    backend: str
    layout: str
    repeats: int = Field(ge=1)
    interval_policy: str = ""
    hardware: str | None
    sink: str | None = None
    """The plan's sink format for this cell (how its step times were taken); None in older reports."""
    environment: dict[str, Any]
    environments: list[dict[str, Any]] = Field(default_factory=list)
    steady_state: SteadyStateModel
    summaries: dict[str, SummaryModel]
    samples: dict[str, list[list[float]]]
    response_length: ResponseLengthModel = Field(default_factory=ResponseLengthModel)
    step_time_series: list[StepTimeSeriesModel] = Field(default_factory=list)
    tokens_per_step: float | None = None
    """Mean trained (prompt + response) tokens per steady step."""
    learning: dict[str, CellLearningModel] = Field(default_factory=dict)
    launch: LaunchTimingModel = Field(default_factory=LaunchTimingModel)
    step_flags: list[StepFlagModel] = Field(default_factory=list)
    """What the cell's step records are flagged with, per kind; empty in reports written before."""


class PairModel(_Open):
    """A row about one candidate/reference pair of cells (one backend x layout)."""

    backend: str
    layout: str
    candidate_cell: str
    reference_cell: str


class ComparisonModel(PairModel):
    metric: str
    candidate: float | None
    reference: float | None
    ratio: float | None
    """candidate / reference."""
    ci_low: float | None
    ci_high: float | None
    p_value: float | None = None
    significant: bool
    method: str
    unit: str
    direction: Literal["lower", "higher"]
    threshold: float = DEFAULT_PRACTICAL_THRESHOLD
    verdict: Practical = Practical.NOT_COMPARED
    """The ratio's interval read against the practical threshold, in the metric's better direction."""


class AttributionModel(PairModel):
    component: str
    """A phase metric (phases_s.<name>), "unattributed" (step gap minus the phases) or "step_time_s" (the gap)."""
    candidate_s: float | None
    reference_s: float | None
    gap_s: float | None
    ci_low: float | None
    ci_high: float | None
    share_of_gap: float | None
    note: str
    comparable: bool = True
    """False: a phase the two frameworks measure differently in this layout (its note says how); shown with its
    own gap, never part of the attribution."""


class RefusedModel(_Open):
    backend: str
    layout: str
    reason: str


class PolicyLagModel(_Open):
    backend: str
    layout: str
    bound: dict[str, Any]
    """Side name -> the launch's max_policy_lag (parity row), None without parity."""
    observed: dict[str, dict[str, Any] | None]
    """Side name -> {mean, max, steps} over the side's steps, None where the framework logged no staleness."""
    flags: list[str] = Field(default_factory=list)


class IncompleteModel(_Open):
    cell_id: str
    repeat: int
    state: str
    reason: str | None


class CalibrationRowModel(_Open):
    id: str
    device: str | None
    train_tflops_per_gpu: float | None
    mfu_datasheet: float | None
    measured_peak_tflops: float | None
    mfu_measured_peak: float | None
    roofline_tflops: float | None
    grad_ckpt: bool
    fraction_of_roofline: float | None
    fraction_of_roofline_range: list[float] | None = None
    roofline_run_to_run_pct: float | None = None
    weight_sync_s: float | None = None
    weight_sync_floor_s: float | None = None
    weight_sync_floor_path: str | None = None
    weight_sync_over_floor: float | None = None


class LearningPairModel(PairModel):
    from_step: int
    alpha: float
    available: bool
    signals: list[LearningSignalModel]
    series: dict[str, SeriesPairModel]
    length_explains: LengthExplainsModel


class TrainOnlyRowModel(PairModel):
    """A training-step metric of a train-only run: candidate/reference on the identical batch, beside the same ratio
    of a full-loop run of the spec when one is given."""

    metric: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: Practical = Practical.NOT_COMPARED
    full_loop_ratio: float | None = None
    full_loop_ci_low: float | None = None
    full_loop_ci_high: float | None = None


class FirstStepModel(PairModel):
    """One learning signal at the first step both sides trained, on identical tokens and initial weights."""

    signal: str
    step: int | None
    candidate: float | None
    reference: float | None
    difference: float | None
    """candidate - reference (relative to the larger magnitude for a relative-margin signal)."""
    tolerance: float | None
    agrees: bool | None
    """None: a side did not log the signal at that step."""


class TrainOnlyModel(_Open):
    """The train-only section: both sides replayed one recording (its key and digest) into their training steps."""

    recording_key: str | None
    digest: str | None
    recorder: str | None
    full_loop_run: str | None = None
    left_out: list[str] = Field(default_factory=list)
    """What the training-step comparison leaves out, and why (what each side does besides training in replay)."""
    rows: list[TrainOnlyRowModel] = Field(default_factory=list)
    first_step: list[FirstStepModel] = Field(default_factory=list)


class ReportDocument(_Open):
    schema_version: Literal[2]
    run_dir: str
    generated_at: str
    spec_hash: str | None
    preset: str | None
    confidence: float = 0.95
    practical_thresholds: dict[str, float] = Field(default_factory=dict)
    """Per metric, the relative change the verdicts read intervals against."""
    family_wise: bool = True
    bootstrap_reps: int | None = None
    sides: list[Side]
    cells: list[CellModel]
    incomplete: list[IncompleteModel] = Field(default_factory=list)
    comparisons: list[ComparisonModel]
    refused: list[RefusedModel] = Field(default_factory=list)
    attribution: list[AttributionModel]
    calibration: list[CalibrationRowModel] | None = None
    calibration_note: str | None = None
    parity: ParityFile | None
    parity_error: str | None = None
    """Why parity.json could not be read (then `parity` is None and no pair is compared)."""
    learning: list[LearningPairModel] = Field(default_factory=list)
    learning_margins: dict[str, float | None] | None = None
    """Per learning signal, the margin the report judged with (the spec's, else the default): `check` uses the same.
    None in reports written before it (then `check` keeps the defaults)."""
    policy_lag: list[PolicyLagModel] = Field(default_factory=list)
    """Per pair, the policy lag each side logged against the bound its launch set (analysis/staleness.py)."""
    train_only: TrainOnlyModel | None = None
    """A train-only run's training-step comparison on one recording (analysis/train_only.py); None otherwise."""

    def side_pair(self) -> SidePair:
        return SidePair.from_list(self.sides)

    def side(self, name: str) -> Side | None:
        return next((s for s in self.sides if s.name == name), None)

    def threshold(self, metric: str) -> float:
        return self.practical_thresholds.get(metric, DEFAULT_PRACTICAL_THRESHOLD)

    def pairs(self) -> list[tuple[str, str]]:
        """(backend, layout) of every compared pair, sorted."""
        return sorted({(c.backend, c.layout) for c in self.comparisons})


def percent(change: float) -> str:
    """A relative change as a short percentage: 10%, 2.4%, 0.51% (whole percents from 5% up: a headline number)."""
    magnitude = abs(change) * 100
    if magnitude >= 4.95:
        return f"{magnitude:.0f}%"
    return f"{magnitude:.1f}%" if magnitude >= 0.995 else f"{magnitude:.2f}%"


def signed_percent(change: float) -> str:
    """An interval end: always with a decimal (+9.6%, +10.4%, -0.18%), so bounds never look rounder than they are."""
    magnitude = abs(change) * 100
    return ("+" if change >= 0 else "-") + (f"{magnitude:.1f}%" if magnitude >= 0.995 else f"{magnitude:.2f}%")


def is_time(unit: str) -> bool:
    """Seconds and seconds per tokens: a larger value is "slower"."""
    return unit == "s" or unit.startswith("s/")


def verdict_words(verdict: Practical, unit: str) -> str:
    """ "slower"/"faster" for times, "worse"/"better" otherwise; the equivalence and inconclusive words as they are."""
    if verdict is Practical.WORSE:
        return "slower" if is_time(unit) else "worse"
    if verdict is Practical.BETTER:
        return "faster" if is_time(unit) else "better"
    return verdict.value


_EXPECTED = {"string_type": "string", "dict_type": "object", "list_type": "list", "int_type": "integer"}
_EXPECTED |= {"int_parsing": "integer", "float_type": "number", "float_parsing": "number", "bool_type": "boolean"}


def _field_error(data: Any, exc: ValidationError) -> str:
    """The first error as `cells[0]: field 'layout' must be a string, got None`."""
    error = exc.errors()[0]
    loc = list(error["loc"])
    parent, name = loc[:-1], loc[-1] if loc else "report"
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in parent).lstrip(".")
    value = data
    for part in loc:
        value = value[part] if isinstance(value, (dict, list)) and _has(value, part) else None
    kind = _EXPECTED.get(error["type"])
    if error["type"] == "missing":
        kind = _TYPE_NAMES.get(_annotation_at(loc))
    message = f"must be a {kind}, got {value!r}" if kind else error["msg"]
    return f"{where}: field {name!r} {message}" if where else f"field {name!r} {message}"


_TYPE_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "list"}


def _annotation_at(loc: list[Any]) -> Any:
    """The declared type of the field at `loc` (list items and dict values followed), its origin for generics."""
    annotation: Any = ReportDocument
    for part in loc:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part) if isinstance(part, str) else None
            annotation = field.annotation if field else None
        elif typing.get_origin(annotation) in (list, dict):
            annotation = typing.get_args(annotation)[-1]
        else:
            return None
    return typing.get_origin(annotation) or annotation


def _has(container: Any, key: Any) -> bool:
    return key in container if isinstance(container, dict) else isinstance(key, int) and key < len(container)


REPORT_FILE = "report.json"


def read_run_report(run_dir: Path) -> ReportDocument:
    """A run folder's report.json through its typed definition; a missing one says how to make it."""
    path = Path(run_dir) / REPORT_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run `python scripts/benchmark/run.py report {run_dir}` first")
    return validate_report_file(path)


def validate_report_file(path: Path) -> ReportDocument:
    """report.json through its typed definition; ValueError naming the file and the fix when it cannot be read."""
    try:
        data = decode_nonfinite(json.loads(Path(path).read_text(encoding="utf-8")))
    except ValueError as exc:  # not JSON (a copy cut short, a full disk of an older harness) or not UTF-8 text
        raise ValueError(
            f"{path} is damaged ({exc}): write it again with `python scripts/benchmark/run.py report "
            f"{Path(path).parent}`"
        ) from None
    if isinstance(data, dict) and data.get("schema_version") == 1:
        raise ValueError(
            f"{path}: report.json schema_version 1 (written before sides): run `python scripts/benchmark/run.py "
            "report <run folder>` again to write version 2"
        )
    try:
        return ReportDocument.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{path}: {_field_error(data, exc)}") from exc
