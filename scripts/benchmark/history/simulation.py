"""A benchmark of the regression check itself: false alarms and detection power on simulated nightly series.

- Each trial is a series of `history` trusted runs plus one candidate run of step time (lower is better). A run is
  `repeats` repeats of `steps` steady-state steps; its value is the median over repeats of the median over steps,
  exactly what `record` stores.
- Noise at a given CV (the CV of one steady-state step): half of the variance is a per-run offset, AR(1) across
  consecutive runs (phi 0.3); half is within-run step noise, AR(1) across steps (phi 0.6). Outliers: a repeat is
  10-40% slower with probability 3%, a whole run 10-40% slower with probability 1%, a single step 1.5-3x slower with
  probability 1%.
- Regressions multiply the candidate's steps by (1 + delta). The same noise draws serve every delta and every method.
- Methods: (a) this check (`check.judge` + `classify` with the default settings, at the per-cell level of a night
  of `cells` cells); (b) a fixed threshold
  against the last run; (c) Miles's band gate: reference = mean of up to 20 trusted values, band
  max(rel * |ref|, abs_floor). (b) and (c) are also shown at the threshold that matches (a)'s detection power, so
  false alarms are compared at equal detection.

- `trust_rows`: the history built night by night as `record` builds it (auto trust: a cell is trusted unless the
  night's check flags it, and a lone flagged run is trusted again once the next night passes), then an unchanged
  night judged against it; beside it the rules `record` used before (flagged runs kept out for good, at the night's
  level and at the whole night's level per cell). The other tables trust every history run.
- Nights: `cells` independent series judged together; the per-night false-alarm rate is the share of unchanged
  nights where any cell alarms (step time and its throughputs count once per cell: they are one family).

Caveats:
- The noise model is an assumption, not a measurement; rerun with `--cv`, `--outlier-*` to stress it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from scripts.benchmark.common.markdown import markdown_table
from scripts.benchmark.history.check import CheckSettings, classify, judge


@dataclass(frozen=True, kw_only=True)
class SimulationSettings:
    trials: int = 4000
    history: int = 30
    """Trusted runs before the candidate: the check's default window."""
    repeats: int = 3
    steps: int = 16
    """Steady-state steps per repeat: a 24-step preset run after its warm-up."""
    cells: int = 2
    """Cells judged together in one night: one nightly job's report (a preset's backend pair, Miles and VERL: the
    workflow runs each on its own node); each runs its own series."""
    nights: int = 1000
    """Simulated nights per row of the night table."""
    night_cvs: tuple[float, ...] = (0.02, 0.05, 0.10)
    night_run_phis: tuple[float, ...] = (0.0, 0.3)
    """The night table is run with independent runs (0) and with consecutive runs drifting together (`run_phi`)."""
    cvs: tuple[float, ...] = (0.02, 0.05, 0.10)
    regressions: tuple[float, ...] = (0.0, 0.02, 0.05, 0.10)
    between_run_share: float = 0.25
    run_phi: float = 0.3
    step_phi: float = 0.6
    repeat_outlier_prob: float = 0.03
    run_outlier_prob: float = 0.01
    step_spike_prob: float = 0.01
    fixed_threshold: float = 0.05
    band_rel: float = 0.05
    band_abs_floor: float = 0.0
    design_cv: float = 0.02
    design_regression: float = 0.05
    drift_history: int = 60
    drift_cvs: tuple[float, ...] = (0.02, 0.05)
    drift_per_run: tuple[float, ...] = (0.0, 0.001, 0.002)
    seed: int = 0
    check: CheckSettings = field(default_factory=CheckSettings)


@dataclass(frozen=True, kw_only=True)
class SimulationRow:
    """Rates are false alarms when regression == 0 and detection otherwise."""

    cv: float
    regression: float
    check: float
    last_run: float
    band: float
    last_run_matched: float
    band_matched: float


@dataclass(frozen=True, kw_only=True)
class DriftRow:
    """Slow drift: run t of the series is (1 + drift * t) slower; rates as in SimulationRow."""

    cv: float
    drift: float
    check: float
    check_without_anchor: float
    last_run: float
    band: float


@dataclass(frozen=True, kw_only=True)
class NightRow:
    """A night of `cells` cells, independent series: per cell and per night (any cell alarms) rates of (a)."""

    cv: float
    outliers: bool
    run_phi: float
    """AR(1) coefficient of the per-run offsets across consecutive runs (0: independent nights)."""
    false_alarms_per_cell: float
    false_alarms_per_night: float
    detection: float
    """A 5% (design) step-time regression in one cell of the night, flagged in that cell."""


@dataclass(frozen=True, kw_only=True)
class SimulationResult:
    rows: list[SimulationRow]
    drift_rows: list[DriftRow]
    night_rows: list[NightRow]
    trust_rows: list[TrustRow]
    last_run_matched_threshold: float
    band_matched_threshold: float
    settings: SimulationSettings


def simulate_steps(rng: np.random.Generator, s: SimulationSettings, cv: float) -> np.ndarray:
    """Step times (trials, runs, repeats, steps) around 1.0; the last run is the candidate."""
    shape = (s.trials, s.history + 1, s.repeats, s.steps)
    sd_run = cv * np.sqrt(s.between_run_share)
    sd_step = cv * np.sqrt(1 - s.between_run_share)
    offsets = np.empty(shape[:2])
    offsets[:, 0] = rng.normal(0, sd_run, s.trials)
    for t in range(1, shape[1]):
        offsets[:, t] = s.run_phi * offsets[:, t - 1] + np.sqrt(1 - s.run_phi**2) * rng.normal(0, sd_run, s.trials)
    noise = np.empty(shape)
    noise[..., 0] = rng.normal(0, sd_step, shape[:3])
    for k in range(1, s.steps):
        innovation = rng.normal(0, sd_step, shape[:3])
        noise[..., k] = s.step_phi * noise[..., k - 1] + np.sqrt(1 - s.step_phi**2) * innovation
    steps = 1.0 + offsets[..., None, None] + noise
    steps *= (
        1 + (rng.random(shape[:3]) < s.repeat_outlier_prob)[..., None] * rng.uniform(0.1, 0.4, shape[:3])[..., None]
    )
    steps *= (
        1
        + (rng.random(shape[:2]) < s.run_outlier_prob)[..., None, None]
        * rng.uniform(0.1, 0.4, shape[:2])[..., None, None]
    )
    steps *= np.where(rng.random(shape) < s.step_spike_prob, rng.uniform(1.5, 3.0, shape), 1.0)
    return steps


def run_values(steps: np.ndarray) -> np.ndarray:
    """(trials, runs): median over repeats of the median over steps, as `history_input` computes it."""
    return np.median(np.median(steps, axis=-1), axis=-1)


def _statistics(history: np.ndarray, candidate: np.ndarray, s: SimulationSettings) -> dict[str, np.ndarray]:
    """Per trial: (a)'s decision, and the relative excess that (b) and (c) compare with their thresholds."""
    gate = s.check.gates["step_time_s"]
    j = judge(history[:, -s.check.window :], candidate, direction="lower")
    ref = history[:, -20:].mean(axis=1)
    band_half = np.maximum(s.band_rel * np.abs(ref), s.band_abs_floor)
    return {
        # The level of one cell's test when the night's `cells` cells are judged together (CheckSettings.alpha).
        "check": classify(j, threshold=gate.threshold, alpha=s.check.test_alpha(s.cells)),
        "last_run": candidate / history[:, -1] - 1,
        # (c) flags when candidate - ref > band_half; as a relative excess so one threshold scales it.
        "band": (candidate - ref) / np.abs(ref),
        "band_default": candidate - ref > band_half,
    }


def _matched_threshold(stat: np.ndarray, power: float) -> float:
    """Largest threshold t with mean(stat > t) >= power."""
    return float(np.quantile(stat, 1 - power, method="lower")) - 1e-12


def run_simulation(s: SimulationSettings) -> SimulationResult:
    rng = np.random.default_rng(s.seed)
    cells: dict[tuple[float, float], dict[str, np.ndarray]] = {}
    for cv in s.cvs:
        steps = simulate_steps(rng, s, cv)
        history = run_values(steps[:, :-1])
        for delta in s.regressions:
            candidate = run_values(steps[:, -1:] * (1 + delta))[:, 0]
            cells[(cv, delta)] = _statistics(history, candidate, s)
    design = cells[(s.design_cv, s.design_regression)]
    power = float(design["check"].mean())
    lr_thr = _matched_threshold(design["last_run"], power)
    band_thr = _matched_threshold(design["band"], power)
    rows = [
        SimulationRow(
            cv=cv,
            regression=delta,
            check=float(c["check"].mean()),
            last_run=float((c["last_run"] > s.fixed_threshold).mean()),
            band=float(c["band_default"].mean()),
            last_run_matched=float((c["last_run"] > lr_thr).mean()),
            band_matched=float((c["band"] > band_thr).mean()),
        )
        for (cv, delta), c in cells.items()
    ]
    return SimulationResult(
        rows=rows,
        drift_rows=_drift_rows(rng, s),
        night_rows=_night_rows(rng, s),
        # Its own random stream: the tables above do not change with it.
        trust_rows=trust_rows(
            dataclasses.replace(s, repeat_outlier_prob=0, run_outlier_prob=0, step_spike_prob=0), s.night_cvs
        ),
        last_run_matched_threshold=lr_thr,
        band_matched_threshold=band_thr,
        settings=s,
    )


_NIGHTS_PER_CHUNK = 250


def _night_rows(rng: np.random.Generator, s: SimulationSettings) -> list[NightRow]:
    """Nights of `cells` cells: false alarms per cell and per night, and detection of a regression in one cell, on
    the noise model with its outliers and without them (steps and runs only), with independent and with correlated
    runs."""
    rows = []
    for run_phi in s.night_run_phis:
        for outliers in (True, False):
            settings = dataclasses.replace(s, run_phi=run_phi)
            if not outliers:
                settings = dataclasses.replace(settings, repeat_outlier_prob=0, run_outlier_prob=0, step_spike_prob=0)
            rows += [_night_row(rng, settings, cv, outliers) for cv in s.night_cvs]
    return rows


def _night_row(rng: np.random.Generator, settings: SimulationSettings, cv: float, outliers: bool) -> NightRow:
    same, slower = [], []
    for first in range(0, settings.nights, _NIGHTS_PER_CHUNK):  # chunks keep the step arrays at ~100 MB
        chunk = dataclasses.replace(settings, trials=min(_NIGHTS_PER_CHUNK, settings.nights - first) * settings.cells)
        steps = simulate_steps(rng, chunk, cv)
        history = run_values(steps[:, :-1])
        same.append(_statistics(history, run_values(steps[:, -1:])[:, 0], chunk)["check"])
        regressed = run_values(steps[:, -1:] * (1 + settings.design_regression))[:, 0]
        slower.append(_statistics(history, regressed, chunk)["check"])
    alarms, detected = np.concatenate(same), np.concatenate(slower)
    return NightRow(
        cv=cv,
        outliers=outliers,
        run_phi=settings.run_phi,
        false_alarms_per_cell=float(alarms.mean()),
        false_alarms_per_night=float(alarms.reshape(settings.nights, settings.cells).any(axis=1).mean()),
        detection=float(detected.mean()),
    )


@dataclass(frozen=True, kw_only=True)
class TrustRow:
    """Unchanged nights whose history was built night by night as `record` builds it (auto trust)."""

    cv: float
    every_run_trusted: float
    lone_flag_restored: float
    """`record` now: a cell is trusted unless the night's check flags it; a lone flagged run is trusted again when
    the next run of its series passes (the run before it passed too)."""
    flagged_kept_out: float
    """Flagged runs kept out for good, at the night's level (`record` before the lone-flag rule)."""
    trust_at_full_level: float
    """Each cell judged alone at the whole night's level and flagged runs kept out (`record` before that)."""


def trust_rows(s: SimulationSettings, cvs: tuple[float, ...]) -> list[TrustRow]:
    """Per-night false alarms of an unchanged night after `history` nights recorded with auto trust on top of
    `window` runs trusted by hand; each night's cells are judged against their own last `window` trusted runs."""
    rng = np.random.default_rng(s.seed)
    night_level, full_level = s.check.test_alpha(s.cells), s.check.alpha
    rows = []
    for cv in cvs:
        rates = [[], [], [], []]
        for first in range(0, s.nights, _NIGHTS_PER_CHUNK):
            nights = min(_NIGHTS_PER_CHUNK, s.nights - first)
            chunk = dataclasses.replace(s, trials=nights * s.cells, history=s.check.window + s.history)
            values = run_values(simulate_steps(rng, chunk, cv))
            baselines = [
                values[:, -1 - s.check.window : -1],
                _auto_trusted(values, s, night_level, restore_lone=True),
                _auto_trusted(values, s, night_level, restore_lone=False),
                _auto_trusted(values, s, full_level, restore_lone=False),
            ]
            for out, baseline in zip(rates, baselines, strict=True):
                alarms = _alarms(baseline, values[:, -1], s)
                out.append(alarms.reshape(nights, s.cells).any(axis=1))
        every, lone, kept_out, full = (float(np.concatenate(r).mean()) for r in rates)
        rows.append(
            TrustRow(
                cv=cv,
                every_run_trusted=every,
                lone_flag_restored=lone,
                flagged_kept_out=kept_out,
                trust_at_full_level=full,
            )
        )
    return rows


def _alarms(baseline: np.ndarray, candidate: np.ndarray, s: SimulationSettings, alpha: float | None = None):
    gate = s.check.gates["step_time_s"]
    j = judge(baseline, candidate, direction="lower")
    return classify(j, threshold=gate.threshold, alpha=s.check.test_alpha(s.cells) if alpha is None else alpha)


def _last_trusted(values: np.ndarray, trusted: np.ndarray, before: int, window: int) -> np.ndarray:
    """(trials, window): the last `window` trusted values before position `before` (oldest first)."""
    positions = np.sort(np.where(trusted[:, :before], np.arange(before), -1), axis=1)[:, -window:]
    return np.take_along_axis(values, positions, axis=1)


def _auto_trusted(values: np.ndarray, s: SimulationSettings, trust_alpha: float, *, restore_lone: bool) -> np.ndarray:
    """The last `window` trusted runs before the final night, the nights after the hand-trusted first `window`
    recorded one by one: trusted unless flagged at `trust_alpha`; with `restore_lone`, a flagged night between two
    nights that passed is trusted again when the second of them is recorded."""
    window, nights = s.check.window, values.shape[1]
    trusted = np.zeros(values.shape, dtype=bool)
    trusted[:, :window] = True
    flagged = np.zeros(values.shape, dtype=bool)
    for t in range(window, nights - 1):
        flagged[:, t] = _alarms(_last_trusted(values, trusted, t, window), values[:, t], s, trust_alpha)
        trusted[:, t] = ~flagged[:, t]
        if restore_lone:
            trusted[:, t - 1] |= flagged[:, t - 1] & ~flagged[:, t] & ~flagged[:, t - 2]
    return _last_trusted(values, trusted, nights - 1, window)


def _drift_rows(rng: np.random.Generator, s: SimulationSettings) -> list[DriftRow]:
    """A long series drifting slowly: the rolling baseline follows it, the anchor of the drift guard does not."""
    long = dataclasses.replace(s, trials=max(s.trials // 2, 100), history=s.drift_history)
    gate, c = s.check.gates["step_time_s"], s.check
    rows = []
    for cv in s.drift_cvs:
        steps = simulate_steps(rng, long, cv)
        for drift in s.drift_per_run:
            values = run_values(steps * (1 + drift * np.arange(long.history + 1))[None, :, None, None])
            history, candidate = values[:, :-1], values[:, -1]
            recent = judge(history[:, -c.window :], candidate, direction="lower")
            anchor_runs = history[:, -(c.drift_horizon + c.anchor_window) : -c.drift_horizon]
            anchor = judge(anchor_runs, candidate, direction="lower")
            level = c.test_alpha(s.cells, tests_per_cell=2)
            rolling = classify(recent, threshold=gate.threshold, alpha=level)
            anchored = classify(anchor, threshold=gate.threshold, alpha=level)
            ref = history[:, -20:].mean(axis=1)
            rows.append(
                DriftRow(
                    cv=cv,
                    drift=drift,
                    check=float((rolling | anchored).mean()),
                    check_without_anchor=float(rolling.mean()),
                    last_run=float((candidate / history[:, -1] - 1 > s.fixed_threshold).mean()),
                    band=float((candidate - ref > np.maximum(s.band_rel * np.abs(ref), s.band_abs_floor)).mean()),
                )
            )
    return rows


def render_table(result: SimulationResult) -> str:
    """Markdown: false alarms (regression 0) and detection (regression > 0) of each method on the same series."""
    s = result.settings
    gate = s.check.gates["step_time_s"]
    lines = [
        f"{s.trials} trials per row; history {s.history} runs; {s.repeats} repeats x {s.steps} steps per run; "
        f"between-run share of the variance {s.between_run_share}; seed {s.seed}.",
        f"(a) threshold {gate.threshold:.0%}, alpha {s.check.alpha} per night of {s.cells} cells "
        f"({s.check.test_alpha(s.cells):.2%} per cell), window {s.check.window}. "
        f"(b) last run +{s.fixed_threshold:.0%}. (c) band rel {s.band_rel:.0%}, abs floor {s.band_abs_floor}. "
        f"Matched: one threshold per method, set so that its detection at CV {s.design_cv:.0%} of a "
        f"{s.design_regression:.0%} regression equals (a)'s: (b) {result.last_run_matched_threshold:+.2%}, "
        f"(c) {result.band_matched_threshold:+.2%}.",
        "",
    ]
    header = ["CV", "injected regression", "rate", "(a) this check", "(b) last run +5%", "(c) Miles band 5%"]
    rows = [
        [f"{r.cv:.0%}", f"{r.regression:.0%}", "false alarms" if r.regression == 0 else "detection"]
        + [f"{x:.1%}" for x in (r.check, r.last_run, r.band, r.last_run_matched, r.band_matched)]
        for r in result.rows
    ]
    lines.append(markdown_table([*header, "(b) matched", "(c) matched"], rows))
    lines += [
        "",
        f"Slow drift: run t is (1 + drift x t) slower, {s.drift_history} trusted runs then the candidate; "
        f"{max(s.trials // 2, 100)} trials per row; (a) with its drift guard (anchor: {s.check.anchor_window} runs "
        f"ending {s.check.drift_horizon} runs back) and with the rolling baseline only.",
        "",
    ]
    header = ["CV", "drift per run", "rate", "(a) this check", "(a) rolling baseline only", "(b) last run +5%"]
    rows = [
        [f"{r.cv:.0%}", f"{r.drift:.1%}", "false alarms" if r.drift == 0 else "detection"]
        + [f"{x:.1%}" for x in (r.check, r.check_without_anchor, r.last_run, r.band)]
        for r in result.drift_rows
    ]
    lines.append(markdown_table([*header, "(c) Miles band 5%"], rows))
    lines += _night_table(result)
    lines += _trust_table(result)
    return "\n".join(lines) + "\n"


def _night_table(result: SimulationResult) -> list[str]:
    s = result.settings
    intro = (
        f"{s.nights} nights of {s.cells} cells (independent series), (a) at its per-night level {s.check.alpha} "
        f"split over the cells (per cell {s.check.test_alpha(s.cells):.2%}); step time and its throughputs are one "
        f"family per cell, so a cell alarms at most once; detection: a {s.design_regression:.0%} step-time "
        "regression in one cell. Outliers: the slow repeats, runs and steps above; without: step and run noise only. "
        "Runs: independent (offset AR 0) or drifting together (offset AR > 0 across consecutive runs)."
    )
    header = ["CV", "outliers", "run offsets AR", "false alarms per cell", "false alarms per night", "detection"]
    rows = [
        [f"{r.cv:.0%}", "yes" if r.outliers else "no", f"{r.run_phi:g}", f"{r.false_alarms_per_cell:.2%}"]
        + [f"{r.false_alarms_per_night:.1%}", f"{r.detection:.1%}"]
        for r in result.night_rows
    ]
    return ["", intro, "", markdown_table(header, rows)]


def _trust_table(result: SimulationResult) -> list[str]:
    s = result.settings
    intro = (
        f"Auto trust, as `record` builds the history: {s.check.window} runs trusted by hand, then {s.history} nights "
        f"of {s.cells} cells recorded one by one, then an unchanged night judged; no outliers, offsets AR "
        f"{s.run_phi:g}, {s.nights} nights per row, seed {s.seed}; the share of unchanged nights with any alarm."
    )
    header = ["CV", "every run trusted", "`record` now (a lone flagged run trusted again)"]
    header += ["flagged runs kept out (before)", f"each cell alone at {s.check.alpha:.1%}, kept out (before that)"]
    rows = [
        [f"{r.cv:.0%}"]
        + [f"{x:.1%}" for x in (r.every_run_trusted, r.lone_flag_restored, r.flagged_kept_out, r.trust_at_full_level)]
        for r in result.trust_rows
    ]
    return ["", intro, "", markdown_table(header, rows)]
