"""`record`, `check`, `untrust` and `history`: the benchmark's history database and its regression check.

- `record DIR --store URL`: store every cell of DIR/report.json as one run of its series, with provenance; the run is
  trusted when it passes the check (or with --baseline-reset), untrusted with --untrusted; a lone flagged run is
  trusted again when the next run of its series passes. Cells already recorded
  are skipped and named, so rerunning an interrupted `record` completes it.
- `check DIR --store URL`: judge DIR against the trusted history; writes DIR/check.md (and appends it to
  $GITHUB_STEP_SUMMARY); exit 1 regression, 0 pass, 2 could not judge. Its notes add the learning guard's power:
  the repeats a side that see each planted difference 9 times in 10, from the spread between the history's repeats,
  with the plan's cost at that number (power_notes.py).
- `untrust --store URL (--run-id N ... | --commit SHA) --reason TEXT`: revoke trust (rows are kept); --restore undoes.
- `history --store URL`: change points per series and gated metric, with a trend PNG each; under them, the
  `run.py bisect` command of every change point where a series of the nightly's own framework got slower.
- `ci-record DIR`: the run's headline per-step series in Miles's merged-record form (DIR/ci-record.jsonl),
  for Miles's metric-history gate (tests/benchmark/miles_ci_gates.py).

Caveats:
- sqlalchemy, scipy, otava and matplotlib are imported inside the command bodies (fast --help).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from scripts.benchmark.contracts.history_record import Provenance, RunToRecord
    from scripts.benchmark.history.check import CheckSettings
    from scripts.benchmark.history.store import HistoryStore

_STORE_HELP = "history database: a SQLite file path or URL (sqlite:///x.db), or postgresql://user@host/db"

StoreOpt = Annotated[str, typer.Option("--store", help=_STORE_HELP)]
CreateOpt = Annotated[
    bool, typer.Option("--create/--no-create", help="make the database when it does not exist yet (else exit 2)")
]


def _could_not(what: str, exc: Exception) -> typer.Exit:
    """One line for a failure to judge or record: the extra to install, the store or the file at fault, the
    database's own reason (never the SQL statement and its values), else the error; secrets redacted."""
    from scripts.benchmark.errors import UserError, database_error, echo_error, missing_module_error
    from scripts.benchmark.history.store import StoreMissing

    if isinstance(exc, ModuleNotFoundError) and (error := missing_module_error(exc)) is not None:
        message = error.format_message()
    elif isinstance(exc, (StoreMissing, UserError)):
        message = str(exc)
    elif (error := database_error(exc)) is not None:
        message = error.format_message()
    else:
        message = f"{type(exc).__name__}: {exc}"
    echo_error(f"{what}: {message}")
    return typer.Exit(2)


def _settings(
    thresholds: list[str] | None,
    window: int | None,
    min_history: int | None,
    alpha: float | None,
    drift_horizon: int | None,
) -> CheckSettings:
    """CheckSettings from the CLI; an option left out keeps the CheckSettings default (one source of defaults)."""
    from scripts.benchmark.history.check import DEFAULT_GATES, CheckSettings, MetricGate

    gates = dict(DEFAULT_GATES)
    for item in thresholds or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"--threshold expects METRIC=FRACTION, got {item!r}")
        old = gates.get(name, MetricGate(threshold=0.0, required=False))
        gates[name] = MetricGate(threshold=float(value), required=old.required)
    given = dict(window=window, min_history=min_history, alpha=alpha, drift_horizon=drift_horizon)
    return CheckSettings(gates=gates, **{k: v for k, v in given.items() if v is not None})


def check_impl(
    run_dir: Path, store_url: str, settings: CheckSettings, output: Path | None, *, create: bool = False
) -> int:
    """Judge run_dir, write the markdown verdict (and check.json) and return the exit code."""
    from scripts.benchmark.commands.power_notes import history_power_lines, read_plan_data
    from scripts.benchmark.contracts.outputs import refuse_overwrite
    from scripts.benchmark.history.check import render_check_markdown
    from scripts.benchmark.history.gate import check_runs
    from scripts.benchmark.history.learning_check import learning_changes
    from scripts.benchmark.history.report_input import read_report, read_report_runs
    from scripts.benchmark.history.store import HistoryStore, sqlite_file

    output = output or Path(run_dir) / "check.md"
    store_file = sqlite_file(store_url)
    for path in (output, output.with_suffix(".json")):
        refuse_overwrite(path, "--output", inputs=[store_file] if store_file is not None else [])
    with HistoryStore(store_url, create=create) as store:
        runs = read_report_runs(run_dir)
        checks, notes = check_runs(store, runs, settings)
        report = read_report(run_dir)
        notes += learning_changes(store, runs, window=settings.window, margins=report.learning_margins)
        notes += history_power_lines(store, store_url, runs, report, read_plan_data(run_dir))
    markdown = render_check_markdown(checks, title="Performance check", notes=notes)
    return write_verdict(markdown, checks, notes, output)


def write_verdict(markdown: str, checks: list, notes: list[str], output: Path, *, step_summary: bool = True) -> int:
    """Write a verdict as OUTPUT (markdown) and its .json twin, append it to the CI step summary (unless a command
    that posts its own summary asks not to), print it; returns the exit code. Shared by `check` and `ab`, whose
    verdicts read alike. Neither file may be a run folder's own."""
    from scripts.benchmark.contracts.outputs import refuse_overwrite
    from scripts.benchmark.errors import UserError
    from scripts.benchmark.history.check import exit_code

    from miles.utils.bench_metrics import write_text_atomic

    if output.suffix == ".json":
        raise UserError(f"--output {output}: the verdict's .json twin is written beside it; give a .md file")
    refuse_overwrite(output, "--output")
    refuse_overwrite(output.with_suffix(".json"), "--output (its .json twin)")
    rows = [{**c.__dict__, "verdict": c.verdict.value} for c in checks]
    write_text_atomic(output, markdown)
    write_text_atomic(
        output.with_suffix(".json"),
        json.dumps({"exit_code": exit_code(checks), "checks": rows, "notes": notes}, indent=1),
    )
    summary = os.environ.get("GITHUB_STEP_SUMMARY") if step_summary else None
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(markdown + "\n")
    typer.echo(markdown)
    return exit_code(checks)


def record_impl(
    run_dir: Path,
    store_url: str,
    provenance: Provenance,
    *,
    trust: str,
    baseline_reset: bool,
    settings: CheckSettings,
    create: bool = False,
) -> list[int]:
    """Record every cell not recorded yet (a rerun completes an interrupted record); returns the new run ids.

    Trust 'auto' means trusted iff the cell passes the check (0), as in Miles's gate, judged as `check` judges the
    run: every cell together, at the night's level split over the cells, also when a rerun completes an interrupted
    record. Judged alone, each cell got the whole night's level: slow-but-passing nights were left out and the
    baseline drifted fast. A flagged cell is stored
    untrusted with a note; when the next run of its series passes and the run before the flagged one passed too,
    the flagged run is trusted again (a lone flag is noise; kept out, it biased the baseline low).
    """
    from scripts.benchmark.contracts.outputs import refuse_overwrite
    from scripts.benchmark.history.check import exit_code
    from scripts.benchmark.history.gate import check_runs
    from scripts.benchmark.history.report_input import read_report_runs
    from scripts.benchmark.history.store import FLAGGED_NOTE, HistoryStore, sqlite_file

    if (store_file := sqlite_file(store_url)) is not None:
        refuse_overwrite(store_file, "--store")  # SQLite writes into an empty file: run.lock would become a store
    ids = []
    with HistoryStore(store_url, create=create, writes=True) as store:
        runs, every_cell = [], read_report_runs(run_dir)
        for run in every_cell:
            if (done := store.recorded_run_id(run)) is not None:
                typer.echo(f"skipped {run.series.label()} cell {run.cell_id}: already recorded as run {done}")
            else:
                runs.append(run)
        # judged as the whole run, every cell at its share of the night's level, also when an interrupted record is
        # completed (a cell already recorded is judged against the runs before it): the trust it stores is the one an
        # uninterrupted record would have stored
        auto = runs and trust == "auto" and not baseline_reset
        judged = check_runs(store, every_cell, settings)[0] if auto else []
        for run in runs:
            trusted = trust == "yes" or baseline_reset
            note = None
            if trust == "auto" and not baseline_reset:
                code = exit_code([c for c in judged if c.cell_id == run.cell_id])
                trusted = code == 0
                note = FLAGGED_NOTE if code == 1 else None  # a cell that could not be judged is never cleared
                if trusted:
                    _trust_lone_flagged_run(store, run)
            run_id = store.record(run, provenance, trusted=trusted, baseline_reset=baseline_reset, trust_note=note)
            typer.echo(f"recorded run {run_id}: {run.series.label()} cell {run.cell_id} trusted={trusted}")
            ids.append(run_id)
    return ids


def _trust_lone_flagged_run(store: HistoryStore, run: RunToRecord) -> None:
    """A passing run clears its series' previous run when only that one was flagged: one night flagged between two
    that pass is noise the baseline must keep (left out, the baseline loses its slow tail); two in a row stay out."""
    from scripts.benchmark.history.store import RESTORED_NOTE, lone_flagged_run

    previous = lone_flagged_run(store.runs(run.series.label()))
    if previous is not None:
        store.set_trusted([previous.id], trusted=True, note=RESTORED_NOTE)
        typer.echo(f"run {previous.id} trusted again: the only flagged run before this one, which passed")


def register(app: typer.Typer) -> None:
    @app.command("record")
    def record(
        run_dir: Annotated[Path, typer.Argument(help="run folder holding report.json")],
        store: StoreOpt = "bench-history.db",
        commit: Annotated[str | None, typer.Option(help="commit sha", show_default="$GITHUB_SHA")] = None,
        pr: Annotated[int | None, typer.Option(help="PR number", show_default="from $GITHUB_REF")] = None,
        ci_run_id: Annotated[str | None, typer.Option(help="CI run id", show_default="$GITHUB_RUN_ID")] = None,
        trigger: Annotated[str | None, typer.Option(help="schedule, pull_request, manual...")] = None,
        ref: Annotated[str | None, typer.Option(help="git ref", show_default="$GITHUB_REF")] = None,
        untrusted: Annotated[
            bool, typer.Option("--untrusted/--auto-trust", help="store the run but never use it as a baseline")
        ] = False,
        trusted: Annotated[
            bool, typer.Option("--trusted/--check-first", help="trust the run without checking it first")
        ] = False,
        baseline_reset: Annotated[
            bool,
            typer.Option(
                "--baseline-reset/--no-baseline-reset",
                help="an accepted change of level: baselines start again at this run",
            ),
        ] = False,
        create: Annotated[
            bool, typer.Option("--create/--no-create", "--init", help="make the database if it does not exist yet")
        ] = False,
    ) -> None:
        """Record a run folder's report.json into the history database.

        Example (the first run of a new history):

        \b
            run.py record bench-out/q --store sqlite:///bench-history.db --create
        """
        from scripts.benchmark.history.report_input import provenance_from_env

        if untrusted and (trusted or baseline_reset):
            raise typer.BadParameter("--untrusted contradicts --trusted / --baseline-reset", param_hint="--untrusted")
        provenance = provenance_from_env(commit=commit, pr=pr, ci_run_id=ci_run_id, trigger=trigger, ref=ref)
        trust = "no" if untrusted else "yes" if trusted else "auto"
        try:
            record_impl(
                run_dir, store, provenance, trust=trust, baseline_reset=baseline_reset,
                settings=_settings(None, None, None, None, None), create=create,
            )  # fmt: skip
        except Exception as e:  # the nightly job must see the failure, distinct from a regression (1)
            raise _could_not("not recorded", e) from e

    @app.command("check")
    def check(
        run_dir: Annotated[Path, typer.Argument(help="run folder holding report.json")],
        store: StoreOpt = "bench-history.db",
        output: Annotated[Path | None, typer.Option(help="markdown verdict", show_default="DIR/check.md")] = None,
        threshold: Annotated[
            list[str] | None, typer.Option(help="METRIC=FRACTION practical threshold, repeatable")
        ] = None,
        window: Annotated[int | None, typer.Option(help="trusted runs in the baseline", show_default="30")] = None,
        min_history: Annotated[
            int | None, typer.Option(help="fewer trusted runs: cold start, passes", show_default="5")
        ] = None,
        alpha: Annotated[
            float | None,
            typer.Option(help="significance level of the whole night, split over its cells", show_default="0.04"),
        ] = None,
        drift_horizon: Annotated[
            int | None, typer.Option(help="the anchor window ends this many trusted runs ago", show_default="30")
        ] = None,
        create: CreateOpt = False,
    ) -> None:
        """Exit 1 if the run regressed against its series' trusted history, 0 if not, 2 if it could not judge.

        Example:

        \b
            run.py check bench-out/q --store sqlite:///bench-history.db
        """
        try:
            settings = _settings(threshold, window, min_history, alpha, drift_horizon)
            code = check_impl(run_dir, store, settings, output, create=create)
        except Exception as e:  # exit 1 must only ever mean "regression": any failure to judge is 2
            raise _could_not("could not judge", e) from e
        raise typer.Exit(code)

    _register_trust_and_history(app)


def _register_trust_and_history(app: typer.Typer) -> None:
    @app.command("untrust")
    def untrust(
        store: StoreOpt = "bench-history.db",
        run_id: Annotated[list[int] | None, typer.Option(help="run id, repeatable")] = None,
        commit: Annotated[str | None, typer.Option(help="every run of this commit (prefix)")] = None,
        reason: Annotated[str, typer.Option(help="why (kept with the run)")] = "",
        restore: Annotated[bool, typer.Option("--restore/--revoke", help="trust the runs again instead")] = False,
    ) -> None:
        """Revoke (or restore) the trusted flag of runs; no row is ever deleted.

        Example:

        \b
            run.py untrust --store sqlite:///bench-history.db --commit 1a2b3c4 --reason "noisy node"
        """
        from scripts.benchmark.errors import UserError
        from scripts.benchmark.history.store import HistoryStore, StoreMissing

        if not reason:
            raise UserError("--reason is required: it is kept with the run")
        try:
            db = HistoryStore(store, create=False, writes=True)
        except StoreMissing as exc:
            raise UserError(str(exc)) from exc
        with db:
            ids = list(run_id or []) + (db.run_ids_for_commit(commit) if commit else [])
            if not ids:
                typer.echo("error: no run selected (give --run-id or a --commit that has runs)", err=True)
                raise typer.Exit(2)
            changed = db.set_trusted(ids, trusted=restore, note=reason)
        missing = sorted(set(ids) - set(changed))
        typer.echo(f"{'trusted' if restore else 'untrusted'} runs {changed}")
        if missing:
            typer.echo(f"error: no such run id(s) {missing}", err=True)
            raise typer.Exit(2)

    @app.command("history")
    def history(
        store: StoreOpt = "bench-history.db",
        output_dir: Annotated[Path, typer.Option(help="history.md and one trend PNG per series")] = Path(
            "bench-history"
        ),
        series: Annotated[str | None, typer.Option(help="only series whose label contains this")] = None,
        metric: Annotated[list[str] | None, typer.Option(help="metrics", show_default="the gated ones")] = None,
        p_value: Annotated[float, typer.Option(help="Otava's max p-value")] = 0.001,
        min_segment: Annotated[int, typer.Option(help="minimum runs between change points")] = 5,
        window: Annotated[int, typer.Option(help="Otava's sliding window")] = 50,
        magnitude: Annotated[float, typer.Option(help="Otava's minimum relative change")] = 0.0,
        create: CreateOpt = False,
    ) -> None:
        """Change points (E-divisive means + t-test, as Apache Otava) per series, with a trend plot each.

        Example:

        \b
            run.py history --store sqlite:///bench-history.db --series qwen3-4b/ --output-dir bench-history
        """
        from scripts.benchmark.contracts.outputs import refuse_overwrite
        from scripts.benchmark.errors import UserError
        from scripts.benchmark.history.check import DEFAULT_GATES
        from scripts.benchmark.history.gate import render_changes_markdown, series_changes
        from scripts.benchmark.history.plot import plot_trace
        from scripts.benchmark.history.store import HistoryStore, StoreMissing, sqlite_file

        store_file = sqlite_file(store)
        refuse_overwrite(output_dir / "history.md", "--output-dir", inputs=[store_file] if store_file else [])
        try:
            db = HistoryStore(store, create=create)
        except StoreMissing as exc:
            raise UserError(str(exc)) from exc
        with db:
            traces = series_changes(
                db, metrics=metric or list(DEFAULT_GATES), series_filter=series, max_pvalue=p_value,
                min_segment=min_segment, window=window, min_magnitude=magnitude,
            )  # fmt: skip
        from miles.utils.bench_metrics import write_text_atomic

        plots = {(t.series, t.metric): str(plot_trace(t, output_dir)) for t in traces}
        markdown = render_changes_markdown(traces, plots=plots) + _bisect_proposals(traces)
        write_text_atomic(output_dir / "history.md", markdown)
        typer.echo(markdown)

    @app.command("ci-record")
    def ci_record(
        run_dir: Annotated[Path, typer.Argument(help="a run folder (its plan.json, manifest.json and metrics files)")],
        out: Annotated[Path | None, typer.Option(help="default: DIR/ci-record.jsonl")] = None,
    ) -> None:
        """Step time and throughput per step of every complete cell, as Miles's merged per-run JSONL.

        Example:

        \b
            run.py ci-record bench-runs/nightly
        """
        from scripts.benchmark.contracts.outputs import refuse_overwrite
        from scripts.benchmark.errors import UserError
        from scripts.benchmark.history.ci_record import write_merged_record

        if out is not None:
            refuse_overwrite(out, "--out", inputs=[run_dir / "plan.json"], instead=str(run_dir / "ci-record.jsonl"))
        try:
            written = write_merged_record(run_dir, out or run_dir / "ci-record.jsonl")
        except (ValueError, OSError) as exc:
            raise UserError(str(exc)) from exc
        typer.echo(f"wrote {written}")


def _bisect_proposals(traces) -> str:
    """Under the change points, a `run.py bisect` command for each one where a series of the framework whose commit
    the nightly records (its own repository's: the registry's default candidate) got slower."""
    from scripts.benchmark.frameworks import registry
    from scripts.benchmark.history.bisect_proposal import proposals_markdown, slowdowns

    return proposals_markdown(slowdowns(traces, {registry.DEFAULT_PAIR[0]}))
