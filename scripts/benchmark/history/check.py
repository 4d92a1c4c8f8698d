"""The regression check: is a candidate run worse than the trusted history of its series, both significantly and
by more than a practical threshold?

- Baseline: the last `window` trusted runs of the series (since the latest baseline reset); runs further than 5
  robust SDs (1.4826 x MAD) from their median are left out, the rest give the mean and SD. One outlier run is dropped;
  one noisy run that is kept moves the baseline by at most 5 SD / n.
- Test: a one-sided prediction test of the candidate against that baseline, standard error `s * sqrt(1 + 1 / n)`
  (one new run plus the baseline's own error), Student t with n - 1 degrees of freedom.
  The change and its 95% CI are relative to the baseline, signed by the metric's declared better direction (METRICS).
- A metric REGRESSED when p < its test level AND the worsening exceeds its practical threshold; IMPROVED
  symmetrically. The test level is `alpha` (per night, 4%) split over the cells checked together and over the two
  tests of a cell whose drift guard is active (Sidak), so that the whole night is one family.
- `step_time_family(checks)`: step time and the throughputs measured on the same steps are one family per cell,
  tested in a fixed sequence (step time first); a throughput alarm without a step-time alarm is not claimed.
- Drift guard: the candidate is also judged against an anchor, the `anchor_window` trusted runs that ended
  `drift_horizon` trusted runs ago, so a slow drift that the rolling baseline follows is still caught (DRIFTED).
- The markdown also reads each change's interval against the threshold in the report headline's words ("slower",
  "faster", "no practical difference", "inconclusive"; analysis/verdict.py); the verdict and exit code stay the test's.
- `judge` is vectorised over leading axes, so the simulation (history/simulation.py) measures this very code.

Caveats:
- Fewer than `min_history` trusted runs: INACTIVE (cold start passes with a note), as in Miles's gate.
- The test assumes the candidate ran with the same design as the history: the series key carries the spec hash
  (steps run and measured), the node type, the repeats and the sink format (contracts/history_record.py), so a run of
  another design finds another series, never this baseline.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats
from scripts.benchmark.analysis.verdict import practical_verdict
from scripts.benchmark.common.markdown import markdown_table
from scripts.benchmark.contracts.report import verdict_words

from miles.utils.bench_metrics import METRICS, REPORT_METRICS, STEP_TIME_FAMILY  # one family: report and check

# The MAD of a normal sample times this is its standard deviation.
_MAD_TO_SD = 1.4826
# History runs further than this many robust SDs from the median are left out of the baseline (conbench also
# excludes outliers before its lookback z-score). 5, not 3.5: the MAD of 30 runs is itself noisy, and at 3.5 one
# clean window in ten lost a healthy run, shrank its SD and raised the false alarms by a third; at 5 it is about one
# in a hundred, while a run 10% slower at CV 2% (5 SDs and more) is still left out.
OUTLIER_SDS = 5.0


class Verdict(str, enum.Enum):
    REGRESSED = "REGRESSED"
    DRIFTED = "DRIFTED"
    IMPROVED = "IMPROVED"
    UNCHANGED = "UNCHANGED"
    INACTIVE = "INACTIVE"
    ERROR = "ERROR"


@dataclass(frozen=True, kw_only=True)
class MetricGate:
    """Practical threshold of one metric, as a relative change in its worse direction."""

    threshold: float
    required: bool


DEFAULT_GATES: dict[str, MetricGate] = {
    name: MetricGate(threshold=METRICS[name].gate_threshold, required=METRICS[name].gate_required)
    for name in STEP_TIME_FAMILY
}
"""The registry's gated metrics (bench_metrics.METRICS `gated`), in the order the family is tested."""
UNGATEABLE_FAMILIES = frozenset({"workload", "count"})
"""What the workload is (response length, token counts), not how fast it ran: never a regression."""


@dataclass(frozen=True, kw_only=True)
class CheckSettings:
    window: int = 30
    """Trusted runs in the baseline: 30 rather than 20 narrows the prediction interval enough to detect a 5%
    step-time regression in >= 90% of nights at the lower alpha below (docs: How good is the check?)."""
    min_history: int = 5
    alpha: float = 0.035
    """Per night: the significance level of the whole check (every cell judged together), split over the cells by
    Sidak. 0.035, not 0.05: nightly values are medians, consecutive runs drift together and `record` builds the
    history from the check's own verdicts, which the simulation shows adds up to about a point of false alarms above
    the nominal level; 0.035 keeps unchanged nights under 5% with a margin (4.3% at CV 5% with offsets AR 0.3, as
    `record` builds the history; 4.9% at 0.04, where the nightly's nights became pairs of cells)."""
    drift_horizon: int = 30
    anchor_window: int = 20
    """Trusted runs in the drift guard's anchor: shorter than the baseline, so a drifting anchor spans less of the
    drift (a 30-run anchor of a 0.2%-per-run drift is 6% wide and hides half of what it should show)."""
    gates: dict[str, MetricGate] = field(default_factory=lambda: dict(DEFAULT_GATES))

    def test_alpha(self, num_cells: int, *, tests_per_cell: int = 1) -> float:
        """One-sided level of one test so that `num_cells` cells x `tests_per_cell` tests hold `alpha` jointly."""
        return 1 - (1 - self.alpha) ** (1 / max(1, num_cells * tests_per_cell))

    def __post_init__(self) -> None:
        if self.window < 2 or self.min_history < 2 or self.min_history > self.window:
            raise ValueError(f"need 2 <= min_history ({self.min_history}) <= window ({self.window})")
        if not self.min_history <= self.anchor_window:
            raise ValueError(f"need min_history ({self.min_history}) <= anchor_window ({self.anchor_window})")
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha}")
        for name, gate in self.gates.items():
            if name not in REPORT_METRICS or REPORT_METRICS[name].family in UNGATEABLE_FAMILIES:
                raise ValueError(
                    f"gated metric {name!r} has no better direction to gate: not a recorded speed metric of "
                    "bench_metrics.REPORT_METRICS"
                )
            if not gate.threshold >= 0:
                raise ValueError(f"threshold of {name!r} must be >= 0, got {gate.threshold}")


@dataclass(frozen=True, kw_only=True)
class Judgement:
    """Arrays (or scalars) over the leading axes of the inputs."""

    baseline: np.ndarray
    change: np.ndarray
    """(candidate - baseline) / |baseline|, in the metric's own sign (not the better direction)."""
    ci_low: np.ndarray
    ci_high: np.ndarray
    p_worse: np.ndarray
    p_better: np.ndarray
    worse: np.ndarray
    """Relative change in the worse direction (positive = worse)."""


def judge(history: np.ndarray, candidate: np.ndarray, *, direction: str, alpha_ci: float = 0.05) -> Judgement:
    """Compare candidate values (...) with histories (..., n) of trusted run values; n >= 2."""
    history = np.asarray(history, dtype=float)
    candidate = np.asarray(candidate, dtype=float)
    median = np.median(history, axis=-1)
    # A floor keeps a perfectly flat history (deterministic metric) from making every tiny change "significant".
    floor = 1e-3 * np.abs(median)
    robust_sd = np.maximum(_MAD_TO_SD * np.median(np.abs(history - median[..., None]), axis=-1), floor)
    keep = np.abs(history - median[..., None]) <= OUTLIER_SDS * robust_sd[..., None]
    n_keep = keep.sum(axis=-1)
    baseline = np.where(keep, history, 0.0).sum(axis=-1) / n_keep
    sq = np.where(keep, (history - baseline[..., None]) ** 2, 0.0).sum(axis=-1)
    scale = np.maximum(np.sqrt(sq / np.maximum(n_keep - 1, 1)), floor)
    se = scale * np.sqrt(1.0 + 1.0 / n_keep)
    df = np.maximum(n_keep - 1, 1)
    sign = 1.0 if direction == "lower" else -1.0
    abs_base = np.where(np.abs(baseline) > 0, np.abs(baseline), np.nan)
    change = (candidate - baseline) / abs_base
    t_worse = sign * (candidate - baseline) / se
    half = stats.t.ppf(1 - alpha_ci / 2, df) * se / abs_base
    return Judgement(
        baseline=baseline,
        change=change,
        ci_low=change - half,
        ci_high=change + half,
        p_worse=stats.t.sf(t_worse, df),
        p_better=stats.t.cdf(t_worse, df),
        worse=sign * change,
    )


def classify(j: Judgement, *, threshold: float, alpha: float) -> np.ndarray:
    """Boolean array: regressed (significant and beyond the practical threshold)."""
    return (j.p_worse < alpha) & (j.worse > threshold)


def classify_improved(j: Judgement, *, threshold: float, alpha: float) -> np.ndarray:
    return (j.p_better < alpha) & (-j.worse > threshold)


@dataclass(frozen=True, kw_only=True)
class MetricCheck:
    """The verdict on one metric of one cell, with everything the markdown table shows."""

    cell_id: str
    metric: str
    verdict: Verdict
    baseline: float | None = None
    candidate: float | None = None
    change: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    n_baseline: int = 0
    threshold: float | None = None
    note: str = ""


def check_metric(
    *,
    cell_id: str,
    metric: str,
    candidate: float | None,
    recent: list[float],
    anchor: list[float],
    settings: CheckSettings,
    num_cells: int = 1,
) -> MetricCheck:
    """Judge one metric of one of `num_cells` cells checked together: recent (oldest first, trusted, finite) and
    anchor windows come from the store."""
    gate = settings.gates[metric]
    drift_active = len(anchor) >= settings.min_history
    alpha = settings.test_alpha(num_cells, tests_per_cell=2 if drift_active else 1)
    base = dict(cell_id=cell_id, metric=metric, candidate=candidate, threshold=gate.threshold, n_baseline=len(recent))
    if candidate is None or not math.isfinite(candidate):
        return MetricCheck(**base, verdict=Verdict.ERROR, note="missing or non-finite in the candidate run")
    if len(recent) < settings.min_history:
        note = f"cold start: {len(recent)} trusted run(s), {settings.min_history} needed"
        return MetricCheck(**base, verdict=Verdict.INACTIVE, note=note)
    direction = METRICS[metric].direction
    j = judge(np.asarray(recent[-settings.window :]), np.asarray(candidate), direction=direction)
    fields = dict(
        baseline=float(j.baseline),
        change=float(j.change),
        ci_low=float(j.ci_low),
        ci_high=float(j.ci_high),
    )
    base["n_baseline"] = min(len(recent), settings.window)
    if classify(j, threshold=gate.threshold, alpha=alpha):
        return MetricCheck(**base, **fields, p_value=float(j.p_worse), verdict=Verdict.REGRESSED)
    drift_note = ""
    if drift_active:
        a = judge(np.asarray(anchor), np.asarray(candidate), direction=direction)
        if classify(a, threshold=gate.threshold, alpha=alpha):
            # Report the comparison that fired: baseline, change, CI and p are the anchor's.
            note = (
                f"baseline is the anchor: {len(anchor)} trusted runs ending {settings.drift_horizon} runs back; "
                f"vs the last {base['n_baseline']} runs the change is only {float(j.change):+.1%}"
            )
            anchor_fields = dict(
                baseline=float(a.baseline), change=float(a.change), ci_low=float(a.ci_low), ci_high=float(a.ci_high)
            )
            return MetricCheck(
                **{**base, "n_baseline": len(anchor)},
                **anchor_fields,
                p_value=float(a.p_worse),
                verdict=Verdict.DRIFTED,
                note=note,
            )
    else:
        drift_note = "drift guard inactive (history shorter than anchor window + drift horizon)"
    if classify_improved(j, threshold=gate.threshold, alpha=alpha):
        return MetricCheck(**base, **fields, p_value=float(j.p_better), verdict=Verdict.IMPROVED, note=drift_note)
    return MetricCheck(**base, **fields, p_value=float(j.p_worse), verdict=Verdict.UNCHANGED, note=drift_note)


def step_time_family(checks: list[MetricCheck]) -> list[MetricCheck]:
    """Per cell, the step-time family in a fixed sequence: a throughput's REGRESSED/DRIFTED counts only while every
    member before it (step time first) did too; otherwise it is UNCHANGED with a note. One family per cell keeps
    the night's false alarms at the cells' level, not five times it."""
    out = list(checks)
    for cell in dict.fromkeys(c.cell_id for c in checks):
        open_gate = True
        for name in STEP_TIME_FAMILY:
            index = next((i for i, c in enumerate(out) if c.cell_id == cell and c.metric == name), None)
            if index is None:
                continue
            alarm = out[index].verdict in (Verdict.REGRESSED, Verdict.DRIFTED)
            if alarm and not open_gate:
                note = "not claimed: step time (tested first in its family) did not regress"
                out[index] = dataclasses.replace(out[index], verdict=Verdict.UNCHANGED, note=note)
            open_gate = open_gate and alarm
    return out


def exit_code(checks: list[MetricCheck]) -> int:
    """1: a regression (or drift) was found; 2: nothing regressed but something could not be judged; else 0."""
    verdicts = {c.verdict for c in checks}
    if verdicts & {Verdict.REGRESSED, Verdict.DRIFTED}:
        return 1
    if Verdict.ERROR in verdicts or not checks:
        return 2
    return 0


def render_check_markdown(checks: list[MetricCheck], *, title: str, notes: list[str]) -> str:
    """The verdict as GitHub markdown: one headline, one table row per (cell, metric), then notes."""
    code = exit_code(checks)
    headline = {0: "PASS", 1: "REGRESSION", 2: "COULD NOT JUDGE"}[code]
    lines = [f"### {title}: {headline} (exit {code})", ""]
    rows = []
    for c in checks:
        if c.change is None:
            change = "-"
        else:
            change = f"{c.change:+.1%} [{c.ci_low:+.1%}, {c.ci_high:+.1%}]"
        baseline = "-" if c.baseline is None else f"{_fmt(c.baseline)} (n={c.n_baseline})"
        p = "-" if c.p_value is None else f"{c.p_value:.2g}"
        threshold = "-" if c.threshold is None else f"{c.threshold:.0%} {METRICS[c.metric].direction}-is-better"
        verdict = f"**{c.verdict.value}**" if c.verdict in (Verdict.REGRESSED, Verdict.DRIFTED) else c.verdict.value
        if c.note:
            verdict += f" ({c.note})"
        rows.append([c.cell_id, c.metric, baseline, _fmt(c.candidate), change, p, threshold, _reading(c), verdict])
    header = ["cell", "metric", "baseline", "candidate", "change [95% CI]", "p", "threshold", "reading", "verdict"]
    lines += [markdown_table(header, rows), ""]
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"


def _reading(c: MetricCheck) -> str:
    """The change's interval against the threshold, in the report headline's words (analysis/verdict.py)."""
    if c.ci_low is None or c.ci_high is None or c.threshold is None:
        return "-"
    spec = METRICS[c.metric]
    practical = practical_verdict(c.ci_low, c.ci_high, threshold=c.threshold, direction=spec.direction)
    return verdict_words(practical, spec.unit)


def _fmt(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "missing"
    return f"{x:.4g}"
