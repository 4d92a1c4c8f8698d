"""One probe of `run.py bisect`: a head commit against the good end, each from its own git worktree, run exactly as
the PR check runs a PR head against its merge base, judged by `ab`'s rule and recorded into the history.

- The run: the main command in a child process, `--pr-workload --sequential --budget-minutes B --repeats R` with
  `--candidate F --candidate-root HEAD --reference F --reference-root BASE` (printed before it starts), into
  `DIR/probes/NN-<head sha>`. The child runs in its own session; Ctrl-C or SIGTERM of the bisect is passed on to it
  (that one process, never a name), and the bisect waits while it stops its launches in order.
- The verdict: `ab`'s (commands/ab.py `judge_pairs`), written as the probe's ab.md; a head whose launches all failed
  while the base's ran is UNTESTABLE (the bisect skips that commit); when neither side ran, the bisect stops (exit
  2): the good end does not run either, so nothing after it can be judged.
- The record (`--store`): every cell of the probe's report as one untrusted run of its series, each with its own
  side's commit (head or good end), trigger `bisect`: the probes stand in the history beside the nightly's runs.
- `probe_cost(plan_cost)`: one round of the probe's plan as the bisect budgets it.

Caveats:
- A Miles commit from before the benchmark's tracking backend (miles/utils/bench_tracking.py) writes no sink the
  in-tree target reads: its launches fail, so such a commit is untestable, and such a good end stops the bisect.
- A child that exits 2, 3 or 4 (its plan refused, the launches do not match, the machine cannot run them) ran no
  launch: the bisect stops there with that exit code.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import typer

from scripts.benchmark.history.bisect import UNDECIDED, UNTESTABLE, ProbeCost, ProbeResult
from scripts.benchmark.plan.cost import PlanCost
from scripts.benchmark.runner.worktrees import Commit, Worktrees

RUN_PY = Path(__file__).resolve().parents[1] / "run.py"
STOP_WAIT_S = 900.0
"""How long the bisect waits for a probe it asked to stop (the runner's own stop is bounded well within it)."""
TRIGGER = "bisect"


class ProbeFailed(Exception):
    """The probe's run stopped before any launch (or was interrupted): the bisect ends with `exit_code`."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True, kw_only=True)
class ProbeSetup:
    """What every probe of one bisect shares: the framework, the workload, the folder, the store."""

    framework: str
    workload: tuple[str, ...]
    """`--preset NAME` or `--spec FILE`."""
    backend: str
    output_dir: Path
    store: str | None = None
    preflight: bool = True
    skip_prepare: bool = False

    def argv(self, run_dir: Path, head: Path, base: Path, *, rounds: int, budget_s: float | None) -> list[str]:
        """The probe's main command (the PR check's, with these two checkouts)."""
        argv = [sys.executable, str(RUN_PY), "--backend", self.backend, *self.workload, "--pr-workload"]
        argv += ["--sequential", "--repeats", str(rounds), "--output-dir", str(run_dir)]
        argv += ["--candidate", self.framework, "--candidate-root", str(head)]
        argv += ["--reference", self.framework, "--reference-root", str(base)]
        if budget_s is not None:  # rounded up: the probe's plan must accept the minimum it was given
            argv += ["--budget-minutes", f"{math.ceil(budget_s / 60 * 100) / 100:.2f}"]
        if self.store:
            argv += ["--cost-store", self.store]
        return (
            argv + ([] if self.preflight else ["--no-preflight"]) + (["--skip-prepare"] if self.skip_prepare else [])
        )


def probe_cost(cost: PlanCost) -> ProbeCost:
    """A probe plan's round (one launch of each of its cells) in node seconds, as budgeted and as typically run."""
    return ProbeCost(
        round_budget_s=cost.budget_wall_s(1),
        round_typical_s=cost.wall_s("typical", 1),
        round_upper_s=cost.wall_s("upper", 1),
        gpus=max(c.gpus for c in cost.launches),
    )


class ProbeRunner:
    """`run_bisect`'s probe: worktrees, the child run, its verdict and its record (module docstring)."""

    def __init__(self, setup: ProbeSetup, commits: list[Commit], worktrees: Worktrees):
        self.setup = setup
        self.commits = commits
        self.worktrees = worktrees

    def __call__(self, head: int, base: int, most: int, allowed_s: float) -> ProbeResult:
        head_commit, base_commit = self.commits[head], self.commits[base]
        run_dir = self._next_run_dir(head_commit)
        try:
            head_root, base_root = self.worktrees.add(head_commit.sha), self.worktrees.add(base_commit.sha)
            argv = self.setup.argv(run_dir, head_root, base_root, rounds=most, budget_s=allowed_s)
            typer.echo(
                f"probe {run_dir.name}: {head_commit.short} (commit {head} of {len(self.commits) - 1} after the good "
                f"end) against the good end {base_commit.short}: up to {most} rounds within {allowed_s / 60:.0f} "
                f"min\n  {' '.join(argv[1:])}",
            )
            started = time.monotonic()
            code = run_child(argv)
            seconds = time.monotonic() - started
        finally:
            self.worktrees.remove_all()
        if code in (2, 3, 4):
            raise ProbeFailed(f"probe {run_dir.name} ran no launch: its run exited {code} (above)", code)
        result = judge_probe(run_dir, head=head, base=base, most=most, seconds=seconds)
        if self.setup.store:
            try:
                record_probe(self.setup.store, run_dir, head_commit.sha, base_commit.sha)
            except Exception as exc:  # the probe's GPU time is spent: its verdict still counts, the record is named
                typer.echo(f"warning: probe {run_dir.name} not recorded into --store: {type(exc).__name__}: {exc}")
        return result

    def _next_run_dir(self, head: Commit) -> Path:
        probes = self.setup.output_dir / "probes"
        number = len(list(probes.iterdir())) + 1 if probes.is_dir() else 1
        return probes / f"{number:02d}-{head.short}"


def run_child(argv: list[str]) -> int:
    """Run argv in its own session and wait; an interruption of the bisect (KeyboardInterrupt, or the exception its
    SIGTERM handler raises) is passed on to this one child, which is then waited for before it propagates."""
    process = subprocess.Popen(argv, start_new_session=True)
    try:
        return process.wait()
    except BaseException as exc:
        if process.poll() is None:  # still our unreaped child: its pid cannot have been reused
            process.send_signal(signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM)
            try:
                process.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        raise


def judge_probe(run_dir: Path, *, head: int, base: int, most: int, seconds: float) -> ProbeResult:
    """The probe's verdict by `ab`'s rule (written as run_dir/ab.md); UNTESTABLE when the head never ran."""
    from scripts.benchmark.commands.ab import judge_pairs
    from scripts.benchmark.commands.history import write_verdict
    from scripts.benchmark.contracts.report import REPORT_FILE

    common = dict(head=head, base=base, max_rounds=most, seconds=seconds, run_dir=str(run_dir))
    if not (run_dir / REPORT_FILE).is_file():
        return ProbeResult(decision="COULD_NOT_JUDGE", rounds=0, note="the run wrote no report.json", **common)
    markdown, checks, notes, looks = judge_pairs(run_dir)
    write_verdict(markdown, checks, notes, run_dir / "ab.md", step_summary=False)
    if not looks:
        return ProbeResult(decision="COULD_NOT_JUDGE", rounds=0, note="no head/base pair in the report", **common)
    decided = next(iter(looks.values()))
    decision = decided.decision
    head_ran, base_ran = decided.repeats.get("candidate", 0), decided.repeats.get("reference", 0)
    if decision in UNDECIDED and not head_ran and not base_ran:
        raise ProbeFailed(f"probe {run_dir.name}: neither side ran a usable launch (see {run_dir}/manifest.json)", 2)
    if decision in UNDECIDED and not head_ran:
        decision = UNTESTABLE
    return ProbeResult(
        decision="COULD_NOT_JUDGE" if decision == "CONTINUE" else decision,
        rounds=decided.round,
        ratio=decided.ratio,
        ci_low=decided.ci_low,
        ci_high=decided.ci_high,
        note=decided.note,
        **common,
    )


def record_probe(store_url: str, run_dir: Path, head_sha: str, base_sha: str) -> list[int]:
    """Every cell of the probe's report into the history, untrusted, each with its own side's commit."""
    from scripts.benchmark.contracts.history_record import Provenance
    from scripts.benchmark.contracts.report import read_run_report
    from scripts.benchmark.history.report_input import read_report_runs
    from scripts.benchmark.history.store import HistoryStore

    sides = read_run_report(run_dir).side_pair()
    commit = {sides.candidate.name: head_sha, sides.reference.name if sides.reference else "": base_sha}
    ids = []
    with HistoryStore(store_url, create=False) as store:
        for run in read_report_runs(run_dir):
            if store.recorded_run_id(run) is not None:
                continue
            provenance = Provenance(
                commit=commit.get(run.series.side or "", head_sha),
                ci_run_id=os.environ.get("GITHUB_RUN_ID"),
                trigger=TRIGGER,
                ref=f"bisect {base_sha[:12]}..{head_sha[:12]}",
            )
            ids.append(store.record(run, provenance, trusted=False, baseline_reset=False))
    typer.echo(f"recorded probe {run_dir.name} as untrusted run(s) {ids} (trigger {TRIGGER})")
    return ids
