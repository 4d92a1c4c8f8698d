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

    from scripts.benchmark.contracts.outputs import refuse_overwrite
    from scripts.benchmark.errors import UserError
    from scripts.benchmark.frameworks.recording import recording_digest, write_recording

    if (target is None) != (target_format is None):
        raise UserError("prepare-recording: give --target and --target-format together (or neither, for the digest)")
    if target is not None:
        refuse_overwrite(Path(target), "--target", inputs=[Path(source), Path(digest_file)])
    refuse_overwrite(Path(digest_file), "--digest-file", inputs=[Path(source)])
    digest = recording_digest(Path(source), source_format)
    kept = _kept_digest(Path(digest_file), digest, source)
    if target is not None:
        from scripts.benchmark.frameworks.recording import read_recording

        write_recording(read_recording(Path(source), source_format), Path(target), target_format)
        _check_written(Path(target), target_format, digest)
    if kept is None:
        from miles.utils.bench_metrics import write_text_atomic

        write_text_atomic(Path(digest_file), digest + "\n")
    typer.echo(f"recording {digest}" + (f": {source} -> {target}" if target else f": {source}"))


def _kept_digest(path, digest: str, source: str) -> str | None:
    """The digest kept beside the recording (None: none yet); a recording whose digest differs is refused before
    anything is written."""
    from scripts.benchmark.errors import UserError

    try:
        kept = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"--digest-file {path}: {exc.strerror or exc}") from None
    if not kept:
        raise UserError(
            f"--digest-file {path} is empty (damaged: a digest is never written empty): delete it to digest the "
            f"recording as it is now, or delete {path.parent} to record it again"
        )
    if kept != digest:
        raise UserError(f"--digest-file {path}: the recording at {source} has digest {digest}, not the kept {kept}")
    return kept


def _check_written(target, target_format: str, digest: str) -> None:
    """The conversion read back in its own format is the same recording; otherwise it is removed (a step whose file
    exists is skipped next time) and refused."""
    import shutil

    from scripts.benchmark.errors import UserError
    from scripts.benchmark.frameworks.recording import recording_digest

    written = recording_digest(target, target_format)
    if written != digest:
        shutil.rmtree(target, ignore_errors=True)
        raise UserError(f"--target {target}: the conversion has digest {written}, not the recording's {digest}")


def register(app: typer.Typer) -> None:
    app.command("prepare-recording")(prepare_recording)
