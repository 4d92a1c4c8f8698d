"""`run.py execute PLAN.json --output-dir DIR` / `run.py execute --resume DIR`: run a plan's matrix.

- Options are the fields of `runner.options.ExecuteOptions`; every option left unset on the command line of `--resume`
  keeps the value the run was started with (stored in manifest.json), else its default. Without --repeats, a new run
  runs the repeats its plan.json carries (what the dry run printed), else 1. `--resume DIR` of a folder holding a
  plan.json and no manifest.json (a dry run, or a start that failed before the run began) starts its plan.
- `--emit-sbatch FILE` writes a Slurm batch script that starts Ray across the allocation and runs this same command,
  then exits without running anything.
- Before anything starts: the plan is validated against its typed definition (contracts/plan.py), and the
  preflight of the main command runs (runner/preflight.py: GPUs, frameworks, data; `--no-preflight` skips it).
- Exit status: 0 all cells complete, 1 a cell is not complete, 2 bad input (nothing was started, no folder left
  behind), 4 this machine cannot execute the plan (preflight), 130 interrupted.

Caveats:
- RAY_ADDRESS in the environment means "join that cluster" (same as --ray-address); BENCH_RAY_START_ARGS (extra
  `ray start` options of the heads the harness starts) must parse as shell words, else exit 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer


def execute_impl(
    plan_path: Path | None, output_dir: Path, overrides: dict[str, Any], *, resume: bool, preflight: bool = True
) -> int:
    """Plan + options -> exit status; also what the main command calls after writing the plan."""
    from scripts.benchmark.contracts.manifest import MANIFEST_NAME, Manifest
    from scripts.benchmark.runner import executor
    from scripts.benchmark.runner.options import ExecuteOptions, RunError, options_from_manifest
    from scripts.benchmark.runner.ray_head import extra_start_args

    try:
        extra_start_args(os.environ)
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    if resume and not (output_dir / MANIFEST_NAME).exists() and (output_dir / "plan.json").is_file():
        # a start that failed before the run began (a full disk): its plan files are whole, the run starts now
        typer.echo(f"--resume {output_dir}: no {MANIFEST_NAME} yet, so nothing ran: starting its plan.json", err=True)
        plan_path, resume = output_dir / "plan.json", False
    stored: dict[str, Any] = {}
    try:
        if resume and (output_dir / MANIFEST_NAME).exists():
            stored = options_from_manifest(Manifest.load(output_dir / MANIFEST_NAME).options)
    except (ValueError, OSError) as exc:
        typer.echo(f"error: --resume {output_dir}: {MANIFEST_NAME} cannot be read: {_first_line(exc)}", err=True)
        return 2
    explicit = {k: v for k, v in overrides.items() if v is not None}
    merged = {**_planned(plan_path, resume), **stored, **explicit}
    for key in ("pythons", "prefixes"):  # per side or framework: an option given now replaces only that name's
        merged[key] = {**stored.get(key, {}), **explicit.get(key, {})}
    options = ExecuteOptions(**merged)
    preflight = preflight and options.preflight
    try:
        return executor.execute(
            plan_path,
            output_dir,
            options,
            resume=resume,
            preflight=preflight,
            end_report=end_of_run_report,
            looks_for=run_folder_looks,
        )
    except RunError as exc:
        from scripts.benchmark.errors import echo_error

        echo_error(str(exc))
        return exc.exit_code


def _planned(plan_path: Path | None, resume: bool) -> dict[str, Any]:
    """What the plan asks for when the command line is silent: the repeats its dry run printed. A plan that cannot
    be read is left to the executor, which refuses it naming the file."""
    import json

    if resume or plan_path is None:
        return {}
    try:
        repeats = json.loads(plan_path.read_text(encoding="utf-8")).get("repeats")
    except (OSError, ValueError, AttributeError):
        return {}
    return {"repeats": repeats} if isinstance(repeats, int) and not isinstance(repeats, bool) and repeats >= 1 else {}


def end_of_run_report(run_dir: Path) -> tuple[str, dict[str, Path]]:
    """What `run.py report DIR` writes, made at the end of a run: (the verdict text, the files written)."""
    from scripts.benchmark.commands.report import analyse_and_write, verdict_markdown

    doc, written = analyse_and_write(run_dir)
    return verdict_markdown(doc).rstrip(), written


def run_folder_looks(run_dir: Path):
    """A sequential pair's looks at its run folder, for the runner's rounds (history/pair_check.py)."""
    from scripts.benchmark.history.pair_check import RunFolderLooks

    return RunFolderLooks(run_dir)


def side_runtimes(
    side_python: list[str] | None, side_prefix: list[str] | None, aliases: tuple[dict[str, str | None], ...]
) -> dict[str, Any]:
    """--side-python / --side-prefix NAME=VALUE (and their aliases, --<framework>-python / --<framework>-prefix) as
    ExecuteOptions' `pythons` and `prefixes`; UserError for a word that is not NAME=VALUE or a name given twice."""
    from scripts.benchmark.errors import UserError

    runtimes = []
    for option, words, alias in (
        ("--side-python", side_python, aliases[0]),
        ("--side-prefix", side_prefix, aliases[1]),
    ):
        table = {name: value for name, value in alias.items() if value is not None}
        for word in words or []:
            name, sep, value = word.partition("=")
            if not (sep and name and value):
                raise UserError(f"{option} {word!r}: expected NAME=VALUE, NAME a side or a framework of the plan")
            if table.get(name, value) != value:
                raise UserError(f"{option} {name}: given twice ({table[name]!r}, {value!r}), once maybe by its alias")
            table[name] = value
        runtimes.append(table or None)
    return {"pythons": runtimes[0], "prefixes": runtimes[1]}


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


_NON_NEGATIVE = ("cell_timeout_s", "first_step_timeout_s", "stall_timeout_s", "grace_s", "gpu_release_timeout_s")


def check_option_values(overrides: dict[str, Any]) -> None:
    """Numbers the watch loop cannot use: exit 2 naming the option, before anything is created."""
    from scripts.benchmark.errors import UserError

    def option(name: str) -> str:
        return "--" + name.replace("_", "-")

    if overrides.get("repeats") is not None and overrides["repeats"] < 1:
        raise UserError(f"--repeats must be >= 1, got {overrides['repeats']}")
    for name in _NON_NEGATIVE:
        if overrides.get(name) is not None and overrides[name] < 0:
            raise UserError(f"{option(name)} must be >= 0 (0 = off), got {overrides[name]}")
    if overrides.get("budget_s") is not None and overrides["budget_s"] <= 0:
        raise UserError(f"--budget-minutes must be > 0, got {overrides['budget_s'] / 60:g}")
    if overrides.get("poll_interval_s") is not None and overrides["poll_interval_s"] <= 0:
        raise UserError(f"--poll-interval-s must be > 0, got {overrides['poll_interval_s']}")
    if overrides.get("ray") is not None and overrides["ray"] not in ("auto", "private", "external", "none"):
        raise UserError(f"--ray {overrides['ray']!r}: expected auto, private, external or none")


def register(app: typer.Typer) -> None:
    @app.command("execute")
    def execute_command(
        plan: Annotated[
            Path | None, typer.Argument(help="plan.json to run (written by --dry-run); omit with --resume")
        ] = None,
        output_dir: Annotated[Path | None, typer.Option("--output-dir", help="run folder to create")] = None,
        resume: Annotated[
            Path | None, typer.Option("--resume", help="run folder to resume: reruns every cell not complete")
        ] = None,
        repeats: Annotated[
            int | None,
            typer.Option("--repeats", help="repeats of every cell, interleaved", show_default="the plan's, else 1"),
        ] = None,
        fail_fast: Annotated[
            bool | None,
            typer.Option(
                "--fail-fast/--no-fail-fast", help="stop the matrix at the first failure", show_default="no-fail-fast"
            ),
        ] = None,
        skip_prepare: Annotated[
            bool | None,
            typer.Option("--skip-prepare/--prepare", help="skip the download/convert steps", show_default="prepare"),
        ] = None,
        preflight: Annotated[
            bool, typer.Option("--preflight/--no-preflight", help="check GPUs, frameworks and data first")
        ] = True,
        side_python: Annotated[
            list[str] | None,
            typer.Option(
                "--side-python",
                metavar="NAME=PATH",
                help="NAME=PATH: the interpreter of a side's cells (NAME: a side of the plan, or a framework for all "
                "its sides); repeatable",
            ),
        ] = None,
        side_prefix: Annotated[
            list[str] | None,
            typer.Option(
                "--side-prefix",
                metavar="NAME=CMD",
                help='NAME=CMD: a launch prefix of a side\'s cells, e.g. verl="docker exec -i v"',
            ),
        ] = None,
        miles_python: Annotated[
            str | None, typer.Option("--miles-python", help="alias of --side-python miles=PATH")
        ] = None,
        verl_python: Annotated[
            str | None, typer.Option("--verl-python", help="alias of --side-python verl=PATH")
        ] = None,
        miles_prefix: Annotated[
            str | None, typer.Option("--miles-prefix", help="alias of --side-prefix miles=CMD")
        ] = None,
        verl_prefix: Annotated[
            str | None, typer.Option("--verl-prefix", help="alias of --side-prefix verl=CMD")
        ] = None,
        cell_timeout_s: Annotated[
            float | None,
            typer.Option("--cell-timeout-s", help="time limit of one cell, 0 = off", show_default="14400"),
        ] = None,
        first_step_timeout_s: Annotated[
            float | None,
            typer.Option(
                "--first-step-timeout-s", help="stall limit before the first step, 0 = off", show_default="3600"
            ),
        ] = None,
        stall_timeout_s: Annotated[
            float | None, typer.Option("--stall-timeout-s", help="no new step for this long", show_default="1200")
        ] = None,
        grace_s: Annotated[
            float | None, typer.Option("--grace-s", help="SIGTERM -> SIGKILL grace period", show_default="30")
        ] = None,
        ray: Annotated[
            str | None, typer.Option("--ray", help="auto | private | external | none", show_default="auto")
        ] = None,
        ray_address: Annotated[
            str | None, typer.Option("--ray-address", envvar="RAY_ADDRESS", help="join this Ray cluster")
        ] = None,
        ray_dashboard_url: Annotated[
            str | None,
            typer.Option(
                "--ray-dashboard-url", help="its job API", show_default="http://<host of --ray-address>:8265"
            ),
        ] = None,
        gpu_release_timeout_s: Annotated[
            float | None,
            typer.Option(
                "--gpu-release-timeout-s",
                help="wait for GPU memory to return to its level before the run",
                show_default="120",
            ),
        ] = None,
        poll_interval_s: Annotated[
            float | None, typer.Option("--poll-interval-s", help="watch loop period", show_default="0.2")
        ] = None,
        emit_sbatch: Annotated[
            Path | None, typer.Option("--emit-sbatch", help="write a Slurm script running this, then exit")
        ] = None,
        budget_minutes: Annotated[
            float | None,
            typer.Option(
                "--budget-minutes",
                help="start no launch that would end past this many minutes; stop a running one at them",
                show_default="the run's, else none",
            ),
        ] = None,
    ) -> None:
        """Run an existing plan (or resume a run folder): cells x repeats interleaved, watched and recorded.

        Example:

        \b
            run.py execute bench-out/q/plan.json --output-dir bench-out/q-run --repeats 3
        """
        from scripts.benchmark.errors import UserError
        from scripts.benchmark.frameworks import registry

        if (plan is None) == (resume is None):
            raise UserError("give either PLAN.json with --output-dir, or --resume DIR")
        if plan is not None and output_dir is None:
            raise UserError("--output-dir is required with PLAN.json")
        run_dir = resume if resume is not None else output_dir
        overrides = dict(
            repeats=repeats,
            fail_fast=fail_fast,
            skip_prepare=skip_prepare,
            **side_runtimes(
                side_python,
                side_prefix,
                registry.option_runtimes(miles_python, verl_python, miles_prefix, verl_prefix),
            ),
            cell_timeout_s=cell_timeout_s,
            first_step_timeout_s=first_step_timeout_s,
            stall_timeout_s=stall_timeout_s,
            grace_s=grace_s,
            ray=ray,
            ray_address=ray_address or None,
            ray_dashboard_url=ray_dashboard_url,
            gpu_release_timeout_s=gpu_release_timeout_s,
            poll_interval_s=poll_interval_s,
            preflight=None if preflight else False,  # stored, so that --resume remembers --no-preflight
            budget_s=None if budget_minutes is None else budget_minutes * 60,
        )
        check_option_values(overrides)
        if emit_sbatch is not None:
            _emit_sbatch(emit_sbatch, plan if plan is not None else run_dir / "plan.json")
        code = execute_impl(plan, run_dir, overrides, resume=resume is not None, preflight=preflight)
        raise typer.Exit(code)


def _emit_sbatch(path: Path, plan_path: Path) -> None:
    from scripts.benchmark.contracts.outputs import refuse_overwrite
    from scripts.benchmark.errors import UserError
    from scripts.benchmark.runner.slurm import write_sbatch

    refuse_overwrite(path, "--emit-sbatch", inputs=[plan_path])
    argv = _strip_option(sys.argv[1:], "--emit-sbatch")
    try:
        write_sbatch(path, plan_path=plan_path, run_argv=argv)
    except OSError as exc:
        raise UserError(f"--emit-sbatch {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    typer.echo(f"wrote {path}; submit it with: sbatch {path}")
    raise typer.Exit(0)


def _strip_option(argv: list[str], name: str) -> list[str]:
    """argv without `name VALUE` / `name=VALUE` (the sbatch script must not write itself again)."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == name:
            skip = True
        elif not word.startswith(name + "="):
            out.append(word)
    return out
