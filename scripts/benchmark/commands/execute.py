# doc-dev: docs/benchmark.md
"""`run.py execute PLAN.json --output-dir DIR` / `run.py execute --resume DIR`: run a plan's matrix.

- Options are the fields of `runner.options.ExecuteOptions`; every option left unset on the command line of `--resume`
  keeps the value the run was started with (stored in manifest.json), else its default.
- `--emit-sbatch FILE` writes a Slurm batch script that starts Ray across the allocation and runs this same command,
  then exits without running anything.
- Exit status: 0 all cells complete, 1 a cell is not complete, 2 bad input (nothing was started), 130 interrupted.

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


def execute_impl(plan_path: Path | None, output_dir: Path, overrides: dict[str, Any], *, resume: bool) -> int:
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
    stored: dict[str, Any] = {}
    if resume and (output_dir / MANIFEST_NAME).exists():
        stored = options_from_manifest(Manifest.load(output_dir / MANIFEST_NAME).options)
    explicit = {k: v for k, v in overrides.items() if v is not None}
    options = ExecuteOptions(**{**stored, **explicit})
    try:
        return executor.execute(plan_path, output_dir, options, resume=resume)
    except RunError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2


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
            int | None, typer.Option("--repeats", help="repeats of every cell, interleaved [1]")
        ] = None,
        fail_fast: Annotated[
            bool | None, typer.Option("--fail-fast/--no-fail-fast", help="stop the matrix at the first failure")
        ] = None,
        skip_prepare: Annotated[
            bool | None, typer.Option("--skip-prepare/--prepare", help="skip the download/convert steps")
        ] = None,
        miles_python: Annotated[
            str | None, typer.Option("--miles-python", help="interpreter of the Miles environment")
        ] = None,
        verl_python: Annotated[
            str | None, typer.Option("--verl-python", help="interpreter of the VERL environment")
        ] = None,
        miles_prefix: Annotated[
            str | None, typer.Option("--miles-prefix", help='launch prefix, e.g. "docker exec -i miles"')
        ] = None,
        verl_prefix: Annotated[
            str | None, typer.Option("--verl-prefix", help='launch prefix, e.g. "docker exec -i verl"')
        ] = None,
        cell_timeout_s: Annotated[
            float | None, typer.Option("--cell-timeout-s", help="time limit of one cell [14400; 0=off]")
        ] = None,
        first_step_timeout_s: Annotated[
            float | None,
            typer.Option("--first-step-timeout-s", help="stall limit before the first step [3600; 0=off]"),
        ] = None,
        stall_timeout_s: Annotated[
            float | None, typer.Option("--stall-timeout-s", help="no new step for this long [1200]")
        ] = None,
        grace_s: Annotated[
            float | None, typer.Option("--grace-s", help="SIGTERM -> SIGKILL grace period [30]")
        ] = None,
        ray: Annotated[str | None, typer.Option("--ray", help="auto | private | external | none [auto]")] = None,
        ray_address: Annotated[
            str | None, typer.Option("--ray-address", envvar="RAY_ADDRESS", help="join this Ray cluster")
        ] = None,
        ray_dashboard_url: Annotated[
            str | None, typer.Option("--ray-dashboard-url", help="its job API [http://<host>:8265]")
        ] = None,
        gpu_release_timeout_s: Annotated[
            float | None,
            typer.Option(
                "--gpu-release-timeout-s", help="wait for GPU memory to return to its level before the run [120]"
            ),
        ] = None,
        poll_interval_s: Annotated[
            float | None, typer.Option("--poll-interval-s", help="watch loop period [0.2]")
        ] = None,
        emit_sbatch: Annotated[
            Path | None, typer.Option("--emit-sbatch", help="write a Slurm script running this, then exit")
        ] = None,
    ) -> None:
        """Run an existing plan (or resume a run folder): cells x repeats interleaved, watched and recorded."""
        if (plan is None) == (resume is None):
            raise typer.BadParameter("give either PLAN.json with --output-dir, or --resume DIR")
        if plan is not None and output_dir is None:
            raise typer.BadParameter("--output-dir is required with PLAN.json")
        if ray is not None and ray not in ("auto", "private", "external", "none"):
            raise typer.BadParameter(f"--ray {ray!r}: expected auto, private, external or none")
        run_dir = resume if resume is not None else output_dir
        if emit_sbatch is not None:
            from scripts.benchmark.runner.slurm import write_sbatch

            argv = _strip_option(sys.argv[1:], "--emit-sbatch")
            plan_for_script = plan if plan is not None else run_dir / "plan.json"
            write_sbatch(emit_sbatch, plan_path=plan_for_script, run_argv=argv)
            typer.echo(f"wrote {emit_sbatch}; submit it with: sbatch {emit_sbatch}")
            raise typer.Exit(0)
        overrides = dict(
            repeats=repeats,
            fail_fast=fail_fast,
            skip_prepare=skip_prepare,
            miles_python=miles_python,
            verl_python=verl_python,
            miles_prefix=miles_prefix,
            verl_prefix=verl_prefix,
            cell_timeout_s=cell_timeout_s,
            first_step_timeout_s=first_step_timeout_s,
            stall_timeout_s=stall_timeout_s,
            grace_s=grace_s,
            ray=ray,
            ray_address=ray_address or None,
            ray_dashboard_url=ray_dashboard_url,
            gpu_release_timeout_s=gpu_release_timeout_s,
            poll_interval_s=poll_interval_s,
        )
        code = execute_impl(plan, run_dir, overrides, resume=resume is not None)
        raise typer.Exit(code)


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
