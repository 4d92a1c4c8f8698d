"""The report's sections, from the typed report document (contracts/report.py) to text blocks, in reading order:
the headline cards (headline.py), the candidate/reference comparison (e.g. Miles vs VERL, printed with the sides'
labels), a train-only run's training-step section (train_only.py), per-cell summaries, steady state, calibration,
incomplete cells, plots, context. Nothing is decided here: every verdict is the document's.

A null number is printed "n/a", never 0. Fractions (MFU, wait ratio) are printed as percentages.
"""

from __future__ import annotations

import json
from typing import Any

from scripts.benchmark.contracts.report import (
    CalibrationRowModel,
    CellModel,
    ComparisonModel,
    Practical,
    ReportDocument,
)
from scripts.benchmark.report.headline import headline_blocks, headline_markdown, labels
from scripts.benchmark.report.learning import learning_blocks
from scripts.benchmark.report.palette import verdict_label
from scripts.benchmark.report.render import Code, Details, Heading, Image, Paragraph, Table
from scripts.benchmark.report.train_only import train_only_blocks

from miles.utils.bench_metrics import REPORT_METRICS


def format_number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if unit == "fraction":
        return f"{value * 100:.1f}%"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.1f}"
    if magnitude >= 10:
        return f"{value:.2f}"
    return f"{value:.3g}"


def format_interval(low: float | None, high: float | None, unit: str = "") -> str:
    if low is None or high is None:
        return "n/a"
    return f"[{format_number(low, unit)}, {format_number(high, unit)}]"


def _ordered_metrics(names: list[str]) -> list[str]:
    known = [m for m in REPORT_METRICS if m in names]
    return known + sorted(m for m in names if m not in known)


def format_ratio_interval(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"[{low:.3f}, {high:.3f}]"


def format_gap(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f}"


def _better_side(row: ComparisonModel, candidate: str) -> str:
    """The document's practical verdict on one ratio: <candidate> better / worse beyond the threshold, no practical
    difference, or inconclusive."""
    if row.ratio is None or (row.verdict is Practical.NOT_COMPARED and row.method.startswith("not compared: ")):
        return "n/a: " + row.method.removeprefix("not compared: ")
    if row.verdict is Practical.NOT_COMPARED:
        return "n/a: too few steps for an interval"
    return verdict_label(row.verdict, candidate)


def _headline_section(doc: ReportDocument) -> list[Any]:
    return [Heading(2, "At a glance"), *headline_blocks(doc)]


def _comparison_row(c: ComparisonModel, candidate: str) -> list[str]:
    return [
        f"`{c.metric}`",
        c.unit,
        c.direction,
        format_number(c.candidate, c.unit),
        format_number(c.reference, c.unit),
        "n/a" if c.ratio is None else f"{c.ratio:.3f}",
        format_ratio_interval(c.ci_low, c.ci_high),
        "n/a" if c.p_value is None else f"{c.p_value:.3f}",
        f"{c.threshold * 100:g}%",
        _better_side(c, candidate),
    ]


def _attribution_table(doc: ReportDocument, backend: str, layout: str, pct: str) -> Table:
    cand, ref = labels(doc)
    rows = [a for a in doc.attribution if (a.backend, a.layout) == (backend, layout)]
    step = next((a for a in rows if a.component == "step_time_s"), None)
    gap_significant = step is not None and step.ci_low is not None and not step.ci_low <= 0 <= step.ci_high
    lines = []
    for a in rows:
        share = "n/a" if a.share_of_gap is None or not gap_significant else f"{a.share_of_gap * 100:.0f}%"
        gap_ci = "n/a" if a.ci_low is None else f"[{format_gap(a.ci_low)}, {format_gap(a.ci_high)}]"
        lines.append(
            [
                f"`{a.component}`",
                format_number(a.candidate_s, "s"),
                format_number(a.reference_s, "s"),
                format_gap(a.gap_s),
                gap_ci,
                share,
                a.note,
            ]
        )
    header = [
        "component",
        f"{cand} mean (s)",
        f"{ref} mean (s)",
        f"gap {cand}-{ref} (s)",
        f"{pct} CI",
        "share",
        "note",
    ]
    return Table(header, lines)


def _comparison_blocks(doc: ReportDocument) -> list[Any]:
    blocks: list[Any] = []
    pct = f"{doc.confidence:.0%}"
    cand, ref = labels(doc)
    for backend, layout in doc.pairs():
        rows = {c.metric: c for c in doc.comparisons if (c.backend, c.layout) == (backend, layout)}
        blocks.append(Heading(2, f"{cand} vs {ref}: {backend} / {layout}"))
        table = [_comparison_row(rows[metric], cand) for metric in _ordered_metrics(list(rows))]
        header = ["metric", "unit", "better", cand, ref, f"{cand}/{ref}", f"{pct} CI", "p", "threshold", "verdict"]
        blocks.append(Table(header, table))
        blocks.append(Heading(3, f"Where the step-time gap goes ({backend} / {layout})"))
        blocks.append(_attribution_table(doc, backend, layout, pct))
    compared = [c for c in doc.comparisons if c.ratio is not None and not c.method.startswith("not compared")]
    if compared:
        example = compared[0].method
        blocks.append(
            Paragraph(
                f"Method: {example.split('; ', 1)[-1]}. Ratios are of means (harmonic means for rates); "
                "shares of the gap are shown only when the step-time gap itself is significant."
            )
        )
    return blocks


def _cell_blocks(doc: ReportDocument) -> list[Any]:
    cells = doc.cells
    if not cells:
        return [Heading(2, "Per-cell summaries"), Paragraph("No complete cell in this run.")]
    names = _ordered_metrics(list(cells[0].summaries))
    rows = []
    for name in names:
        unit = cells[0].summaries[name].unit
        row = [f"`{name}`", unit]
        for cell in cells:
            s = cell.summaries[name]
            if s.median is None:
                row.append("n/a")
            elif s.ci_low is None:
                row.append(f"{format_number(s.median, unit)} (no CI)")
            else:
                row.append(f"{format_number(s.median, unit)} {format_interval(s.ci_low, s.ci_high, unit)}")
        rows.append(row)
    blocks: list[Any] = [
        Heading(2, "Per-cell summaries"),
        Paragraph(
            "Median of the steady-state steps with its confidence interval; n/a = not reported by the framework."
        ),
        Table(["metric", "unit", *[f"`{c.id}`" for c in cells]], rows),
        *_generation_blocks(cells),
        Heading(3, "Response lengths"),
        Table(
            ["cell", "mean (tokens)", "std of step means", "median per-step min", "median per-step max"],
            [
                [
                    f"`{c.id}`",
                    *[
                        format_number(getattr(c.response_length, k))
                        for k in ("mean", "std_of_step_means", "median_step_min", "median_step_max")
                    ],
                ]
                for c in cells
            ],
        ),
    ]
    return blocks


def _median(cell: CellModel, name: str) -> float | None:
    summary = cell.summaries.get(name)
    return summary.median if summary is not None else None


def _generation_blocks(cells: list[CellModel]) -> list[Any]:
    """Rollout-side generation, the trainer's wait for it, and the generation hidden behind training, per cell."""
    names = ("phases_s.generate", "phases_s.rollout_wait", "overlap_s")
    rows = [[f"`{c.id}`", *[format_number(_median(c, n), "s") for n in names]] for c in cells]
    return [
        Heading(3, "Generation, trainer wait and overlap"),
        Paragraph(
            "Medians. Generation is measured on the rollout side; the wait is the trainer's; overlap = generation "
            "the trainer did not wait for. n/a generation: the framework logs no rollout-side time in this layout "
            "(VERL separate_async), so its rollout throughput is n/a too."
        ),
        Table(["cell", "generation (s)", "trainer wait (s)", "overlap (s)"], rows),
    ]


def _steady_blocks(doc: ReportDocument) -> list[Any]:
    rows = []
    for cell in doc.cells:
        for r in cell.steady_state.repeats:
            rows.append(
                [
                    f"`{cell.id}`",
                    str(r.repeat),
                    str(r.steps),
                    "n/a" if r.start_step is None else str(r.start_step),
                    str(r.steady_steps),
                    "yes" if r.reached else "**never reached**",
                    r.method,
                ]
            )
    methods = [
        [f"`{c.id}`", c.hardware or "n/a", c.interval_policy, c.summaries["step_time_s"].method] for c in doc.cells
    ]
    return [
        Heading(2, "Steady state"),
        Table(["cell", "repeat", "steps", "steady from step", "steady steps", "reached", "rule"], rows),
        Table(["cell", "hardware", "intervals", "summary method (step time)"], methods),
    ]


def _fraction_with_spread(row: CalibrationRowModel) -> str:
    """The roofline fraction, with the fraction at the roofline's p90 and p10 and its run-to-run spread."""
    low_high, runs = row.fraction_of_roofline_range, row.roofline_run_to_run_pct
    text = format_number(row.fraction_of_roofline, "fraction")
    if low_high:
        text += f" ({format_number(low_high[0], 'fraction')} - {format_number(low_high[1], 'fraction')}"
        text += f"; {runs:.1f}%)" if runs is not None else ")"
    return text


def _calibration_blocks(doc: ReportDocument) -> list[Any]:
    blocks: list[Any] = [Heading(2, "Calibration: measured peak and roofline")]
    calibration = doc.calibration
    if not calibration:
        note = doc.calibration_note or "no calibration data for this run"
        return blocks + [Paragraph(f"Not shown: {note}. MFU above is against the datasheet peak.")]
    rows = [
        [
            f"`{r.id}`",
            r.device or "n/a",
            format_number(r.train_tflops_per_gpu),
            format_number(r.mfu_datasheet, "fraction"),
            format_number(r.measured_peak_tflops),
            format_number(r.mfu_measured_peak, "fraction"),
            format_number(r.roofline_tflops),
            _fraction_with_spread(r),
        ]
        for r in calibration
    ]
    header = [
        "cell",
        "device",
        "train TFLOP/s/GPU",
        "MFU (datasheet)",
        "measured peak TFLOP/s",
        "MFU (measured peak)",
        "roofline TFLOP/s",
        "of roofline (at roofline p90 - p10; runs apart)",
    ]
    blocks.append(Table(header, rows))
    return blocks + _weight_sync_blocks(calibration)


def _weight_sync_blocks(calibration: list[CalibrationRowModel]) -> list[Any]:
    """Each cell's weight sync against the floor the calibration measured for its path."""
    rows = [
        [
            f"`{r.id}`",
            format_number(r.weight_sync_s),
            format_number(r.weight_sync_floor_s),
            r.weight_sync_floor_path or "n/a",
            format_number(r.weight_sync_over_floor),
        ]
        for r in calibration
    ]
    header = ["cell", "weight sync (s, median)", "floor (s)", "floor path", "x floor"]
    blocks: list[Any] = [Heading(3, "Weight sync against its floor"), Table(header, rows)]
    blocks.append(
        Paragraph(
            "The floor is the time to move every bf16 weight once at the bandwidth measured on this GPU model: "
            "`d2d_copy` (colocated: one on-GPU copy, read + write) or `broadcast` (disaggregated: one NCCL broadcast, "
            "which needs a multi-GPU calibration; n/a until one is committed)."
        )
    )
    uncalibrated = sorted({r.device for r in calibration if r.device and r.measured_peak_tflops is None})
    if uncalibrated:
        blocks.append(
            Paragraph(
                "n/a: no committed calibration for "
                + ", ".join(uncalibrated)
                + " (scripts/benchmark/calibration/results/; "
                "run scripts/benchmark/calibrate.py on that GPU and commit its JSON)."
            )
        )
    return blocks


def _packages(packages: Any) -> str:
    """'torch 2.7.1, miles 0.1 (abc12345)' from {name: version} or the runner's {name: {version, commit}}."""
    if not isinstance(packages, dict) or not packages:
        return "n/a"
    parts = []
    for name, entry in sorted(packages.items()):
        if isinstance(entry, dict):
            if entry.get("version") is None and entry.get("commit") is None:
                continue
            commit = f" ({entry['commit'][:8]})" if entry.get("commit") else ""
            parts.append(f"{name} {entry.get('version') or '?'}{commit}")
        else:
            parts.append(f"{name} {entry}")
    return ", ".join(parts) or "n/a"


def _compact(value: Any) -> str:
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_compact(v)}" for k, v in value.items())
    return json.dumps(value) if not isinstance(value, str) else value


def _parity_blocks(doc: ReportDocument) -> list[Any]:
    """The parity proof, one collapsible table per pair; values named by the sides (e.g. miles: 1e-06; verl: 1e-06)."""
    blocks: list[Any] = [Heading(2, "Parity table")]
    cand, ref = labels(doc)
    if doc.parity is None:
        if doc.parity_error:
            blocks.append(Paragraph(f"parity.json could not be read: {doc.parity_error}"))
        else:
            blocks.append(
                Paragraph(f"No parity.json in this run folder: {cand} and {ref} cells are not proven matched.")
            )
        return blocks
    sides = doc.side_pair()
    names = (sides.candidate.name, sides.reference.name if sides.reference is not None else "reference")
    for pair in doc.parity.pairs:
        statuses = [r.status for r in pair.rows]
        counts = ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
        summary = f"{pair.candidate_cell} vs {pair.reference_cell}: {len(statuses)} knobs ({counts})"
        rows = [
            [f"`{r.knob}`", r.status, _compact(dict(zip(names, (r.candidate, r.reference), strict=True))), r.note]
            for r in pair.rows
        ]
        inner: list[Any] = [Paragraph(f"**Parity error**: {pair.error}")] if pair.error else []
        blocks.append(Details(summary, inner + [Table(["knob", "status", "values", "note"], rows)]))
    return blocks


def _context_blocks(doc: ReportDocument, *, environment_json: bool) -> list[Any]:
    blocks: list[Any] = _parity_blocks(doc)
    blocks.append(Heading(2, "Environments"))
    env_rows = []
    for cell in doc.cells:
        env = cell.environment
        cuda = env.get("cuda_runtime") or env.get("cuda") or env.get("cuda_driver")
        env_rows.append(
            [
                f"`{cell.id}`",
                cell.hardware or "n/a",
                str(env.get("driver") or "n/a"),
                str(cuda or "n/a"),
                str(env.get("nccl") or "n/a"),
                _packages(env.get("packages")),
                str(env.get("hostname") or "n/a"),
            ]
        )
    blocks.append(Table(["cell", "hardware", "driver", "CUDA", "NCCL", "packages", "host"], env_rows))
    if environment_json:
        for cell in doc.cells:
            blocks.append(Details(f"environment.json of {cell.id}", [Code(json.dumps(cell.environment, indent=1))]))
    else:
        blocks.append(Paragraph("Full environment records: report.json and report.html (too long for this page)."))
    return blocks


def _lag_text(lag: dict[str, Any] | None) -> str:
    if lag is None:
        return "not logged"
    return f"mean {format_number(lag.get('mean'))}, max {format_number(lag.get('max'))} ({lag.get('steps')} steps)"


def _policy_lag_blocks(doc: ReportDocument) -> list[Any]:
    """Each pair's policy lag as the runs logged it, against the bound each launch set; flagged rows say why."""
    if not doc.policy_lag:
        return []
    rows = []
    for row in doc.policy_lag:
        for side, lag in row.observed.items():
            bound = row.bound.get(side)
            flags = [f.split(":", 1)[1] for f in row.flags if f.startswith(f"{side}:")]
            rows.append([f"{row.backend}/{row.layout}", side, _lag_text(lag), str(bound), ", ".join(flags)])
        if "observed_lag_differs" in row.flags:
            rows.append(
                [f"{row.backend}/{row.layout}", "both", "the observed maxima differ", "", "observed_lag_differs"]
            )
    note = "Weight versions between a trajectory's oldest weights and the policy, as each framework logs them."
    return [Heading(2, "Policy lag"), Paragraph(note), Table(["pair", "side", "observed", "bound", "flags"], rows)]


def _step_flag_blocks(doc: ReportDocument) -> list[Any]:
    """Every cell's step flags, defects first: what a number of that cell rests on (metrics.md lists each flag)."""
    rows = [
        [f"`{cell.id}`", f"`{f.flag}`", "defect" if f.defect else "note", f"{f.steps} of {f.of_steps}"]
        + [", ".join(f"`{example}`" for example in f.examples)]
        for cell in doc.cells
        for f in sorted(cell.step_flags, key=lambda f: not f.defect)
    ]
    if not rows:
        return []
    note = (
        "Flags the readers put on step records, per cell (every repeat, warm-up included). A defect makes the "
        "step's value doubtful or leaves it out (null): a timer that ran backwards, a step from a given-up attempt, "
        "a missing or non-numeric field, a damaged line; a note says how a healthy run's value is read."
    )
    return [Heading(2, "Step flags"), Paragraph(note), Table(["cell", "flag", "kind", "steps", "as written"], rows)]


def report_title(doc: ReportDocument) -> str:
    cand, ref = labels(doc)
    return f"{cand} vs {ref} throughput report"


def build_blocks(doc: ReportDocument, images: dict[str, str], *, environment_json: bool = True) -> list[Any]:
    """All report sections, in reading order; `images` maps a plot title to its path relative to the report."""
    header = (
        f"Run `{doc.run_dir}`, preset `{doc.preset or 'n/a'}`, spec `{doc.spec_hash or 'n/a'}`, "
        f"generated {doc.generated_at}; {doc.confidence:.0%} confidence intervals."
    )
    blocks: list[Any] = [Heading(1, report_title(doc)), Paragraph(header)]
    blocks += _headline_section(doc)
    blocks += _comparison_blocks(doc)
    blocks += train_only_blocks(doc)
    blocks += learning_blocks(doc, images)
    blocks += _cell_blocks(doc)
    blocks += _steady_blocks(doc)
    blocks += _step_flag_blocks(doc)
    blocks += _policy_lag_blocks(doc)
    blocks += _calibration_blocks(doc)
    if doc.incomplete:
        rows = [[f"`{r.cell_id}`", str(r.repeat), r.state, r.reason or ""] for r in doc.incomplete]
        blocks += [Heading(2, "Incomplete cells"), Table(["cell", "repeat", "state", "reason"], rows)]
    if images:
        blocks.append(Heading(2, "Plots"))
        blocks += [Image(path, alt) for alt, path in images.items()]
    blocks += _context_blocks(doc, environment_json=environment_json)
    return blocks


def verdict_markdown(doc: ReportDocument) -> str:
    """The headline alone, one line per pair: what `run.py report` and the end of every run print."""
    return headline_markdown(doc)
