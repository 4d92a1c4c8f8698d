"""The report at the end of every run: `run.py report DIR` when some cell repeat wrote a step. A report error, or a
signal while it is written, never changes the run's exit status: it is printed and kept in the manifest's warnings."""

from __future__ import annotations

import signal
from typing import Any

from scripts.benchmark.contracts.manifest import Manifest
from scripts.benchmark.errors import missing_module_error
from scripts.benchmark.runner.progress import MatrixProgress


class _ReportInterrupted(BaseException):
    """SIGINT/SIGTERM while the end-of-run report is written: stop it, keep the run's own exit status."""


def _interrupt_report(signum: int, _frame: Any) -> None:
    raise _ReportInterrupted(signal.Signals(signum).name)


def report_after_run(manifest: Manifest, progress: MatrixProgress) -> None:
    """`run.py report DIR` at the end of every run with a step on disk; a failure is logged and kept as a warning."""
    run_dir = manifest.run_dir
    if not any((run_dir / c.metrics).is_file() and (run_dir / c.metrics).stat().st_size for c in manifest.cells):
        progress.message(f"report: not written (no cell repeat wrote a step); run.py report {run_dir} later")
        return
    previous = {sig: signal.signal(sig, _interrupt_report) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        from scripts.benchmark.commands.report import analyse_and_write, verdict_markdown

        doc, written = analyse_and_write(run_dir)
        progress.message(verdict_markdown(doc).rstrip())
        progress.message("report: wrote " + ", ".join(str(path) for path in written.values()))
        return
    except _ReportInterrupted as exc:
        warning = f"report: not written, interrupted by {exc}; run `run.py report {run_dir}`"
    except ModuleNotFoundError as exc:
        error = missing_module_error(exc)
        reason = error.format_message() if error is not None else repr(exc)
        warning = f"report: not written: {reason}; then run `run.py report {run_dir}`"
    except Exception as exc:  # the run's outcome stands whatever the report does
        warning = f"report: failed with {exc!r}; the run itself is recorded as it ended (run.py report {run_dir})"
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    progress.message(warning)
    manifest.warnings.append(warning)
    try:
        manifest.save()
    except OSError as exc:
        progress.message(f"manifest.json: could not record that warning: {exc}")
