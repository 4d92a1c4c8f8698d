"""record / check / untrust / history against a real SQLite file and a real PostgreSQL server (same test code)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from scripts.benchmark.commands.history import _settings, check_impl, record_impl
from scripts.benchmark.contracts.history_record import Provenance
from scripts.benchmark.history.report_input import provenance_from_env, read_report_runs
from scripts.benchmark.history.store import HistoryStore
from tests.benchmark.history_fixtures import ExternalPostgres, PostgresServer, postgres_bindir, write_report

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_PY = REPO_ROOT / "scripts" / "benchmark" / "run.py"


def _no_postgres(reason: str) -> None:
    """CI (BENCH_REQUIRE_POSTGRES=1) must test PostgreSQL for real: a missing server fails there, skips elsewhere."""
    if os.environ.get("BENCH_REQUIRE_POSTGRES") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def pg_server():
    external_url = os.environ.get("BENCH_TEST_POSTGRES_URL")
    if external_url:  # the server .ci/run installed and started
        yield ExternalPostgres(external_url)
        return
    bindir = postgres_bindir()
    if bindir is None:
        _no_postgres("PostgreSQL server binaries (initdb, pg_ctl) not found; install the `postgresql` package")
    try:
        server = PostgresServer(bindir)
    except KeyError:
        _no_postgres("running as root and there is no `postgres` account to run initdb as (initdb refuses root)")
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    server = request.getfixturevalue("pg_server")
    return server.create_database(f"bench_{uuid.uuid4().hex[:12]}")


def _record(store_url: str, run_dir: Path, *, commit: str, trust: str = "auto", reset: bool = False) -> list[int]:
    provenance = Provenance(
        commit=commit, pr=None, ci_run_id=f"ci-{commit}", trigger="schedule", ref="refs/heads/main"
    )
    return record_impl(
        run_dir,
        store_url,
        provenance,
        trust=trust,
        baseline_reset=reset,
        settings=_settings(None, None, None, None, None),
        create=True,
    )


def _seed_history(store_url: str, root: Path, count: int, *, level=lambda i: 1.0, start: int = 0) -> None:
    for i in range(start, start + count):
        run_dir = root / f"night-{i:03d}"
        write_report(
            run_dir, slowdown=level(i), seed=i, generated_at=f"2026-11-{1 + i % 28:02d}T0{i % 10}:00:{i % 60:02d}"
        )
        _record(store_url, run_dir, commit=f"{i:07x}aaaa", trust="yes")


def _check(store_url: str, run_dir: Path, tmp_path: Path) -> tuple[int, str, dict]:
    out = tmp_path / f"verdict-{uuid.uuid4().hex[:6]}.md"
    code = check_impl(run_dir, store_url, _settings(None, None, None, None, None), out, create=True)
    return code, out.read_text(), json.loads(out.with_suffix(".json").read_text())


class TestHistoryStore:
    def test_record_keeps_series_identity_and_provenance_per_cell(self, store_url, tmp_path):
        """Each cell of a report is one run of its own series, with the CI provenance attached."""
        write_report(tmp_path / "run", frameworks=("miles", "verl"))
        ids = _record(store_url, tmp_path / "run", commit="deadbeef")
        assert len(ids) == 2
        with HistoryStore(store_url) as store:
            labels = store.list_series()
            assert labels == [
                "smoke/miles/fsdp/colocate/8x NVIDIA H200/abcdef123456/r2",
                "smoke/verl/fsdp/colocate/8x NVIDIA H200/abcdef123456/r2",
            ]
            run = store.runs(labels[0])[0]
            assert (run.commit, run.ci_run_id, run.trigger, run.trusted) == (
                "deadbeef",
                "ci-deadbeef",
                "schedule",
                True,
            )
            value = store.values([run.id], "step_time_s")[run.id]
            assert value == pytest.approx(60.0, rel=0.02)

    def test_recording_the_same_report_twice_records_nothing_twice(self, store_url, tmp_path):
        """A re-run of the nightly step must not double-count a run in the baseline; the store itself refuses."""
        write_report(tmp_path / "run")
        (first,) = _record(store_url, tmp_path / "run", commit="c1")
        assert _record(store_url, tmp_path / "run", commit="c1") == []
        with HistoryStore(store_url) as store:
            assert [r.id for r in store.runs(store.list_series()[0])] == [first]
            with pytest.raises(ValueError, match=f"already recorded as run {first}"):
                store.record(read_report_runs(tmp_path / "run")[0], Provenance(),
                             trusted=True, baseline_reset=False)  # fmt: skip

    def test_a_rerun_completes_an_interrupted_record_and_names_the_cells_it_skips(self, store_url, tmp_path):
        """An interrupted record (1 of 2 cells stored) is completed by running the real CLI again, exit 0."""
        run_dir = write_report(tmp_path / "run", frameworks=("miles", "verl")).parent
        first, second = read_report_runs(run_dir)
        with HistoryStore(store_url, create=True) as store:
            kept = store.record(first, Provenance(commit="c1"), trusted=True, baseline_reset=False)
        cli = [sys.executable, str(RUN_PY), "record", str(run_dir), "--store", store_url, "--commit", "c1"]
        done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"skipped {first.series.label()} cell {first.cell_id}: already recorded as run {kept}" in done.stdout
        with HistoryStore(store_url) as store:
            assert store.recorded_run_id(first) == kept
            assert store.recorded_run_id(second) not in (None, kept)

    def test_untrust_flips_the_flag_and_keeps_the_row_and_restore_undoes_it(self, store_url, tmp_path):
        """Trust is revocable without deleting anything, through the real CLI."""
        write_report(tmp_path / "run")
        (run_id,) = _record(store_url, tmp_path / "run", commit="feedface")
        cli = [
            sys.executable,
            str(RUN_PY),
            "untrust",
            "--store",
            store_url,
            "--commit",
            "feed",
            "--reason",
            "bad node",
        ]
        assert subprocess.run(cli, capture_output=True, text=True, timeout=120).returncode == 0
        with HistoryStore(store_url) as store:
            (run,) = store.runs(store.list_series()[0])
            assert (run.id, run.trusted, run.trust_note) == (run_id, False, "bad node")
            assert store.values([run_id], "step_time_s")[run_id] is not None
        restore = [sys.executable, str(RUN_PY), "untrust", "--store", store_url, "--run-id", str(run_id), "--restore",
                   "--reason", "node was fine"]  # fmt: skip
        assert subprocess.run(restore, capture_output=True, text=True, timeout=120).returncode == 0
        with HistoryStore(store_url) as store:
            assert store.runs(store.list_series()[0])[0].trusted is True
        missing = [sys.executable, str(RUN_PY), "untrust", "--store", store_url, "--run-id", "999", "--reason", "x"]
        result = subprocess.run(missing, capture_output=True, text=True, timeout=120)
        assert result.returncode == 2 and "no such run id(s) [999]" in result.stderr


class TestCheck:
    def test_cold_start_passes_with_a_note(self, store_url, tmp_path):
        write_report(tmp_path / "cand")
        code, markdown, data = _check(store_url, tmp_path / "cand", tmp_path)
        assert code == 0
        assert "cold start" in markdown and "INACTIVE" in markdown

    def test_unchanged_run_passes_and_slower_run_fails_through_the_cli(self, store_url, tmp_path):
        """The real command's exit code is the CI signal: 0 unchanged, 1 regressed, with the verdict in markdown."""
        _seed_history(store_url, tmp_path, 8)
        write_report(tmp_path / "same", seed=100)
        write_report(tmp_path / "slow", seed=101, slowdown=1.10)
        summary = tmp_path / "summary.md"
        env = {**os.environ, "GITHUB_STEP_SUMMARY": str(summary)}
        same = subprocess.run([sys.executable, str(RUN_PY), "check", str(tmp_path / "same"), "--store", store_url],
                              capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
        slow = subprocess.run([sys.executable, str(RUN_PY), "check", str(tmp_path / "slow"), "--store", store_url],
                              capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
        assert same.returncode == 0, same.stdout + same.stderr
        assert slow.returncode == 1, slow.stdout + slow.stderr
        verdict = (tmp_path / "slow" / "check.md").read_text()
        row = next(line for line in verdict.splitlines() if "| step_time_s |" in line)
        assert "**REGRESSED**" in row and "+10." in row
        rate_row = next(line for line in verdict.splitlines() if "| train_tokens_per_s |" in line)
        assert "**REGRESSED**" in rate_row and "-9." in rate_row  # higher-is-better metric fell
        assert summary.read_text().count("### Performance check") == 2

    def test_a_run_of_other_repeats_is_never_judged_against_this_baseline(self, store_url, tmp_path):
        """Same spec, other repeats: a 1-repeat value spreads more than the 2-repeat baseline's, so it is another
        series (cold start), never a regression against a baseline of another design."""
        _seed_history(store_url, tmp_path, 8)
        write_report(tmp_path / "one-repeat", seed=100, slowdown=1.10, repeats=1)
        code, markdown, data = _check(store_url, tmp_path / "one-repeat", tmp_path)
        verdicts = {c["metric"]: c["verdict"] for c in data["checks"]}
        assert code == 0 and verdicts["step_time_s"] == "INACTIVE", markdown
        write_report(tmp_path / "two-repeats", seed=101, slowdown=1.10, repeats=2)
        code, markdown, data = _check(store_url, tmp_path / "two-repeats", tmp_path)
        assert code == 1, markdown

    def test_record_trusts_a_night_the_check_passes_at_the_nights_level(self, store_url, tmp_path):
        """Two cells slower at one-sided p = 3%: the night's check (4% split over two cells, 2% each) passes them,
        so auto-trust must keep them (judged alone at 4% they were left out, biasing the baseline fast)."""
        from scipy import stats

        from scripts.benchmark.history.check import DEFAULT_GATES, CheckSettings

        both = ("miles", "verl")
        levels = [1.0 + 0.02 * k for k in (-2, -1, 0, 1, 2, -2, -1, 0, 1, 2)]
        for i, level in enumerate(levels):
            write_report(tmp_path / f"n{i}", slowdown=level, noise=0.0, frameworks=both, generated_at=f"2026-11-0{i}")
            _record(store_url, tmp_path / f"n{i}", commit=f"n{i}", trust="yes")
        n, sd = len(levels), float(np.std(levels, ddof=1))
        slowdown = 1.0 + stats.t.ppf(1 - 0.03, n - 1) * sd * math.sqrt(1 + 1 / n)
        assert slowdown - 1 > DEFAULT_GATES["step_time_s"].threshold  # beyond the practical threshold too
        assert CheckSettings().test_alpha(2) < 0.03 < CheckSettings().alpha
        write_report(tmp_path / "night", slowdown=slowdown, noise=0.0, frameworks=both, generated_at="2026-11-20")
        code, markdown, _ = _check(store_url, tmp_path / "night", tmp_path)
        assert code == 0, markdown
        _record(store_url, tmp_path / "night", commit="night")
        with HistoryStore(store_url) as store:
            last = [store.runs(label)[-1] for label in store.list_series()]
        assert [(r.commit, r.trusted) for r in last] == [("night", True), ("night", True)]

    def test_a_record_completed_after_an_interruption_stores_the_trust_of_an_uninterrupted_one(
        self, store_url, tmp_path
    ):
        """As above, a night at one-sided p = 3% in both cells, but its record interrupted after the first cell: the
        rerun judges the run as a whole (two cells, 2% each) and trusts the second cell as an uninterrupted record
        does, instead of judging it alone at the night's 4% and leaving it out."""
        from scipy import stats

        both = ("miles", "verl")
        levels = [1.0 + 0.02 * k for k in (-2, -1, 0, 1, 2, -2, -1, 0, 1, 2)]
        for i, level in enumerate(levels):
            write_report(tmp_path / f"n{i}", slowdown=level, noise=0.0, frameworks=both, generated_at=f"2026-11-0{i}")
            _record(store_url, tmp_path / f"n{i}", commit=f"n{i}", trust="yes")
        n, sd = len(levels), float(np.std(levels, ddof=1))
        slowdown = 1.0 + stats.t.ppf(1 - 0.03, n - 1) * sd * math.sqrt(1 + 1 / n)
        run_dir = write_report(tmp_path / "night", slowdown=slowdown, noise=0.0, frameworks=both,
                               generated_at="2026-11-20").parent  # fmt: skip
        first, second = read_report_runs(run_dir)
        with HistoryStore(store_url) as store:  # the interrupted record stored the first cell, trusted (it passed)
            store.record(first, Provenance(commit="night"), trusted=True, baseline_reset=False)
        _record(store_url, run_dir, commit="night")
        with HistoryStore(store_url) as store:
            last = store.runs(second.series.label())[-1]
        assert (last.commit, last.trusted, last.trust_note) == ("night", True, None)

    @pytest.mark.parametrize("command", ["history", "record", "check", "untrust"])
    @pytest.mark.parametrize("url", ["postgresql://bench:pw@127.0.0.1:port/db", "nosuchdb://x/y"])
    def test_a_store_url_that_is_no_database_url_is_one_line_exit_2(self, tmp_path, command, url):
        """A mistyped --store (a port that is no number, an unknown kind) is bad input: no traceback, no password."""
        write_report(tmp_path / "cand")
        argv = {"history": [], "untrust": ["--run-id", "1", "--reason", "x"]}.get(command, [str(tmp_path / "cand")])
        done = subprocess.run([sys.executable, str(RUN_PY), command, *argv, "--store", url],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr and "pw" not in done.stderr
        assert done.stderr.startswith("error: ") and "--store " in done.stderr and len(done.stderr.splitlines()) == 1

    def test_check_after_record_of_the_same_run_never_uses_the_run_as_its_own_baseline(self, store_url, tmp_path):
        """A slow run recorded (trusted by hand) and then checked: judged against the nights before it, and told."""
        _seed_history(store_url, tmp_path, 8)
        write_report(tmp_path / "slow", seed=100, slowdown=1.10)
        _record(store_url, tmp_path / "slow", commit="slow", trust="yes")
        code, markdown, data = _check(store_url, tmp_path / "slow", tmp_path)
        step = next(c for c in data["checks"] if c["metric"] == "step_time_s")
        assert code == 1 and step["n_baseline"] == 8, markdown
        assert any("already recorded as run 9; judged against the runs before it" in n for n in data["notes"])

    def test_a_database_failing_mid_record_is_one_line_without_the_statement_or_its_values(self, tmp_path):
        """The database goes wrong under `record` (here: a table gone): its own reason in one line, never the SQL
        statement SQLAlchemy appends with its parameters (the run folder, the commit, the environment record)."""
        import sqlite3

        store = tmp_path / "history.db"
        write_report(tmp_path / "first")
        _record(f"sqlite:///{store}", tmp_path / "first", commit="c1")
        with sqlite3.connect(store) as db:
            db.execute("DROP TABLE bench_values")
        write_report(tmp_path / "second", seed=2, generated_at="2026-12-02T00:00:00+00:00")
        cli = [sys.executable, str(RUN_PY), "record", str(tmp_path / "second"), "--store", str(store)]
        done = subprocess.run([*cli, "--commit", "c0ffee42"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: not recorded: the history database failed (OperationalError: ")
        assert "no such table: bench_values" in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
        assert "INSERT" not in done.stderr and "c0ffee42" not in done.stderr and "Traceback" not in done.stderr

    def test_an_unreachable_store_is_could_not_judge_never_regression(self, tmp_path):
        """Exit 1 is reserved for a regression; a database that cannot be reached is exit 2."""
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # nothing listens there once the socket is closed
        write_report(tmp_path / "cand")
        store = f"postgresql://bench@127.0.0.1:{port}/none?connect_timeout=5"
        result = subprocess.run([sys.executable, str(RUN_PY), "check", str(tmp_path / "cand"), "--store", store],
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == 2 and "could not judge: --store" in result.stderr
        assert "cannot open the database" in result.stderr and "Traceback" not in result.stderr

    def test_faster_run_is_improved_not_regressed(self, store_url, tmp_path):
        _seed_history(store_url, tmp_path, 8)
        write_report(tmp_path / "fast", seed=100, slowdown=0.9)
        code, markdown, data = _check(store_url, tmp_path / "fast", tmp_path)
        assert code == 0
        verdicts = {c["metric"]: c["verdict"] for c in data["checks"]}
        assert verdicts["step_time_s"] == "IMPROVED" and verdicts["train_tokens_per_s"] == "IMPROVED"

    def test_small_change_within_the_practical_threshold_passes(self, store_url, tmp_path):
        """A significant but 1.5% slowdown is below the 3% threshold: both conditions are needed."""
        _seed_history(store_url, tmp_path, 12)
        write_report(tmp_path / "cand", seed=100, slowdown=1.015, noise=0.0005)
        code, _, data = _check(store_url, tmp_path / "cand", tmp_path)
        step = next(c for c in data["checks"] if c["metric"] == "step_time_s")
        assert code == 0 and step["verdict"] == "UNCHANGED" and step["p_value"] < 0.02

    def test_nan_or_missing_required_metric_is_an_error_not_a_pass(self, store_url, tmp_path):
        _seed_history(store_url, tmp_path, 6)
        write_report(tmp_path / "nan", seed=50, nan_steps=("step_time_s",))
        write_report(tmp_path / "missing", seed=51, drop=("train_tokens_per_s",))
        code, markdown, data = _check(store_url, tmp_path / "nan", tmp_path)
        verdicts = {c["metric"]: c["verdict"] for c in data["checks"]}
        assert code == 2 and verdicts["step_time_s"] == "ERROR" and "COULD NOT JUDGE" in markdown
        code, markdown, data = _check(store_url, tmp_path / "missing", tmp_path)
        verdicts = {c["metric"]: c["verdict"] for c in data["checks"]}
        assert code == 2 and verdicts["train_tokens_per_s"] == "ERROR"

    def test_an_optional_metric_the_series_never_had_is_skipped_not_an_error(self, store_url, tmp_path):
        """MFU is null when the GPU has no peak entry; if the history never had it either, nothing is judged."""
        for i in range(6):
            write_report(tmp_path / f"n{i}", seed=i, overrides={"train_mfu": None}, generated_at=f"2026-11-0{i + 1}")
            _record(store_url, tmp_path / f"n{i}", commit=f"c{i}", trust="yes")
        write_report(tmp_path / "cand", seed=9, overrides={"train_mfu": None})
        code, _, data = _check(store_url, tmp_path / "cand", tmp_path)
        assert code == 0 and "train_mfu" not in {c["metric"] for c in data["checks"]}

    def test_one_outlier_run_in_history_does_not_move_the_baseline(self, store_url, tmp_path):
        """A 40% slow night in the baseline is left out; the baseline stays at the healthy level."""
        _seed_history(store_url, tmp_path, 10, level=lambda i: 1.4 if i == 5 else 1.0)
        write_report(tmp_path / "cand", seed=100)
        code, _, data = _check(store_url, tmp_path / "cand", tmp_path)
        step = next(c for c in data["checks"] if c["metric"] == "step_time_s")
        assert code == 0 and step["baseline"] == pytest.approx(60.0, rel=0.005)

    def test_untrusted_runs_are_not_baseline(self, store_url, tmp_path):
        """A regressed run recorded with auto trust is stored untrusted and never pulls the baseline up."""
        _seed_history(store_url, tmp_path, 6)
        write_report(tmp_path / "slow", seed=70, slowdown=1.2)
        (slow_id,) = _record(store_url, tmp_path / "slow", commit="badc0de")
        with HistoryStore(store_url) as store:
            assert [r.trusted for r in store.runs(store.list_series()[0]) if r.id == slow_id] == [False]
        write_report(tmp_path / "slow2", seed=71, slowdown=1.2)
        code, _, _ = _check(store_url, tmp_path / "slow2", tmp_path)
        assert code == 1

    def test_a_lone_flagged_night_is_trusted_again_when_the_next_night_passes(self, store_url, tmp_path):
        """Flagged once between two passing nights: noise the baseline must keep (left out for good, the baseline
        loses its slow tail and alarms more often), so the passing night's record trusts it again, with a note."""
        _seed_history(store_url, tmp_path, 8)
        for name, seed, slowdown in (("slow", 80, 1.2), ("next", 81, 1.0)):
            write_report(tmp_path / name, seed=seed, slowdown=slowdown, generated_at=f"2026-12-{seed - 60:02d}")
            _record(store_url, tmp_path / name, commit=name)
        with HistoryStore(store_url) as store:
            runs = {r.commit: r for r in store.runs(store.list_series()[0])}
        assert runs["next"].trusted and runs["slow"].trusted, runs["slow"]
        assert "trusted again" in runs["slow"].trust_note

    def test_a_night_that_could_not_be_judged_is_not_trusted_again(self, store_url, tmp_path):
        """A night without its step time is untrusted as could-not-judge, not as flagged: a passing night after it
        leaves it out."""
        _seed_history(store_url, tmp_path, 8)
        write_report(tmp_path / "broken", seed=80, drop=("step_time_s",), generated_at="2026-12-20")
        write_report(tmp_path / "next", seed=81, generated_at="2026-12-21")
        _record(store_url, tmp_path / "broken", commit="broken")
        _record(store_url, tmp_path / "next", commit="next")
        with HistoryStore(store_url) as store:
            runs = {r.commit: r for r in store.runs(store.list_series()[0])}
        assert (runs["broken"].trusted, runs["broken"].trust_note, runs["next"].trusted) == (False, None, True)

    def test_two_flagged_nights_in_a_row_stay_out_of_the_baseline(self, store_url, tmp_path):
        """A change that lasts flags two nights; a later passing night trusts neither (flagged runs say why)."""
        _seed_history(store_url, tmp_path, 8)
        for name, seed, slowdown in (("slow1", 80, 1.2), ("slow2", 81, 1.2), ("fixed", 82, 1.0)):
            write_report(tmp_path / name, seed=seed, slowdown=slowdown, generated_at=f"2026-12-{seed - 60:02d}")
            _record(store_url, tmp_path / name, commit=name)
        with HistoryStore(store_url) as store:
            runs = {r.commit: r for r in store.runs(store.list_series()[0])}
        assert [runs[c].trusted for c in ("slow1", "slow2", "fixed")] == [False, False, True]
        assert runs["slow1"].trust_note == runs["slow2"].trust_note == "flagged by the check when recorded"

    def test_slow_drift_absorbed_by_the_rolling_baseline_is_caught_by_the_anchor(self, store_url, tmp_path):
        """0.15% slower every night: the last-30 baseline follows it, the anchor 30 runs back does not."""
        _seed_history(store_url, tmp_path, 60, level=lambda i: 1.0 + 0.0015 * i)
        write_report(tmp_path / "cand", seed=500, slowdown=1.0 + 0.0015 * 60)
        code, markdown, data = _check(store_url, tmp_path / "cand", tmp_path)
        step = next(c for c in data["checks"] if c["metric"] == "step_time_s")
        assert code == 1 and step["verdict"] == "DRIFTED" and "baseline is the anchor" in markdown
        assert step["change"] == pytest.approx(1.09 / 1.02925 - 1, abs=0.01)  # vs the anchor: nights 10..29
        rolling = float(step["note"].split("the change is only ")[1].rstrip("%")) / 100
        assert rolling < 0.03  # the rolling baseline alone would not flag it

    def test_baseline_reset_accepts_a_new_level(self, store_url, tmp_path):
        """After an accepted 20% slowdown is recorded with --baseline-reset, runs at the new level pass."""
        _seed_history(store_url, tmp_path, 8)
        for i in range(6):
            write_report(tmp_path / f"new-{i}", seed=200 + i, slowdown=1.2, generated_at=f"2026-12-0{i + 1}T00:00:00")
            _record(store_url, tmp_path / f"new-{i}", commit=f"new{i}", trust="yes", reset=(i == 0))
        write_report(tmp_path / "cand", seed=300, slowdown=1.2)
        code, _, data = _check(store_url, tmp_path / "cand", tmp_path)
        step = next(c for c in data["checks"] if c["metric"] == "step_time_s")
        assert code == 0 and step["n_baseline"] == 6


class TestHistoryCommand:
    def test_change_point_is_reported_with_its_commit_range_and_plotted(self, store_url, tmp_path):
        """A 10% step at night 15 of 30 is found at the right run, with the commits on both sides."""
        _seed_history(store_url, tmp_path, 30, level=lambda i: 1.1 if i >= 15 else 1.0)
        out = tmp_path / "hist"
        result = subprocess.run(
            [sys.executable, str(RUN_PY), "history", "--store", store_url, "--output-dir", str(out),
             "--metric", "step_time_s"],
            capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        markdown = (out / "history.md").read_text()
        row = next(line for line in markdown.splitlines() if "| step_time_s |" in line)
        assert "run 16 " in row and "000000eaaaa..000000faaaa" in row and "+10." in row
        (png,) = out.glob("*.png")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class TestReportInput:
    def test_missing_field_is_named(self, tmp_path):
        path = write_report(tmp_path / "run")
        data = json.loads(path.read_text())
        del data["cells"][0]["layout"]
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=r"cells\[0\]: field 'layout' must be a string"):
            read_report_runs(tmp_path / "run")

    def test_a_report_without_spec_hash_has_no_series(self, tmp_path):
        path = write_report(tmp_path / "run")
        data = json.loads(path.read_text())
        data["spec_hash"] = None
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match="spec_hash is None; a run without a spec hash has no series"):
            read_report_runs(tmp_path / "run")

    def test_absent_report_says_how_to_make_it(self, tmp_path):
        with pytest.raises(FileNotFoundError, match="run.py report"):
            read_report_runs(tmp_path)

    def test_run_value_is_the_median_of_repeat_medians(self, tmp_path):
        """One slow repeat cannot move the run value (it is the median of three repeat medians)."""
        path = write_report(tmp_path / "run", repeats=3, noise=0.0)
        data = json.loads(path.read_text())
        data["cells"][0]["samples"]["step_time_s"][1] = [90.0] * 6
        path.write_text(json.dumps(data))
        (run,) = read_report_runs(tmp_path / "run")
        value = next(v for v in run.values if v.metric == "step_time_s")
        assert value.value == 60.0 and value.repeat_values == [60.0, 90.0, 60.0]

    def test_provenance_comes_from_github_actions_variables(self, monkeypatch):
        monkeypatch.setenv("GITHUB_SHA", "0123abc")
        monkeypatch.setenv("GITHUB_REF", "refs/pull/42/merge")
        monkeypatch.setenv("GITHUB_RUN_ID", "777")
        monkeypatch.setenv("GITHUB_EVENT_NAME", "pull_request")
        p = provenance_from_env(commit=None, pr=None, ci_run_id=None, trigger=None, ref=None)
        assert (p.commit, p.pr, p.ci_run_id, p.trigger) == ("0123abc", 42, "777", "pull_request")


class TestWithTheRealReport:
    def test_nightly_reports_from_run_report_are_recorded_and_a_slower_run_fails(self, tmp_path):
        """End to end on SQLite: runner-layout folders -> the real `run.py report` -> record -> check."""
        from scripts.benchmark.analysis.settings import AnalysisSettings
        from scripts.benchmark.commands.report import report_impl
        from tests.benchmark.synthetic_runs import SyntheticCell, write_run_folder

        store = f"sqlite:///{tmp_path / 'history.db'}"

        def nightly(name: str, seed: int, slowdown: float = 1.0) -> Path:
            phases = {"generate": 60.0 * slowdown, "old_logprob": 8.0, "ref_logprob": 0.0, "train": 30.0 * slowdown}
            cell = SyntheticCell(framework="miles", phase_means=phases, num_steps=24, repeats=2, cv=0.02, seed=seed)
            run_dir = write_run_folder(tmp_path / name, [cell])
            report_impl(run_dir, AnalysisSettings(reps=200), calibration=False)
            return run_dir

        for i in range(5):
            _record(store, nightly(f"night-{i}", seed=i), commit=f"c{i}")
        with HistoryStore(store) as db:
            assert [label.split("/")[-1] for label in db.list_series()] == ["r2"]
        code, _, data = _check(store, nightly("same", seed=50), tmp_path)
        assert code == 0, data
        code, markdown, data = _check(store, nightly("slow", seed=51, slowdown=1.15), tmp_path)
        verdicts = {c["metric"]: c["verdict"] for c in data["checks"]}
        assert code == 1 and verdicts["step_time_s"] == "REGRESSED", markdown

    def test_the_series_names_the_sink_format_of_the_plan_cell(self, tmp_path):
        """How a cell's step times were taken is part of what its values mean: the report carries the plan's sink
        format per cell and the history key carries it."""
        from scripts.benchmark.analysis.settings import AnalysisSettings
        from scripts.benchmark.commands.report import report_impl
        from tests.benchmark.synthetic_runs import SyntheticCell, write_run_folder

        phases = {"generate": 60.0, "old_logprob": 8.0, "ref_logprob": 0.0, "train": 30.0}
        cell = SyntheticCell(framework="miles", phase_means=phases, num_steps=24, repeats=3, cv=0.02, seed=3)
        run_dir = write_run_folder(tmp_path / "run", [cell])
        plan = json.loads((run_dir / "plan.json").read_text())
        cell_id = json.loads((run_dir / "manifest.json").read_text())["cells"][0]["id"]
        plan["cells"] = [{"id": cell_id, "sink": {"format": "miles-jsonl", "path": "sink"}}]
        (run_dir / "plan.json").write_text(json.dumps(plan))
        report_impl(run_dir, AnalysisSettings(reps=200), calibration=False)
        [run] = read_report_runs(run_dir)
        assert (run.series.repeats, run.series.sink) == (3, "miles-jsonl")
        assert run.series.label().endswith("/0123456789ab/r3/sink=miles-jsonl")
