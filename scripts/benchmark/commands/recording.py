"""`run.py convert-recording`: one recorded rollout rewritten in another framework's dump format, its digest printed.

The train-only comparison replays one recording into every framework; each reads its own dump format, so the
recording made by one is converted for the other, and the digest (the same in every format) is what proves both
trained on the same tokens.
"""

from __future__ import annotations

from pathlib import Path

import typer


def convert_recording(
    source: str = typer.Argument(..., help="the recording: a folder in the --from format"),
    source_format: str = typer.Option(..., "--from", help="format of SOURCE: a framework's name (miles or verl)"),
    target_format: str = typer.Option(..., "--to", help="format to write: a framework's name (miles or verl)"),
    out: str = typer.Option(..., "--out", help="the folder to write; must not exist (nothing is overwritten)"),
) -> None:
    """Convert a recorded rollout between frameworks' dump formats and print its digest (sha256).

    Example:

    \b
        run.py convert-recording rollouts/ --from miles --to verl --out verl-dump/
    """
    from scripts.benchmark.contracts.outputs import refuse_overwrite
    from scripts.benchmark.errors import UserError
    from scripts.benchmark.frameworks.recording import codec, convert_recording

    refuse_overwrite(Path(out), "--out", inputs=[Path(source)])
    for option, fmt in (("--from", source_format), ("--to", target_format)):
        try:
            codec(fmt)
        except UserError as exc:
            raise UserError(f"{option}: {exc}") from None
    typer.echo(convert_recording(Path(source), source_format, Path(out), target_format))


def register(app: typer.Typer) -> None:
    app.command("convert-recording")(convert_recording)
