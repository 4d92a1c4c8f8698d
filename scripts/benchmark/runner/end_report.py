"""The report at the end of every run: `run.py report DIR` when some cell repeat wrote a step. A report error, or a
signal while it is written, never changes the run's exit status: it is printed and kept in the manifest's warnings.

The runner does not know how a report is made (that is a later stage): the command that runs it hands over an
`EndReport`, which writes the report of a run folder and returns its verdict text and the files written.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.benchmark.contracts.manifest import Manifest
from scripts.benchmark.errors import missing_module_error, os_error_message
from scripts.benchmark.runner.progress import MatrixProgress

EndReport = Callable[[Path], tuple[str, dict[str, Path]]]
"""run folder -> (the verdict text to print, {name: path written})."""


class _ReportInterrupted(BaseException):
    """SIGINT/SIGTERM while the end-of-run report is written: stop it, keep the run's own exit status."""


def _interrupt_report(signum: int, _frame: Any) -> None:
    raise _ReportInterrupted(signal.Signals(signum).name)


def report_after_run(manifest: Manifest, progress: MatrixProgress, write_report: EndReport | None) -> None:
    """`run.py report DIR` at the end of every run with a step on disk; a failure is logged and kept as a warning."""
    run_dir = manifest.run_dir
    if write_report is None:
        progress.message(f"report: not written by this run; run.py report {run_dir}")
        return
    if not any((run_dir / c.metrics).is_file() and (run_dir / c.metrics).stat().st_size for c in manifest.cells):
        progress.message(f"report: not written (no cell repeat wrote a step); run.py report {run_dir} later")
        return
    previous = {sig: signal.signal(sig, _interrupt_report) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        verdict, written = write_report(run_dir)
        progress.message(verdict)
        progress.message("report: wrote " + ", ".join(str(path) for path in written.values()))
        return
    except _ReportInterrupted as exc:
        warning = f"report: not written, interrupted by {exc}; run `run.py report {run_dir}`"
    except ModuleNotFoundError as exc:
        error = missing_module_error(exc)
        reason = error.format_message() if error is not None else repr(exc)
        warning = f"report: not written: {reason}; then run `run.py report {run_dir}`"
    except OSError as exc:  # a full disk: the file and the fix; the previous report, if any, stays whole
        warning = f"report: not written: {os_error_message(exc)} (`run.py report {run_dir}`)"
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
