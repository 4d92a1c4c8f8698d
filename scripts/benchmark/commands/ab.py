"""`ab`: the paired PR check, the head side against the base side of one run folder (history/pair_check.py).

- Reads DIR/report.json of a run whose two sides are two builds of one framework (`run.py --candidate NAME
  --candidate-root HEAD --reference NAME --reference-root BASE`, then `run.py report DIR`) and, for a sequential run,
  DIR/looks.json (the looks the runner took); writes the verdict as markdown (and a .json beside it) in the
  regression check's table, appends it to the GitHub step summary, prints it.
- A folder whose sides are two different frameworks (Miles against VERL) is refused: its verdict is the report's
  headline, not a regression check.
- Beside the verdict: the learning guard's words on head vs base and its power (the repeats a side that see each
  planted difference 9 times in 10, with the plan's cost at that number); they never change the exit code.
- Exit codes as `check`'s: 1 the head regressed, 2 could not judge (no report, another kind of run, too few usable
  repeats, a disturbed run left inconclusive), 0 otherwise.
- Needs no history store: nothing here imports the `analysis` extra's database packages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


class NotAPairOfBuilds(ValueError):
    """The run folder is not two builds of one framework."""


def ab_impl(run_dir: Path, output: Path | None, *, step_summary: bool = True) -> int:
    """Judge the head/base pairs of run_dir's report, write the verdict and return the exit code."""
    from scripts.benchmark.commands.history import write_verdict

    markdown, checks, notes, _ = judge_pairs(run_dir)
    output = output or Path(run_dir) / "ab.md"
    return write_verdict(markdown, checks, notes, output, step_summary=step_summary)


def judge_pairs(run_dir: Path):
    """(markdown, check rows, notes, the decided look per pair) of run_dir: the verdict `ab` writes."""
    from scripts.benchmark.contracts.report import read_run_report
    from scripts.benchmark.history.check import render_check_markdown
    from scripts.benchmark.history.pair_check import final_look, look_check, moved_phase_notes, pair_units, read_looks

    report = read_run_report(run_dir)
    sides = report.side_pair()
    if sides.reference is None or sides.reference.framework != sides.candidate.framework:
        other = sides.reference.framework if sides.reference else "nothing"
        raise NotAPairOfBuilds(
            f"{run_dir} compares {sides.candidate.framework} with {other}: `ab` judges two builds of one framework "
            "(a PR head against its merge base); the verdict of this run is its report's headline (headline.md)"
        )
    looks = read_looks(run_dir)
    checks, notes, decided_looks = [], [], {}
    for (backend, layout), (head, base) in pair_units(report).items():
        decided = final_look(head, base, looks)
        decided_looks[f"{backend}/{layout}"] = decided
        checks.append(look_check(f"{backend}/{layout}", decided))
        design = f"{looks[-1].round} round(s), the last look's" if looks else "judged once at"
        notes.append(f"{backend}/{layout}: {design} one-sided alpha {decided.alpha:.2%}; " + _used(decided))
    notes = [
        f"head: {sides.candidate.label}; base: {sides.reference.label}; same node, repeats interleaved with the order "
        "balanced; intervals over the repeats (ratio of geometric means of each repeat's steady steps)",
        *notes,
        *moved_phase_notes(report),
        *_learning_notes(report, run_dir),
    ]
    markdown = render_check_markdown(checks, title="Paired check (head vs base)", notes=notes)
    return markdown, checks, notes, decided_looks


def _learning_notes(report, run_dir: Path) -> list[str]:
    """The learning guard's words on head vs base per pair, then its power with the plan's cost at the repeats it
    needs (power_notes.py): a head that learns differently is named beside the speed verdict, never inside it."""
    from scripts.benchmark.commands.power_notes import read_plan_data, report_power_lines

    lines = []
    for pair in report.learning:
        calls = [f"{row.signal} {row.verdict}" for row in pair.signals if row.verdict != "not judged"]
        lines.append(f"{pair.backend}/{pair.layout} learning, head vs base: {', '.join(calls) or 'nothing judged'}")
    return lines + report_power_lines(report, read_plan_data(run_dir))


def _used(decided) -> str:
    """What the look used: repeats a side, and the slow steps left out of their means."""
    slow = decided.slow_steps
    used = f"{decided.repeats.get('candidate', 0)} head and {decided.repeats.get('reference', 0)} base repeats used"
    if not slow:
        return used
    (a, n_a), (b, n_b) = slow["candidate"], slow["reference"]
    return f"{used}; slow steps left out of their means: head {a} of {n_a}, base {b} of {n_b}"


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
        except NotAPairOfBuilds as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(2) from e
        except Exception as e:  # exit 1 must only ever mean "regression": any failure to judge is 2
            typer.echo(f"error: could not judge: {type(e).__name__}: {e}", err=True)
            raise typer.Exit(2) from e
        raise typer.Exit(code)
