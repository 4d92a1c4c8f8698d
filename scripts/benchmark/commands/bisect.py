"""`bisect`: which commit of a range made the step slower, on one node, within a budget of node time.

    run.py bisect --good SHA --bad SHA --repo DIR --output-dir D [--framework NAME] [--preset P | --spec F]
                  [--backend fsdp] [--budget-minutes 345] [--repeats 6] [--store URL] [--dry-run]
    run.py bisect --from-history --store URL --output-dir D [--preset P] [--backend B] [--series TEXT] [--dry-run]

- The range: good, then every commit after it up to bad on bad's first-parent line of --repo (runner/worktrees.py).
  `--from-history` takes it from the newest change point where the framework's nightly series got slower
  (history/bisect_proposal.py) and says which. Bad input exits 2 with one message, before anything runs.
- The cost, stated before anything runs: the probe's plan (the PR check's workload of the preset, planned as a dry
  run with the next probe's checkouts, its cost lines printed), one round of it, the probes a range of this size
  takes, and the budget. A range the budget cannot finish is refused (exit 2, nothing written) with what would fit.
- The probes (history/bisect.py `run_bisect`, commands/bisect_probe.py): the paired run of a head commit against the
  good end, narrowing by the verdict until one commit is left; an inconclusive probe reruns with twice the rounds
  while the budget lasts; each probe is recorded into --store as its own series points with its commits.
- The folder: D/bisect.json (the range and every probe, written after each), D/bisect.md (the answer, also printed
  and appended to the CI step summary), D/probes/NN-<sha>/ (each probe's run folder with its ab.md). Run
  the same command again on D to go on from the last probe (an interrupted probe starts again).
- Exit: 0 a commit named; 1 stopped with a range (budget, untestable commits) or the slowdown not reproduced; 2 bad
  input; 3/4 a probe's plan or machine check refused it; 130 interrupted. The worktrees it made are removed on every
  way out; those a killed bisect left are removed by the next one in D.
"""

from __future__ import annotations

import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from scripts.benchmark.errors import UserError

if TYPE_CHECKING:
    from scripts.benchmark.commands.bisect_probe import ProbeSetup
    from scripts.benchmark.history.bisect import BisectState, ProbeCost
    from scripts.benchmark.runner.worktrees import Commit

DEFAULT_BUDGET_MINUTES = 345.0
"""The bisect workflow's budget (.github/workflows/benchmark-bisect.yml): 7 probes of the 1.7B PR workload at their
minimum rounds (201 min as a budget counts them) and room for more rounds and reruns."""
STATE_FILE = "bisect.json"
RESULT_FILE = "bisect.md"
STATE_VERSION = 1
EXIT_NOT_FOUND = 1


@dataclass(frozen=True, kw_only=True)
class BisectRequest:
    good: str | None
    bad: str | None
    repo: Path
    output_dir: Path
    framework: str | None
    preset: str | None
    spec: str | None
    backend: str | None
    budget_minutes: float
    repeats: int
    store: str | None
    create: bool
    from_history: bool
    series: str | None
    dry_run: bool
    preflight: bool
    skip_prepare: bool


def bisect_impl(request: BisectRequest) -> int:
    from scripts.benchmark.commands.bisect_probe import ProbeSetup
    from scripts.benchmark.runner.worktrees import commit_range

    framework, request = _checked(request)
    try:
        commits = commit_range(request.repo, request.good, request.bad)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    out = request.output_dir.expanduser().absolute()
    state = _state_in(out, commits, request, framework)
    workload = ("--preset", request.preset) if request.preset else ("--spec", str(Path(request.spec).absolute()))
    setup = ProbeSetup(
        framework=framework, workload=workload, backend=request.backend or "fsdp", output_dir=out,
        store=request.store, preflight=request.preflight, skip_prepare=request.skip_prepare,
    )  # fmt: skip
    typer.echo(
        f"bisect {framework}: {commits[0].short}..{commits[-1].short}, {len(commits) - 1} commit(s) after the good "
        f"end on the first-parent line of {request.repo}"
        + (f"; resuming after {len(state.probes)} probe(s)" if state.probes else "")
    )
    cost = _probe_cost(setup, commits, state, request)
    if request.store:
        _check_store(request.store, request.create)
    if request.dry_run:
        _write_state(out, commits, request, framework, state)
        typer.echo("dry run: no probe run")
        return 0
    return _run(setup, commits, state, cost, request)


def _checked(request: BisectRequest) -> tuple[str, BisectRequest]:
    """The framework, and the request with its range (--from-history), after every check of the options."""
    from scripts.benchmark.frameworks import registry

    framework = request.framework or registry.DEFAULT_PAIR[0]
    try:
        adapter = registry.get(framework)
    except ValueError as exc:
        raise UserError(f"--framework: {exc}") from None
    if not adapter.runs_checkout:
        raise UserError(f"--framework {framework}: {adapter.label} runs its installed package, not a checkout")
    if not request.budget_minutes > 0:
        raise UserError(f"--budget-minutes must be > 0, got {request.budget_minutes:g}")
    if request.repeats < 3:
        raise UserError(f"--repeats must be >= 3 (the paired check needs 3 rounds), got {request.repeats}")
    if request.from_history and (request.good or request.bad):
        raise UserError("give either --from-history or --good/--bad, not both")
    if request.from_history and not request.store:
        raise UserError("--from-history reads the change points of --store URL: give --store")
    if not request.from_history and not (request.good and request.bad):
        raise UserError("give --good and --bad (or --from-history --store URL to take them from a change point)")
    if request.preset is not None and request.spec is not None:
        raise UserError("give either --preset NAME or --spec FILE, not both")
    if request.from_history:
        _check_store(request.store, create=False)
        request = _from_history(request, framework)
    if request.preset is None and request.spec is None:
        raise UserError("give --preset NAME or --spec FILE (the workload whose PR size is probed)")
    return framework, request


def _check_store(store: str, create: bool) -> None:
    from scripts.benchmark.history.store import HistoryStore, StoreMissing

    try:
        HistoryStore(store, create=create).close()
    except StoreMissing as exc:
        raise UserError(str(exc)) from None


def _from_history(request: BisectRequest, framework: str) -> BisectRequest:
    """The newest slowdown change point of the framework's nightly series (filtered by preset, backend, series)."""
    import dataclasses

    from scripts.benchmark.frameworks import registry
    from scripts.benchmark.history.bisect_proposal import METRIC, slowdowns
    from scripts.benchmark.history.gate import series_changes
    from scripts.benchmark.history.store import HistoryStore

    if framework != registry.DEFAULT_PAIR[0]:
        raise UserError(
            f"--from-history --framework {framework}: the nightly records the commit of its own repository "
            f"({registry.label_of(registry.DEFAULT_PAIR[0])}); give --good/--bad from {framework}'s repository"
        )
    with HistoryStore(request.store, create=False) as store:
        traces = series_changes(store, metrics=[METRIC], series_filter=request.series, max_pvalue=0.001,
                                min_segment=5, window=50, min_magnitude=0.0)  # fmt: skip
    found = [
        p for p in slowdowns(traces, {framework})
        if request.preset in (None, p.preset) and request.backend in (None, p.backend)
    ]  # fmt: skip
    if not found:
        raise UserError(f"--from-history: no change point where a {framework} series got slower in --store")
    chosen = found[0]
    typer.echo(
        f"from the history: {chosen.series} step time {chosen.change:+.1%} at run {chosen.first_run_after}, commits "
        f"{chosen.good[:12]}..{chosen.bad[:12]}\n  the same bisect: {chosen.command()}"
    )
    preset = request.preset or (None if request.spec else chosen.preset)
    return dataclasses.replace(
        request, good=chosen.good, bad=chosen.bad, preset=preset, backend=request.backend or chosen.backend
    )


def _identity(commits: list[Commit], request: BisectRequest, framework: str) -> dict:
    return {
        "framework": framework,
        "commits": [c.sha for c in commits],
        "workload": request.preset or request.spec,
        "backend": request.backend or "fsdp",
    }


def _state_in(out: Path, commits: list[Commit], request: BisectRequest, framework: str) -> BisectState:
    """A new bisect in a new or empty folder, or the one this folder holds when it is the same bisect (go on)."""
    from scripts.benchmark.history.bisect import BisectState

    path = out / STATE_FILE
    if out.exists() and not out.is_dir():
        raise UserError(f"--output-dir {out}: not a folder")
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            same = {k: data.get(k) for k in ("framework", "commits", "workload", "backend")}
            state = BisectState.from_json(data["state"])
        except (ValueError, KeyError, TypeError) as exc:
            raise UserError(f"--output-dir {out}: {STATE_FILE} cannot be read ({exc})") from None
        if same != _identity(commits, request, framework):
            raise UserError(f"--output-dir {out}: holds another bisect ({STATE_FILE}); give a new folder")
        state.stopped = ""  # a new budget may go on where the last one stopped
        return state
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"--output-dir {out}: not empty and holds no bisect ({STATE_FILE}); give a new folder")
    return BisectState(commits=[c.sha for c in commits])


def _write_state(out: Path, commits: list[Commit], request: BisectRequest, framework: str, state) -> None:
    from miles.utils.bench_metrics import write_text_atomic

    data = {
        "version": STATE_VERSION,
        **_identity(commits, request, framework),
        "subjects": [c.subject for c in commits],
        "repo": str(request.repo),
        "budget_minutes": request.budget_minutes,
        "state": state.to_json(),
    }
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / STATE_FILE, json.dumps(data, indent=1) + "\n")


def _probe_cost(setup: ProbeSetup, commits: list[Commit], state: BisectState, request: BisectRequest) -> ProbeCost:
    """Plan the next probe (its cost lines are printed), state the bisect's cost and budget, and refuse a range the
    budget cannot finish (nothing written)."""
    from scripts.benchmark.frameworks.launch import ray_shell_problem, uses_ray_job_submit
    from scripts.benchmark.history.bisect import budget_refusal, cost_lines

    head = state.next_head()
    cost, plan = _plan_probe(setup, commits, len(commits) - 1 if head is None else head, state.good, request)
    problem = ray_shell_problem(str(setup.output_dir))
    if problem and any(uses_ray_job_submit(cell["launch_argv"]) for cell in plan["cells"]):
        raise UserError(f"--output-dir {setup.output_dir}: {problem} (the probes are submitted as Ray jobs)")
    left_s = request.budget_minutes * 60 - state.spent_s
    for line in cost_lines(max(state.candidates, 1), cost, left_s, request.repeats):
        typer.echo(line)
    if head is not None and (problem := budget_refusal(state.candidates, cost, left_s)):
        raise UserError(problem)
    return cost


def _plan_probe(setup: ProbeSetup, commits: list[Commit], head: int, base: int, request: BisectRequest, *,
                quiet: bool = False) -> tuple[ProbeCost, dict]:  # fmt: skip
    """A probe's plan as its run will make it (a dry run of the main command in a temporary folder, the launch
    times the store has measured so far), and one round's cost read back from it."""
    import contextlib
    import io
    import tempfile

    from scripts.benchmark.commands.bisect_probe import probe_cost
    from scripts.benchmark.commands.plan import plan_impl
    from scripts.benchmark.commands.plan_cost import CostRequest
    from scripts.benchmark.plan.cost import PlanCost

    checkouts = setup.output_dir / "checkouts"
    roots = tuple(str(checkouts / commits[i].short) for i in (head, base))
    workload = dict(zip(("preset", "spec_file"), (request.preset, request.spec), strict=True))
    with tempfile.TemporaryDirectory(prefix="bisect-probe-plan-") as folder:
        with contextlib.redirect_stdout(io.StringIO()) if quiet else contextlib.nullcontext():
            plan_impl(
                backend=setup.backend, output_dir=folder, dry_run=True, repeats=request.repeats,
                candidate=setup.framework, reference=setup.framework, pr_workload=True, roots=roots,
                cost=CostRequest(sequential=True, cost_store=request.store), **workload,
            )  # fmt: skip
        plan = json.loads((Path(folder) / "plan.json").read_text(encoding="utf-8"))
    return probe_cost(PlanCost.from_json(plan["cost"])), plan


def _run(setup: ProbeSetup, commits: list[Commit], state: BisectState, cost: ProbeCost, request: BisectRequest) -> int:
    """The probes, with the worktrees removed and the state written on every way out."""
    from scripts.benchmark.commands.bisect_probe import ProbeFailed, ProbeRunner
    from scripts.benchmark.history.bisect import run_bisect
    from scripts.benchmark.runner.worktrees import Worktrees

    def persist(current: BisectState) -> None:
        _write_state(setup.output_dir, commits, request, setup.framework, current)

    def recost(head: int) -> ProbeCost:  # the store may hold the last probe's launches now
        return _plan_probe(setup, commits, head, state.good, request, quiet=True)[0]

    code = None
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        with Worktrees(request.repo, setup.output_dir / "checkouts") as worktrees:
            for stale in worktrees.clear_stale():
                typer.echo(f"removed the worktree {stale} a stopped bisect left")
            persist(state)
            probe = ProbeRunner(setup, commits, worktrees)
            run_bisect(state, cost, request.budget_minutes * 60, probe, rounds=request.repeats, on_probe=persist,
                       recost=recost if request.store else None)  # fmt: skip
    except ProbeFailed as exc:
        state.stopped, code = str(exc), exc.exit_code
    except (KeyboardInterrupt, _Terminated):
        state.stopped, code = "interrupted: run the same command again to go on", 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        persist(state)
    _result(setup.output_dir, commits, state, cost)
    if code is not None:
        return code
    return 0 if state.outcome() == "named" else EXIT_NOT_FOUND


class _Terminated(Exception):
    """SIGTERM, as an exception: the probe in flight is stopped and every worktree removed before the exit."""


def _terminated(signum, frame) -> None:
    raise _Terminated()


def _result(out: Path, commits: list[Commit], state: BisectState, cost: ProbeCost) -> None:
    from scripts.benchmark.history.bisect_report import render_bisect

    markdown = render_bisect(state, [c.subject for c in commits], gpus=cost.gpus)
    (out / RESULT_FILE).write_text(markdown, encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(markdown + "\n")
    typer.echo(markdown)


def register(app: typer.Typer) -> None:
    @app.command("bisect")
    def bisect(
        output_dir: Annotated[Path, typer.Option(help="the bisect's folder: new, empty, or this bisect's (go on)")],
        good: Annotated[str | None, typer.Option(help="a commit without the slowdown")] = None,
        bad: Annotated[str | None, typer.Option(help="a later commit with it")] = None,
        repo: Annotated[Path, typer.Option(help="the framework's git repository")] = Path("."),
        framework: Annotated[
            str | None,
            typer.Option(help="a registered framework that runs a checkout", show_default="the default candidate"),
        ] = None,
        preset: Annotated[str | None, typer.Option(help="preset whose PR workload each probe runs")] = None,
        spec: Annotated[str | None, typer.Option("--spec", help="a spec YAML file instead of a preset")] = None,
        backend: Annotated[str | None, typer.Option(help="fsdp or megatron", show_default="fsdp")] = None,
        budget_minutes: Annotated[
            float, typer.Option(help="node time for every probe together (GPU-hours: x the GPUs)")
        ] = DEFAULT_BUDGET_MINUTES,
        repeats: Annotated[int, typer.Option(help="a probe's most rounds; twice as many to rerun one")] = 6,
        store: Annotated[
            str | None, typer.Option(help="history store: records every probe, gives measured launch times")
        ] = None,
        create: Annotated[bool, typer.Option("--create/--no-create", help="make --store if missing")] = False,
        from_history: Annotated[
            bool, typer.Option("--from-history", help="the range of the newest slowdown change point in --store")
        ] = False,
        series: Annotated[str | None, typer.Option(help="--from-history: series whose label has this")] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="state the range and the cost, run nothing")] = False,
        preflight: Annotated[
            bool, typer.Option("--preflight/--no-preflight", help="each probe's machine checks")
        ] = True,
        skip_prepare: Annotated[
            bool, typer.Option("--skip-prepare/--prepare", help="each probe skips its downloads")
        ] = False,
    ) -> None:
        """Name the commit of a range that made the step slower: paired probes against the good end, in a budget.

        Example:

        \b
            run.py bisect --good 1a2b3c4 --bad 5d6e7f8 --repo /ci/miles --preset qwen3-1.7b-base \\
                --output-dir bisect-out --store "$BENCH_HISTORY_URL" --dry-run
        """
        request = BisectRequest(
            good=good, bad=bad, repo=repo, output_dir=output_dir, framework=framework, preset=preset, spec=spec,
            backend=backend, budget_minutes=budget_minutes, repeats=repeats, store=store, create=create,
            from_history=from_history, series=series, dry_run=dry_run, preflight=preflight,
            skip_prepare=skip_prepare,
        )  # fmt: skip
        raise typer.Exit(bisect_impl(request))
