"""`run.py report DIR`: steady state, summaries with CIs, the candidate/reference comparison (e.g. Miles/VERL) and
plots for one run folder: analysis/ makes the typed document, report/ renders it.

- Reads DIR/manifest.json, each complete repeat's metrics.jsonl and environment.json, DIR/plan.json, DIR/parity.json.
- Writes DIR/report.md, DIR/report.json, DIR/report.html and DIR/plots/*.svg; prints the Verdict
  section of report.md and the paths written (the whole report, with every environment record, is in the files).
- Exit status: 0 when the report was written; 1 when DIR has no complete cell; 2 when DIR is not a run folder
  (no or unreadable manifest.json), an option is out of range, another harness or report holds DIR/run.lock, or a
  file cannot be written (a full disk: the path and the fix are printed, the previous report stays whole).
- `--full-loop DIR2`: a train-only run's report shows the training-phase ratios of the full-loop run in DIR2 (its
  report.json) beside its own (analysis/train_only.py).
- Holds DIR/run.lock while it writes, as a run does: two writers of one report never mix their files.
- Writes the report whole or not at all (report/write.py); SIGINT or SIGTERM while it is written leaves the previous
  report whole and no tmp file (exit 130).

Caveats:
- Refused comparisons (parity, hardware) are reported, not errors: the exit status stays 0.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from scripts.benchmark.analysis.settings import AnalysisSettings
    from scripts.benchmark.contracts.report import ReportDocument


def analyse_and_write(
    run_dir: Path, settings: AnalysisSettings | None = None, *, calibration: bool = True, full_loop: Path | None = None
) -> tuple[ReportDocument, dict[str, Path]]:
    """Analyse a run folder (analysis/) and render it (report/); returns the document and the written files. The
    committed calibration JSON (calibration/results/) gives the measured ceilings unless `calibration` is off."""
    from scripts.benchmark.analysis.document import analyse_run_folder
    from scripts.benchmark.report.write import write_report

    readers: dict[str, Any] = {}
    if calibration:
        from scripts.benchmark.calibration.results import (
            measured_peak_tflops,
            roofline_spread,
            roofline_tflops,
            weight_sync_floor_s,
        )

        readers = {
            "measured_peak_tflops": measured_peak_tflops,
            "roofline_tflops": roofline_tflops,
            "weight_sync_floor_s": weight_sync_floor_s,
            "roofline_spread": roofline_spread,
        }
    note = None if calibration else "disabled by --no-calibration"
    doc = analyse_run_folder(run_dir, settings, calibration_note=note, full_loop=full_loop, **readers)
    return doc, write_report(doc, run_dir)


def verdict_markdown(doc: ReportDocument) -> str:
    """The headline, one line per pair: what `run.py report` and the end of every run print."""
    from scripts.benchmark.report.headline import headline_markdown

    return headline_markdown(doc)


def report_impl(
    run_dir: Path, settings: AnalysisSettings, *, calibration: bool = True, full_loop: Path | None = None
) -> tuple[ReportDocument, dict[str, Path]]:
    """Analyse and write; returns the report document and the written files."""
    return analyse_and_write(run_dir, settings, calibration=calibration, full_loop=full_loop)


class _Interrupted(BaseException):
    """SIGINT or SIGTERM while the report is written."""


def _interrupt(signum: int, _frame: Any) -> None:
    import signal

    raise _Interrupted(signal.Signals(signum).name)


@contextmanager
def _stopped_cleanly() -> Iterator[None]:
    """SIGTERM (and SIGINT) raise instead of ending the process where it stands, so that the staged report and the
    lock are removed as on any error: the previous report stays whole and no tmp file is left."""
    import signal

    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def _run_folder_lock(run_dir: Path) -> Iterator[None]:
    """The run folder's lock for the writing: a second report, or a live run, is refused (exit 2), never mixed in."""
    from scripts.benchmark.errors import UserError
    from scripts.benchmark.runner.folder_lock import acquire_run_lock, release_run_lock
    from scripts.benchmark.runner.options import RunError

    try:
        lock = acquire_run_lock(run_dir)
    except RunError as exc:
        raise UserError(str(exc)) from exc
    try:
        yield
    finally:
        release_run_lock(lock)


def _plan_of(run_dir: Path) -> dict | None:
    """The run folder's plan.json as data (None when absent or unreadable: the analysis names that itself)."""
    try:
        plan = json.loads((run_dir / "plan.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return plan if isinstance(plan, dict) else None


def register(app: typer.Typer) -> None:
    @app.command("report")
    def report(
        run_dir: Annotated[Path, typer.Argument(help="run folder written by the runner (holds manifest.json)")],
        reps: Annotated[int, typer.Option(help="bootstrap resamples per comparison of one-repeat cells")] = 4000,
        confidence: Annotated[float, typer.Option(help="confidence level of every interval")] = 0.95,
        seed: Annotated[int, typer.Option(help="bootstrap seed (fixed, so a report is reproducible)")] = 0,
        family_wise: Annotated[
            bool,
            typer.Option(
                "--family-wise/--per-metric",
                help="hold the step-time family (step time and throughputs) at the joint confidence level (default)",
            ),
        ] = True,
        calibration: Annotated[
            bool,
            typer.Option(
                "--calibration/--no-calibration", help="use the committed calibration data (measured peak, roofline)"
            ),
        ] = True,
        quiet: Annotated[
            bool, typer.Option("--quiet/--verbose", help="print only the paths written, or also the verdict")
        ] = False,
        full_loop: Annotated[
            Path | None,
            typer.Option(help="train-only runs: a full-loop run folder whose training-phase ratios are shown beside"),
        ] = None,
    ) -> None:
        """Analyse a run folder and write report.md, report.json, report.html and plots into it.

        Example:

        \b
            run.py report bench-out/qwen3-1.7b-base
        """
        from scripts.benchmark.contracts.manifest import read_manifest_json
        from scripts.benchmark.errors import UserError, require

        if not 0 < confidence < 1:
            raise UserError(f"--confidence must be in (0, 1), got {confidence}")
        if reps < 100:
            raise UserError(f"--reps must be at least 100 for a percentile interval, got {reps}")
        require("scipy")
        manifest = run_dir / "manifest.json"
        if not manifest.is_file():
            raise UserError(f"{manifest} not found: {run_dir} is not a benchmark run folder")
        try:
            read_manifest_json(manifest)
        except ValueError as exc:
            raise UserError(f"{manifest} cannot be read: {str(exc).strip().splitlines()[0]}") from exc
        from scripts.benchmark.analysis.settings import AnalysisSettings

        settings = AnalysisSettings(confidence=confidence, reps=reps, seed=seed, family_wise=family_wise)
        from scripts.benchmark.analysis.step_columns import DamagedFile
        from scripts.benchmark.analysis.train_only import full_loop_comparisons

        try:
            full_loop_comparisons(full_loop, _plan_of(run_dir))
        except ValueError as exc:
            raise UserError(str(exc)) from exc
        try:
            with _stopped_cleanly(), _run_folder_lock(run_dir):
                doc, written = report_impl(run_dir, settings, calibration=calibration, full_loop=full_loop)
        except DamagedFile as exc:
            raise UserError(str(exc)) from exc
        except _Interrupted as exc:
            typer.echo(
                f"report: interrupted by {exc}: nothing written, the previous report (if any) is whole", err=True
            )
            raise typer.Exit(130) from None
        if not quiet:
            typer.echo(verdict_markdown(doc))
        typer.echo("wrote:\n" + "\n".join(f"  {p}" for p in written.values()))
        if not doc.cells:
            typer.echo(f"error: no complete cell in {run_dir} (see report.md, Incomplete cells)", err=True)
            raise typer.Exit(1)
