"""Validation of `run.py bisect` (history/bisect.py) on generated launches: how often it names the commit that made
the step slower, how often it names a wrong one as decided, and what it spends. The rates the docs quote.

- A range of `commits` commits, the good end first; one commit after it (uniform) makes every later step `gap` slower
  (5%). Each probe is the paired check run exactly as the runner runs it (paired_check_validation.sequential_check:
  rounds of AB then BA launches of the PR workload's 40 steps, each cut to its steady state by the report's code and
  judged by the runner's rule), at most the rounds the bisect allows and the probe's budget holds; the launches are
  drawn by the same generators (paired_check_validation.pair_launches), the head `gap` slower than its base when the
  slowdown lies between them.
- Cost: every launch takes the typical launch time of the bisect workflow's own probe plan (`workflow_probe_cost`:
  the PR workload of qwen3-1.7b-base, fsdp, as plan/cost.py states it); the budget is charged as the runner charges
  it, and each probe gets what `run_bisect` gives it.
- Run `python -m tests.benchmark.bisect_validation` for the docs' table (docs/benchmark/history.md); the slow tests
  in test_bisect_rates.py run seeded, smaller versions and assert the bounds.

Caveats:
- The generators are models, not measurements; launches as long as the cost model's typical one.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scripts.benchmark.history.bisect import BisectState, ProbeCost, ProbeResult, run_bisect
from scripts.benchmark.runner.rounds import REPORT_RESERVE_S, REPORT_RESERVE_SHARE
from tests.benchmark.paired_check_validation import pair_launches, sequential_check, wilson

COMMITS = 64
"""Commits in the simulated range, the good end first."""
GAP = 1.05
MAX_PROBES = 7
"""Probes a 64-commit range is allowed to name its commit in: its 6 halvings and one rerun or the bad end."""
ROUNDS = 6
"""A probe's most rounds before a rerun: the PR check's sequential default."""
WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "benchmark-bisect.yml"


@dataclass(frozen=True, kw_only=True)
class BisectRates:
    generator: str
    cv: float
    gap: float
    trials: int
    budget_min: float
    named_right: float
    """Named the planted commit (decided)."""
    named_right_within: float
    """... within MAX_PROBES probes."""
    named_wrong: float
    """Named another commit with a decided verdict."""
    stopped: float
    """Stopped with a range (budget), or only untestable commits left."""
    not_reproduced: float
    probes_mean: float
    probes_max: int
    spent_mean_min: float
    spent_max_min: float
    gpu_hours_mean: float


def simulated_probe(rng: np.random.Generator, *, slowdown_at: int | None, cv: float, gap: float, generator: str,
                    cost: ProbeCost):  # fmt: skip
    """A probe as `run_bisect` calls it: the paired check of head against base on drawn launches, as many rounds as
    the probe's budget holds (the runner's reserve kept), charged at the typical launch time."""

    def probe(head: int, base: int, most: int, allowed_s: float) -> ProbeResult:
        reserve = min(REPORT_RESERVE_S, REPORT_RESERVE_SHARE * allowed_s)
        fits = int((allowed_s - reserve) // cost.round_typical_s)
        rounds = max(min(most, fits), 1)
        slower = slowdown_at is not None and base < slowdown_at <= head
        drawn = pair_launches(generator, rng, cv, gap if slower else 1.0, rounds)
        look, ran = sequential_check(lambda side, i: drawn[side][i], rounds)
        return ProbeResult(
            head=head, base=base, decision=look.decision, rounds=ran, max_rounds=rounds,
            seconds=ran * cost.round_typical_s, ratio=look.ratio,
        )  # fmt: skip

    return probe


def bisect_rates(
    seed: int,
    trials: int,
    *,
    cost: ProbeCost,
    budget_s: float,
    cv: float,
    gap: float = GAP,
    commits: int = COMMITS,
    generator: str = "project",
) -> BisectRates:
    """`trials` bisects of a range with one slowdown of `gap` (none when gap is 1: every commit equal)."""
    rng = np.random.default_rng(seed)
    outcomes, probes, spent = [], [], []
    for _ in range(trials):
        at = int(rng.integers(1, commits)) if gap != 1.0 else None
        probe = simulated_probe(rng, slowdown_at=at, cv=cv, gap=gap, generator=generator, cost=cost)
        state = run_bisect(BisectState(commits=[str(i) for i in range(commits)]), cost, budget_s, probe, rounds=ROUNDS)
        outcome = state.outcome()
        if outcome == "named":
            outcome = "right" if state.bad == at else "wrong"
        outcomes.append(outcome)
        probes.append(len(state.probes))
        spent.append(state.spent_s)
    outcomes_arr, probes_arr = np.asarray(outcomes), np.asarray(probes)

    def share(*names: str) -> float:
        return float(np.isin(outcomes_arr, names).mean())

    return BisectRates(
        generator=generator,
        cv=cv,
        gap=gap,
        trials=trials,
        budget_min=budget_s / 60,
        named_right=share("right"),
        named_right_within=float(((outcomes_arr == "right") & (probes_arr <= MAX_PROBES)).mean()),
        named_wrong=share("wrong"),
        stopped=share("stopped", "untestable"),
        not_reproduced=share("not-reproduced"),
        probes_mean=float(probes_arr.mean()),
        probes_max=int(probes_arr.max()),
        spent_mean_min=float(np.mean(spent)) / 60,
        spent_max_min=float(np.max(spent)) / 60,
        gpu_hours_mean=float(np.mean(spent)) * cost.gpus / 3600,
    )


def workflow_budget_minutes() -> float:
    import yaml

    return float(yaml.safe_load(WORKFLOW.read_text())["jobs"]["bisect"]["env"]["BUDGET_MINUTES"])


def workflow_probe_cost() -> ProbeCost:
    """The cost of one round of the bisect workflow's probe: its preset's PR workload planned by the real command
    (a dry run of the probe `run.py bisect` plans), read back as the bisect reads it."""
    from scripts.benchmark.commands.bisect_probe import probe_cost
    from scripts.benchmark.plan.cost import PlanCost
    from tests.benchmark.standins.plans import run_py

    with tempfile.TemporaryDirectory() as tmp:
        sides = ["--candidate", "miles", "--candidate-root", "/ci/head", "--reference", "miles", "--reference-root"]
        planned = run_py("--preset", "qwen3-1.7b-base", "--backend", "fsdp", "--pr-workload", "--sequential",
                         "--output-dir", f"{tmp}/plan", "--dry-run", *sides, "/ci/base")  # fmt: skip
        if planned.returncode != 0:
            raise RuntimeError(planned.stdout + planned.stderr)
        data = json.loads((Path(tmp) / "plan" / "plan.json").read_text())
    return probe_cost(PlanCost.from_json(data["cost"]))


def _cell(rate: float, n: int) -> str:
    low, high = wilson(rate, n)
    return f"{rate:.1%} [{low:.1%}, {high:.1%}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cost, budget = workflow_probe_cost(), workflow_budget_minutes()
    tight = math.ceil(7 * cost.min_probe_s / 60)
    print(
        f"A probe's round: {cost.round_typical_s / 60:.1f} min typical, {cost.round_budget_s / 60:.1f} min as the "
        f"budget counts it, {cost.gpus} GPUs; {COMMITS} commits; {args.trials} trials a row; seed {args.seed}.\n"
    )
    print(
        "| generator | step CV | slowdown | budget (min) | trials | right commit named | ... within 7 probes | "
        "wrong commit named (decided) | stopped with a range | not reproduced | probes (mean / max) | "
        "node min (mean / max) | GPU-hours (mean) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = [
        ("project", 0.02, GAP, budget),
        ("project", 0.02, GAP, tight),
        ("project", 0.05, GAP, budget),
        ("simulator", 0.02, GAP, budget),
        ("project", 0.02, 1.0, budget),
    ]
    for generator, cv, gap, minutes in rows:
        r = bisect_rates(args.seed, args.trials, cost=cost, budget_s=minutes * 60, cv=cv, gap=gap, generator=generator)
        n = r.trials
        print(
            f"| {generator} | {cv:.0%} | {gap - 1:.0%} | {minutes:g} | {n} | {_cell(r.named_right, n)} | "
            f"{_cell(r.named_right_within, n)} | {_cell(r.named_wrong, n)} | {_cell(r.stopped, n)} | "
            f"{_cell(r.not_reproduced, n)} | {r.probes_mean:.1f} / {r.probes_max} | "
            f"{r.spent_mean_min:.0f} / {r.spent_max_min:.0f} | {r.gpu_hours_mean:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
