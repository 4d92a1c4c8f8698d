"""`run.py bisect`'s rule (history/bisect.py) with probes whose verdicts the test decides, its budget and answer,
the range it proposes from the nightly's change points, its bad inputs, and VERL bisected from checkouts. The git
plumbing and the stand-in runs are in test_bisect_runs.py; its error rates on generated launches in
test_bisect_rates.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from scripts.benchmark.history.bisect import (
    BisectState,
    ProbeCost,
    ProbeResult,
    budget_refusal,
    probe_budget_s,
    run_bisect,
)
from scripts.benchmark.history.bisect_report import render_bisect
from tests.benchmark.bisect_repo import git
from tests.benchmark.history_fixtures import write_report
from tests.benchmark.standins.plans import run_py

COST = ProbeCost(round_budget_s=600.0, round_typical_s=400.0, round_upper_s=800.0, gpus=8)
"""A round: 10 min as the budget counts it, a probe at least 30 min."""
BIG = 1e9


def oracle(slowdown_at: int | None, *, undecided: dict[int, int] | None = None, untestable: set[int] = frozenset()):
    """A probe whose verdict is the truth: REGRESSED when the slowdown lies after the base and at or before the
    head; `undecided` heads answer INCONCLUSIVE that many times first; each probe runs its rounds and takes them."""
    undecided = dict(undecided or {})
    calls: list[tuple[int, int, int, float]] = []

    def probe(head: int, base: int, most: int, allowed_s: float) -> ProbeResult:
        calls.append((head, base, most, allowed_s))
        rounds = min(most, int(allowed_s // COST.round_budget_s))
        seconds = rounds * COST.round_budget_s
        if head in untestable:
            decision = "UNTESTABLE"
        elif undecided.get(head, 0) > 0:
            undecided[head] -= 1
            decision = "INCONCLUSIVE"
        else:
            decision = "REGRESSED" if slowdown_at is not None and base < slowdown_at <= head else "NO_DIFFERENCE"
        return ProbeResult(head=head, base=base, decision=decision, rounds=rounds, max_rounds=most, seconds=seconds)

    probe.calls = calls
    return probe


def _bisect(commits: int, probe, budget_s: float = BIG, rounds: int = 3) -> BisectState:
    return run_bisect(
        BisectState(commits=[f"{i:012x}" + "0" * 28 for i in range(commits)]), COST, budget_s, probe, rounds=rounds
    )


@pytest.mark.parametrize("commits", [2, 3, 9, 16, 64])
def test_every_commit_is_named_in_at_most_the_halvings_and_the_last_one_is_probed_itself(commits):
    for planted in range(1, commits):
        state = _bisect(commits, oracle(planted))
        halvings = math.ceil(math.log2(commits - 1))
        assert (state.outcome(), state.bad, state.good) == ("named", planted, planted - 1)
        assert len(state.probes) <= halvings + (planted == commits - 1), (planted, state.probes)


def test_a_slowdown_the_probes_cannot_see_is_not_reproduced_and_nothing_is_named():
    """Every probe equal: the bad end is probed last against the commit before it, and the answer names nothing."""
    state = _bisect(64, oracle(None))
    assert state.outcome() == "not-reproduced" and len(state.probes) == 6 + 1
    assert state.probes[-1].head == 63 and state.probes[-1].base == 62
    answer = render_bisect(state, ["subject"] * 64, gpus=8)
    assert answer.startswith(f"### Bisect: no slowdown between {62:012x} and {63:012x}")
    assert "made the step slower" not in answer and "Nothing is named" in answer


def test_an_inconclusive_probe_reruns_the_same_head_with_twice_the_rounds():
    probe = oracle(5, undecided={4: 2})
    state = _bisect(9, probe, rounds=4)
    assert state.outcome() == "named" and state.bad == 5
    heads = [(head, most) for head, _, most, _ in probe.calls]
    assert heads[:3] == [(4, 4), (4, 8), (4, 16)] and heads[3][1] == 4


def test_the_budget_ends_the_bisect_with_the_range_it_knows():
    """Probes that never decide, in a budget of 200 min: each takes what it is given; the bisect stops when not one
    more probe at its minimum fits, says why and which commits are left, and never spends more than the budget."""
    probe = oracle(5, undecided={4: 99})
    state = _bisect(9, probe, budget_s=200 * 60, rounds=6)
    assert state.outcome() == "stopped" and state.spent_s <= 200 * 60
    assert state.stopped.startswith("budget: ") and "a probe takes at least 30 min" in state.stopped
    answer = render_bisect(state, [f"change {i}" for i in range(9)], gpus=8)
    assert answer.startswith("### Bisect: stopped with 8 commit(s) left")
    assert (
        f"{1:012x} (change 1)" in answer and f"{8:012x} (change 8)" in answer and "larger --budget-minutes" in answer
    )


def test_each_probe_keeps_the_minimum_of_the_probes_still_needed():
    state = BisectState(commits=[str(i) for i in range(17)])  # 16 after the good end: 4 halvings + the bad end
    assert state.probes_to_finish() == 5
    assert probe_budget_s(state, COST, 300 * 60) == pytest.approx((300 - 4 * 30) * 60)
    assert probe_budget_s(state, COST, 100 * 60) == pytest.approx(30 * 60)  # no room: the minimum
    assert probe_budget_s(state, COST, 29 * 60) is None


def test_an_untestable_commit_is_skipped_and_an_unresolvable_range_says_so():
    probe = oracle(2, untestable={4})
    state = _bisect(9, probe)
    assert state.outcome() == "named" and state.bad == 2 and state.untestable == [4]
    assert [head for head, *_ in probe.calls] == [4, 3, 1, 2]  # the middle could not run: its nearest neighbour
    state = _bisect(9, oracle(4, untestable={4}))
    assert state.outcome() == "untestable" and (state.good, state.bad) == (3, 5)
    answer = render_bisect(state, [""] * 9, gpus=8)
    assert f"Commits that could not run: {4:012x}" in answer


def test_the_state_round_trips_through_its_json():
    state = _bisect(9, oracle(5, untestable={3}))
    again = BisectState.from_json(json.loads(json.dumps(state.to_json())))
    assert again == state and again.outcome() == "named"


def test_a_budget_that_cannot_finish_the_range_is_refused_with_what_fits():
    """63 commits after the good end: 6 halvings and the bad end, 7 probes of 30 min."""
    assert budget_refusal(63, COST, 210 * 60) is None
    problem = budget_refusal(63, COST, 200 * 60)
    assert problem == (
        "--budget-minutes 200: 63 commits after the good end take up to 7 probes of at least 3 rounds, 210 min of "
        "the node (upper start-ups; 30.0 min a probe); 6 probe(s) fit, which narrow 63 commits to 1; give "
        "--budget-minutes 210 or a range of at most 32 commit(s)"
    )
    assert "not one probe fits" in budget_refusal(63, COST, 20 * 60)


def test_a_named_commit_says_which_probe_saw_it():
    state = _bisect(9, oracle(5))
    answer = render_bisect(state, [f"change {i}" for i in range(9)], gpus=8)
    assert answer.startswith(f"### Bisect: {5:012x} (change 5) made the step slower")
    assert "Decided: the probe of" in answer and "every step of the range was a decided verdict" in answer
    assert answer.count("| slower |") == sum(p.decision == "REGRESSED" for p in state.probes)


# -- the command: bad input, the range from the history, VERL from checkouts ---------------------------------------


@pytest.fixture(scope="module")
def small_repo(tmp_path_factory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("repo")
    git(repo, "init", "-q")
    shas = []
    for i in range(30):
        (repo / "change.txt").write_text(f"{i}\n")
        git(repo, "add", "change.txt")
        git(repo, "commit", "-qm", f"change {i}")
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    return repo, shas


def _bisect_cli(repo: Path, out: Path, *args: str):
    return run_py("bisect", "--repo", str(repo), "--preset", "smoke", "--output-dir", str(out), "--dry-run", *args)


def test_bad_input_exits_2_with_one_message_and_writes_nothing(small_repo, tmp_path):
    repo, shas = small_repo
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    cases = {
        "unknown commit": (["--good", "nope", "--bad", shas[-1]], "--good: no commit 'nope'"),
        "reversed": (["--good", shas[5], "--bad", shas[2]], "comes before --good"),
        "no bad": (["--good", shas[5]], "give --good and --bad"),
        "not a repo": (["--good", shas[0], "--bad", shas[1], "--repo", str(tmp_path)], "not a git repository"),
        "framework": (["--good", shas[0], "--bad", shas[1], "--framework", "nope"], "--framework: unknown"),
        "repeats": (["--good", shas[0], "--bad", shas[1], "--repeats", "2"], "--repeats must be >= 3"),
        "budget": (["--good", shas[0], "--bad", shas[-1], "--budget-minutes", "60"], "--budget-minutes 60: 29"),
        "no store": (["--good", shas[0], "--bad", shas[1], "--store", str(tmp_path / "none.db")], "pass --create"),
        "history": (["--from-history"], "--from-history reads the change points of --store"),
        "both": (["--from-history", "--good", shas[0], "--store", str(tmp_path / "h.db"), "--create"], "not both"),
    }
    for name, (args, message) in cases.items():
        out = tmp_path / name.replace(" ", "-")
        result = _bisect_cli(repo, out, *args)
        assert result.returncode == 2, (name, result.stdout + result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr, (name, result.stderr)
        assert not out.exists(), name
    taken = _bisect_cli(repo, tmp_path / "full", "--good", shas[0], "--bad", shas[3])
    assert taken.returncode == 2 and "not empty and holds no bisect" in taken.stderr


def test_the_dry_run_states_the_range_and_its_cost_and_the_same_folder_goes_on(small_repo, tmp_path):
    repo, shas = small_repo
    out = tmp_path / "b"
    result = _bisect_cli(repo, out, "--good", shas[0][:8], "--bad", shas[-1], "--budget-minutes", "400")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"bisect miles: {shas[0][:12]}..{shas[-1][:12]}, 29 commit(s) after the good end" in result.stdout
    for line in (
        "cost miles-fsdp-colocate: start-up",
        "cost, a round (a launch a side): node wall time",
        "cost, to name a commit: 5-6 probes of 3-6 rounds",
        "budget: --budget-minutes 400 of the node",
    ):
        assert line in result.stdout, line
    data = json.loads((out / "bisect.json").read_text())
    assert data["commits"] == shas and data["subjects"][1] == "change 1" and data["state"]["probes"] == []
    assert sorted(p.name for p in out.iterdir()) == ["bisect.json"]
    again = _bisect_cli(repo, out, "--good", shas[0], "--bad", shas[-1])
    assert again.returncode == 0, again.stderr
    other = _bisect_cli(repo, out, "--good", shas[1], "--bad", shas[-1])
    assert other.returncode == 2 and "holds another bisect" in other.stderr


def test_the_nightlys_change_point_proposes_the_range_and_the_command(small_repo, tmp_path):
    """A series whose step got 10% slower at night 15 of 30 (each night a commit of the repository): `history`
    writes the bisect command under its change points, and `bisect --from-history` takes the same range."""
    from scripts.benchmark.commands.history import _settings, record_impl
    from scripts.benchmark.contracts.history_record import Provenance

    repo, shas = small_repo
    store = f"sqlite:///{tmp_path / 'h.db'}"
    for i, sha in enumerate(shas):
        run_dir = tmp_path / f"night-{i:02d}"
        write_report(run_dir, slowdown=1.1 if i >= 15 else 1.0, seed=i, generated_at=f"2026-11-{1 + i:02d}T00:00:00")
        record_impl(run_dir, store, Provenance(commit=sha, trigger="schedule"), trust="yes", baseline_reset=False,
                    settings=_settings(None, None, None, None, None), create=True)  # fmt: skip
    history = run_py("history", "--store", store, "--output-dir", str(tmp_path / "hist"), "--metric", "step_time_s")
    assert history.returncode == 0, history.stderr
    command = f"python scripts/benchmark/run.py bisect --good {shas[14][:12]} --bad {shas[15][:12]} --preset smoke"
    assert command in (tmp_path / "hist" / "history.md").read_text()
    out = tmp_path / "b"
    proposed = run_py("bisect", "--from-history", "--store", store, "--repo", str(repo), "--output-dir", str(out),
                      "--dry-run")  # fmt: skip
    assert proposed.returncode == 0, proposed.stdout + proposed.stderr
    assert f"commits {shas[14][:12]}..{shas[15][:12]}" in proposed.stdout and command in proposed.stdout
    assert json.loads((out / "bisect.json").read_text())["commits"] == shas[14:16]
    elsewhere = run_py("bisect", "--from-history", "--store", store, "--repo", str(repo), "--backend", "megatron",
                       "--output-dir", str(tmp_path / "none"), "--dry-run")  # fmt: skip
    assert elsewhere.returncode == 2 and "no change point where a miles series got slower" in elsewhere.stderr


def test_verl_is_bisected_from_its_own_checkouts(tmp_path):
    """A VERL side with a checkout runs that checkout's package (first on PYTHONPATH); the pair differs only there."""
    sides = ["--candidate", "verl", "--candidate-root", "/ci/verl-head", "--reference", "verl", "--reference-root"]
    planned = run_py("--preset", "smoke", "--backend", "fsdp", "--pr-workload", "--sequential", "--output-dir",
                     str(tmp_path / "v"), "--dry-run", *sides, "/ci/verl-base")  # fmt: skip
    assert planned.returncode == 0, planned.stdout + planned.stderr
    plan = json.loads((tmp_path / "v" / "plan.json").read_text())
    assert [c["env"]["PYTHONPATH"] for c in plan["cells"]] == ["/ci/verl-head", "/ci/verl-base"]
    assert [c["launch_argv"] for c in plan["cells"]][0] == plan["cells"][1]["launch_argv"]
    parity = json.loads((tmp_path / "v" / "parity.json").read_text())
    assert [r["knob"] for r in parity["pairs"][0]["rows"] if r["status"] != "matched"] == ["checkout"]
    from scripts.benchmark.frameworks import registry

    missing = registry.get("verl").preflight(plan["cells"])
    assert missing == [
        f"the VERL checkout /ci/verl-{x} has no verl/__init__.py on this machine" for x in ("base", "head")
    ]


def test_a_framework_that_runs_no_checkout_cannot_be_bisected(tmp_path):
    from scripts.benchmark.frameworks import registry
    from scripts.benchmark.run import build_app
    from tests.benchmark.toy_framework import ADAPTER as TOY
    from typer.testing import CliRunner

    registry.register(TOY)
    try:
        with pytest.raises(ValueError, match="--reference-root: Toy runs its installed package, not a checkout"):
            registry.side_arg("reference", "toy", "/ci/toy-base")
        argv = ["bisect", "--framework", "toy", "--good", "a", "--bad", "b", "--output-dir", str(tmp_path / "x")]
        result = CliRunner().invoke(build_app(), [*argv, "--preset", "smoke"])
    finally:
        registry.unregister(TOY.name)
    output = result.output + (result.stderr if result.stderr_bytes else "")
    assert result.exit_code == 2 and "Toy runs its installed package, not a checkout" in output, output
    assert not (tmp_path / "x").exists()
