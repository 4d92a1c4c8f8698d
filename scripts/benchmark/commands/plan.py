"""The main job (the app callback, no subcommand): plan matched launches of two sides from one spec, then run them.

    run.py --backend {fsdp,megatron,all} [--compare-verl] --preset NAME | --spec FILE
           [--layout colocate|disaggregated] --output-dir DIR [--dry-run] [--num-steps N] [--gpus-per-node N]
           [--repeats N] [--skip-prepare] [--wandb] [--force] [--no-preflight] [--learning-run] [--train-only]
           [--candidate NAME[@TARGET]] [--reference NAME[@TARGET]]

The sides: `--candidate` (default: Miles at --miles-version) and `--reference` (none unless given; --compare-verl is
`--reference verl`), each a registered framework (frameworks/registry.py) at one of its targets. Two targets of one
framework compare two builds (`--candidate miles --reference miles@0.0.2`: the reference side is `miles-base`).

Writes DIR/plan.json, DIR/cells/<id>.sh, DIR/parity.md and DIR/parity.json, prints a summary; without --dry-run it
then runs the plan into the same DIR (`run.py execute`, see commands/execute.py). DIR must be new, empty, or hold
the same plan; a run or another plan there is refused unless --force moves it aside (plan/folder.py).
Exit codes: 0 planned (dry run) / all cells complete; 1 a cell did not complete; 2 bad input (spec validation,
options, output folder); 3 the launches do not match (parity) or are invalid (flags, VERL strict composition); 4 this
machine cannot execute the plan (what is missing is printed); 130 interrupted (resume with `run.py execute --resume
DIR`).
"""

from __future__ import annotations

import typer

from scripts.benchmark.commands.plan_cost import CostRequest

NO_BUDGET = CostRequest()
EXIT_BAD_INPUT, EXIT_PARITY, EXIT_CANNOT_EXECUTE = 2, 3, 4


def _fail(code: int, message: str) -> None:
    from scripts.benchmark.errors import echo_error

    echo_error(message)
    raise typer.Exit(code)


def plan_impl(
    *,
    backend: str,
    preset: str | None,
    spec_file: str | None,
    output_dir: str,
    dry_run: bool,
    compare_verl: bool = False,
    layout: str | None = None,
    num_steps: int | None = None,
    gpus_per_node: int | None = None,
    miles_root: str | None = None,
    megatron_root: str | None = None,
    repeats: int | None = None,
    skip_prepare: bool = False,
    wandb: bool = False,
    miles_version: str | None = None,
    check_miles: bool = False,
    force: bool = False,
    preflight: bool = True,
    candidate: str | None = None,
    reference: str | None = None,
    roots: tuple[str | None, str | None] = (None, None),
    learning_run: bool = False,
    train_only: bool = False,
    pr_workload: bool = False,
    cost: CostRequest = NO_BUDGET,
) -> None:
    from pathlib import Path

    from scripts.benchmark.commands.plan_summary import print_summary
    from scripts.benchmark.plan.build import PlanError, PlanOptions, build_plan, write_plan
    from scripts.benchmark.plan.folder import check_plan_folder, write_plan_atomically
    from scripts.benchmark.spec import BACKENDS, spec_hash

    if backend not in ("fsdp", "megatron", "all"):
        _fail(EXIT_BAD_INPUT, f"--backend must be fsdp, megatron or all, got {backend!r}")
    _check_miles_version(miles_version)
    if repeats is not None and repeats < 1:
        _fail(EXIT_BAD_INPUT, f"--repeats must be >= 1, got {repeats}")
    cost.check()
    sides = _sides(compare_verl, miles_version, candidate, reference, roots)
    spec = _load_spec(
        preset,
        spec_file,
        layout,
        num_steps=num_steps,
        gpus_per_node=gpus_per_node,
        wandb=wandb,
        learning_run=learning_run,
        train_only=train_only,
        pr_workload=pr_workload,
    )
    out = Path(output_dir).expanduser().absolute()
    options = PlanOptions(
        backends=BACKENDS if backend == "all" else (backend,),
        layout=spec.placement.layout,
        output_dir=out,
        sides=sides,
        settings=_settings(miles_root=miles_root, megatron_root=megatron_root),
    )
    compares = sides.reference is not None
    repeats = cost.repeats(repeats, sides, options.backends)
    try:
        plan = build_plan(spec, preset, options, repeats=repeats)
    except PlanError as exc:
        failed = exc.plan
        if failed is not None:
            check_plan_folder(out, spec_hash(spec), force=force)
            write_plan_atomically(out, lambda tmp: write_plan(failed, out, into=tmp))
        _fail(EXIT_PARITY, f"{exc} (see {out / 'parity.md'})")
    _check_ray_folder(plan, out)
    estimate = cost.estimate(plan.data, repeats, pr_workload=pr_workload)
    aside = check_plan_folder(out, spec_hash(spec), force=force)
    if aside is not None:
        typer.echo(f"moved the previous contents of {out} to {aside}")
    written = write_plan_atomically(out, lambda tmp: write_plan(plan, out, into=tmp))
    print_summary(plan, written, out, repeats, estimate, cost_store=cost.cost_store)
    if compares:
        _plan_stage_checks(plan)
    if dry_run:
        if check_miles:
            _installed_checks(plan.data)
        typer.echo("dry run: nothing executed")
        return
    _execute_plan(
        plan, out, repeats=repeats, skip_prepare=skip_prepare, preflight=preflight, budget_minutes=cost.budget_minutes
    )


def _check_ray_folder(plan, out) -> None:
    """A cell submitted as a Ray job can never run in a folder whose name /bin/sh would interpret: refuse
    the folder now (exit 2) rather than at the first GPU node."""
    from scripts.benchmark.frameworks.launch import ray_shell_problem, uses_ray_job_submit

    problem = ray_shell_problem(str(out))
    cells = [cell["id"] for cell in plan.data["cells"] if uses_ray_job_submit(cell["launch_argv"])]
    if problem and cells:
        _fail(EXIT_BAD_INPUT, f"--output-dir {out}: {problem} (cells {', '.join(cells)} are submitted as Ray jobs)")


def _check_miles_version(miles_version: str | None) -> None:
    from scripts.benchmark.frameworks import registry

    targets = registry.get(registry.DEFAULT_PAIR[0]).targets()
    if miles_version not in (None, *targets):
        _fail(EXIT_BAD_INPUT, f"--miles-version must be one of {', '.join(targets)}, got {miles_version!r}")


def _sides(
    compare_verl: bool,
    miles_version: str | None,
    candidate: str | None,
    reference: str | None,
    roots: tuple[str | None, str | None] = (None, None),
):
    """The plan's sides: the historical options through the registry's one mapping, or --candidate/--reference
    (each with its own checkout: --candidate-root / --reference-root)."""
    from scripts.benchmark.frameworks import registry

    if roots[1] is not None and reference is None:
        _fail(EXIT_BAD_INPUT, "--reference-root needs --reference (the side whose checkout it is)")
    if candidate is None and reference is None and roots[0] is None:
        return registry.option_pair(compare_verl, miles_version)
    if compare_verl and reference is not None:
        _fail(EXIT_BAD_INPUT, "give either --compare-verl or --reference, not both")
    option = "--candidate"
    try:
        legacy = registry.option_pair(compare_verl, miles_version)
        chosen = registry.side_arg("candidate", candidate or legacy.candidate.framework, roots[0])
        if candidate is None:
            chosen = chosen.model_copy(update={"target": legacy.candidate.target})
        option = "--reference"
        other = registry.side_arg("reference", reference, roots[1]) if reference else legacy.reference
        option = "--candidate/--reference"
        return registry.make_pair(chosen, other)
    except ValueError as exc:
        _fail(EXIT_BAD_INPUT, f"{option}: {exc}")


def _settings(**options):
    """Each framework's launch settings from its options (absolute checkout paths: the cells run in their own
    folders), else the environment's / defaults (exit 2 naming an invalid one)."""
    from scripts.benchmark.frameworks import registry

    try:
        return registry.settings(options)
    except ValueError as exc:
        _fail(EXIT_BAD_INPUT, str(exc))


def _load_spec(preset: str | None, spec_file: str | None, layout: str | None, **overrides):
    """The validated spec of --preset or --spec with the command-line overrides applied (exit 2 when invalid)."""
    from pydantic import ValidationError

    from scripts.benchmark.spec import LEARNING_RUN_STEPS, load_preset, load_spec_file, with_overrides

    if (preset is None) == (spec_file is None):
        _fail(EXIT_BAD_INPUT, "give exactly one of --preset NAME or --spec FILE")
    if layout not in (None, "colocate", "disaggregated"):
        _fail(EXIT_BAD_INPUT, f"--layout must be colocate or disaggregated, got {layout!r}")
    wandb = True if overrides.pop("wandb") else None
    steps = overrides["num_steps"]
    if overrides["learning_run"] and overrides["train_only"]:
        _fail(EXIT_BAD_INPUT, "give either --learning-run or --train-only, not both (one run.mode)")
    if overrides["learning_run"] and overrides["pr_workload"]:
        _fail(
            EXIT_BAD_INPUT,
            "give either --learning-run or --pr-workload, not both (the learning guard needs the batch)",
        )
    if overrides["learning_run"] and steps is not None and steps < LEARNING_RUN_STEPS:
        _fail(
            EXIT_BAD_INPUT,
            f"--num-steps {steps} with --learning-run: the learning guard needs >= {LEARNING_RUN_STEPS}",
        )
    source = f"--preset {preset}" if preset else f"--spec {spec_file}"
    try:
        mode = "train-only" if overrides["train_only"] else None
        spec = load_preset(preset) if preset else load_spec_file(spec_file, run_mode=mode)
        return with_overrides(spec, layout=layout, wandb=wandb, **overrides)
    except ValidationError as exc:
        details = [f"{'.'.join(map(str, e['loc'])) or 'spec'}: {e['msg']}" for e in exc.errors()]
        _fail(EXIT_BAD_INPUT, f"invalid spec ({source}):\n  - " + "\n  - ".join(details))
    except OSError as exc:
        _fail(EXIT_BAD_INPUT, f"{source}: {exc.strerror or exc}")
    except ValueError as exc:
        _fail(EXIT_BAD_INPUT, f"invalid spec: {exc}")


def _plan_stage_checks(plan) -> None:
    """Each framework's own check that needs no installed framework (e.g. VERL's strict Hydra composition against
    its real config), on every cell of the plan (exit 3 on failure; skipped, and said, when the tool is absent)."""
    from scripts.benchmark.contracts.plan import checked_cells
    from scripts.benchmark.frameworks import registry

    for check in registry.own_checks(checked_cells(plan.data), "plan"):
        if check.problems is None:
            typer.echo(f"{check.title}: skipped ({check.unavailable})")
            continue
        bad = {cell: problems for cell, problems in check.problems.items() if problems}
        if bad:
            _fail(EXIT_PARITY, f"{check.failure}: {bad}")
        typer.echo(f"{check.title}: ok for {len(check.problems)} cell(s)")


def _execute_plan(
    plan, out, *, repeats: int | None, skip_prepare: bool, preflight: bool, budget_minutes: float | None = None
) -> None:
    """The machine preflight (exit 4 naming what is missing) and each framework's own check that needs it installed
    (e.g. Miles's own parser), both skipped by --no-preflight, then `run.py execute` of the written plan into the same
    folder."""
    from scripts.benchmark.commands.execute import execute_impl
    from scripts.benchmark.runner.preflight import check_can_execute

    if preflight:
        missing = check_can_execute(plan.data, skip_prepare=skip_prepare)
        if missing:
            _fail(EXIT_CANNOT_EXECUTE, "cannot execute the plan on this machine:\n  - " + "\n  - ".join(missing))
        _installed_checks(plan.data)
    overrides = {"repeats": repeats, "skip_prepare": skip_prepare, "budget_s": _seconds(budget_minutes)}
    code = execute_impl(out / "plan.json", out, overrides, resume=False, preflight=False)
    if code:
        raise typer.Exit(code)


def _seconds(minutes: float | None) -> float | None:
    return None if minutes is None else minutes * 60


def _installed_checks(plan_data) -> None:
    """Each framework's own check that needs it installed here (e.g. Miles's own parse_args on its cells), before
    any GPU time is spent: exit 4 when the tool cannot run, 2 when it rejects a cell (runner/preflight.py)."""
    from scripts.benchmark.runner.preflight import installed_check_rejections

    rejected, unavailable, passed = installed_check_rejections(plan_data)
    if unavailable:
        _fail(EXIT_CANNOT_EXECUTE, f"cannot execute the plan on this machine: {unavailable[0]}")
    if rejected:
        _fail(EXIT_BAD_INPUT, "\n".join(rejected))
    for line in passed:
        typer.echo(line)


def main_callback(
    ctx: typer.Context,
    backend: str = typer.Option("all", help="fsdp, megatron or all"),
    compare_verl: bool = typer.Option(
        False, "--compare-verl/--no-compare-verl", help="also plan the matched VERL cells"
    ),
    preset: str = typer.Option(None, help="preset name (scripts/benchmark/presets/<name>.yaml)"),
    spec: str = typer.Option(None, "--spec", help="a spec YAML file instead of a preset"),
    layout: str = typer.Option(None, help="colocate or disaggregated", show_default="the spec's"),
    output_dir: str = typer.Option(None, help="folder for plan.json, cells/, parity.md (required)"),
    dry_run: bool = typer.Option(False, "--dry-run/--run", help="write the plan and stop, or also run it"),
    num_steps: int = typer.Option(None, help="override run.num_steps", show_default="the spec's"),
    gpus_per_node: int = typer.Option(None, help="override run.gpus_per_node", show_default="the spec's"),
    miles_root: str = typer.Option(
        None, help="Miles checkout on the GPU node (absolute)", show_default="$MILES_ROOT or /root/miles"
    ),
    megatron_root: str = typer.Option(
        None, help="Megatron-LM checkout (absolute)", show_default="$MEGATRON_ROOT or /root/Megatron-LM"
    ),
    repeats: int = typer.Option(
        None, help="repeats of every cell, interleaved (run only)", show_default="3 with --compare-verl, else 1"
    ),
    skip_prepare: bool = typer.Option(
        False, "--skip-prepare/--prepare", help="skip the download/convert steps (run only)"
    ),
    wandb: bool = typer.Option(
        False,
        "--wandb/--no-wandb",
        help="also log both frameworks to wandb (spec tracking.wandb; key from $WANDB_API_KEY)",
    ),
    force: bool = typer.Option(
        False, "--force/--no-force", help="move a run or another plan already in --output-dir aside (never deleted)"
    ),
    preflight: bool = typer.Option(
        True, "--preflight/--no-preflight", help="check GPUs, frameworks and data before running (run only)"
    ),
    miles_version: str = typer.Option(
        None, "--miles-version", help="the Miles the launches target: 31f1ca9 (default) or the release 0.0.2"
    ),
    check_miles: bool = typer.Option(
        False,
        "--check-miles",
        help="dry run: also run the installed Miles's own parser (--miles-root, python3 on PATH) on the Miles cells",
    ),
    candidate: str = typer.Option(
        None,
        "--candidate",
        help="the measured side: a registered framework, optionally @TARGET",
        show_default="miles at --miles-version",
    ),
    reference: str = typer.Option(
        None,
        "--reference",
        help="the side it is compared with, NAME[@TARGET] (a second target of the same framework compares two builds)",
        show_default="none; --compare-verl means verl",
    ),
    candidate_root: str = typer.Option(
        None,
        "--candidate-root",
        help="the candidate's own checkout (absolute path on the GPU node), e.g. a PR head",
        show_default="the framework's own root option",
    ),
    reference_root: str = typer.Option(
        None,
        "--reference-root",
        help="the reference's own checkout (absolute path on the GPU node), e.g. the PR's merge base",
        show_default="the framework's own root option",
    ),
    learning_run: bool = typer.Option(
        False,
        "--learning-run",
        help="a run for the learning guard: run.mode learning, 200 steps (or --num-steps >= 200), the same batch",
    ),
    train_only: bool = typer.Option(
        False,
        "--train-only",
        help="run.mode train-only: the candidate records one rollout (once, cached), every cell trains on it",
    ),
    pr_workload: bool = typer.Option(
        False,
        "--pr-workload",
        help="the PR check's workload: the preset's model and loop at a small batch, short responses, 40 steps",
    ),
    sequential: bool = typer.Option(
        False,
        "--sequential",
        help="a head/base pair in rounds until the paired check decides (`run.py ab`), at most --repeats rounds",
    ),
    budget_minutes: float = typer.Option(
        None,
        "--budget-minutes",
        help="refuse a plan that does not fit this many minutes of the node, and stop the run at them",
        show_default="no budget",
    ),
    step_seconds: float = typer.Option(
        None,
        "--step-seconds",
        help="the preset's full-scale step time, measured or known (its cells' cost uses it)",
        show_default="the history's (--cost-store), else the cost model's",
    ),
    cost_store: str = typer.Option(
        None,
        "--cost-store",
        help="history store whose recorded runs of the same cells give measured step and start-up times",
        show_default="none: the cost model",
    ),
) -> None:
    """Plan (and, without --dry-run, run) the Miles vs VERL matrix for one spec.

    Example:

    \b
        run.py --backend all --compare-verl --preset qwen3-1.7b-base --output-dir bench-out/q --dry-run
    """
    if ctx.invoked_subcommand is not None:
        return
    if output_dir is None:
        typer.echo(ctx.get_help())
        _fail(EXIT_BAD_INPUT, "--output-dir is required")
    plan_impl(
        backend=backend,
        compare_verl=compare_verl,
        preset=preset,
        spec_file=spec,
        layout=layout,
        output_dir=output_dir,
        dry_run=dry_run,
        num_steps=num_steps,
        gpus_per_node=gpus_per_node,
        miles_root=miles_root,
        megatron_root=megatron_root,
        repeats=repeats,
        skip_prepare=skip_prepare,
        wandb=wandb,
        miles_version=miles_version,
        check_miles=check_miles,
        force=force,
        preflight=preflight,
        candidate=candidate,
        reference=reference,
        roots=(candidate_root, reference_root),
        learning_run=learning_run,
        train_only=train_only,
        pr_workload=pr_workload,
        cost=CostRequest(
            sequential=sequential, budget_minutes=budget_minutes, step_seconds=step_seconds, cost_store=cost_store
        ),
    )


def register(app: typer.Typer) -> None:
    app.callback(invoke_without_command=True)(main_callback)
