"""`run.py prepare-recording`: a train-only plan's prepare step (plan/train_only.py): the recording's digest kept
beside it, or the recording converted for another framework's cells (frameworks/recording.py, as
`convert-recording` does) and checked against that digest.

The digest file is the recording's identity: the first step writes it from the recording as recorded; a conversion
whose output has another digest fails and names both, so a replay never trains on tokens other than the recording's.
"""

from __future__ import annotations

import typer


def prepare_recording(
    source: str = typer.Option(..., help="the recording as its recorder wrote it (a folder)"),
    source_format: str = typer.Option(..., help="its format: the registered framework that wrote it"),
    target: str = typer.Option(None, help="where to write the converted recording (a new folder)"),
    target_format: str = typer.Option(None, help="the format of --target: the framework whose cells read it"),
    digest_file: str = typer.Option(..., help="the recording's digest: written when absent, checked when present"),
) -> None:
    """Keep a recorded rollout's digest, or convert it for another framework and check the digest.

    Example:

    \b
        run.py prepare-recording --source rec/a --source-format A --target rec/b --target-format B --digest-file d
    """
    from pathlib import Path

    from scripts.benchmark.errors import UserError
    from scripts.benchmark.frameworks.recording import convert_recording as convert
    from scripts.benchmark.frameworks.recording import recording_digest

    if (target is None) != (target_format is None):
        raise UserError("prepare-recording: give --target and --target-format together (or neither, for the digest)")
    if target is None:
        digest = recording_digest(Path(source), source_format)
    else:
        digest = convert(Path(source), source_format, Path(target), target_format)
    _keep_digest(Path(digest_file), digest, target or source)
    typer.echo(f"recording {digest}" + (f": {source} -> {target}" if target else f": {source}"))


def _keep_digest(path, digest: str, written: str) -> None:
    """Write the digest when it is not there yet; refuse a recording whose digest differs from the one kept."""
    from scripts.benchmark.errors import UserError

    from miles.utils.bench_metrics import write_text_atomic

    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        kept = None
    except OSError as exc:
        raise UserError(f"--digest-file {path}: {exc.strerror or exc}") from None
    if kept is None:
        write_text_atomic(path, digest + "\n")
    elif kept != digest:
        raise UserError(
            f"--digest-file {path}: the recording at {written} has digest {digest}, not the recording's {kept}"
        )


def register(app: typer.Typer) -> None:
    app.command("prepare-recording")(prepare_recording)
