"""`ab`: the paired PR check, the head side against the base side of one run folder (history/pair_check.py).

- Reads DIR/report.json of a run whose two sides are two builds of one framework (`run.py --candidate NAME
  --candidate-root HEAD --reference NAME --reference-root BASE`, then `run.py report DIR`), writes the verdict as
  markdown (and a .json beside it) in the regression check's table, appends it to the GitHub step summary, prints it.
- Exit codes as `check`'s: 1 the head regressed, 2 could not judge (no report, a pair refused or without a step-time
  ratio), 0 otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from scripts.benchmark.commands.history import write_verdict


def ab_impl(run_dir: Path, output: Path | None) -> int:
    """Judge the pairs of run_dir's report, write the verdict and return the exit code."""
    from scripts.benchmark.history.check import render_check_markdown
    from scripts.benchmark.history.pair_check import judge_pairs, moved_phase_notes
    from scripts.benchmark.history.report_input import read_report

    report = read_report(run_dir)
    checks = judge_pairs(report)
    repeats = sorted({c.repeats for c in report.cells})
    sides = report.side_pair()
    notes = [
        f"head: {sides.candidate.label}; base: {sides.reference.label if sides.reference else '-'}; same node, "
        f"{'/'.join(map(str, repeats))} interleaved repeat(s) per side, order balanced; intervals over the repeats",
        *moved_phase_notes(report),
    ]
    markdown = render_check_markdown(checks, title="Paired check (head vs base)", notes=notes)
    output = output or Path(run_dir) / "ab.md"
    return write_verdict(markdown, checks, notes, output)


def register(app: typer.Typer) -> None:
    @app.command("ab")
    def ab(
        run_dir: Annotated[Path, typer.Argument(help="run folder of a head/base pair, holding report.json")],
        output: Annotated[Path | None, typer.Option(help="markdown verdict", show_default="DIR/ab.md")] = None,
    ) -> None:
        """Exit 1 if the head side is slower than the base side of the same run, 0 if not, 2 if it could not judge.

        Example:

        \b
            run.py --backend fsdp --preset qwen3-1.7b-base --output-dir pr --candidate NAME \\
                --candidate-root /ci/head --reference NAME --reference-root /ci/base
            run.py report pr && run.py ab pr
        """
        try:
            code = ab_impl(run_dir, output)
        except Exception as e:  # exit 1 must only ever mean "regression": any failure to judge is 2
            typer.echo(f"error: could not judge: {type(e).__name__}: {e}", err=True)
            raise typer.Exit(2) from e
        raise typer.Exit(code)
