"""The benchmark history database: one code path (SQLAlchemy Core) for a SQLite file and a PostgreSQL server.

- `HistoryStore(url, create=..., writes=...)` accepts a SQLAlchemy URL (`sqlite:///history.db`,
  `postgresql+psycopg://user@host/db`), a bare `postgresql://` URL (mapped to the psycopg 3 driver) or a plain file
  path (a SQLite file). With create=False a missing SQLite file, an unreachable database or one without the history
  tables raises `StoreMissing` naming the URL (a mistyped --store must never become a new, empty history); with
  create=True the file and the tables are made. An in-memory SQLite URL (`sqlite://`, `sqlite:///`, `:memory:`:
  what `sqlite:///$BENCH_DB` gives with the variable unset) is always refused, and a read-only one (`mode=ro`,
  `immutable=1`) when the command writes (`writes`, or `create`): either would "record" into nothing.
- A run series is `SeriesKey(preset, framework, backend, layout, hardware, spec_hash, side)`, like the run series of
  Miles's metric-history gate; one recorded run is one cell of one report.json.
- Each run keeps its provenance (commit, PR, CI run id, trigger, ref, environment record) and a `trusted` flag;
  `set_trusted` flips it with a reason and a timestamp and never deletes a row.
- A run that `record` leaves untrusted because the check flagged it carries `FLAGGED_NOTE`; `lone_flagged_run`
  names such a run when the one before it was not flagged (what `record` trusts again once the next run passes).
- `baseline_reset` marks a run from which baselines start again (an accepted, intended change of level).

Caveats:
- Each cell is its own transaction; a cell of a report already recorded is found by `recorded_run_id`, so a
  `record` interrupted between cells is completed by running it again.
- Runs are ordered by insertion (`id`), which is the nightly order; backfilled runs sort where they were inserted.
- Values are stored as floats or NULL (missing or non-finite); NaN never reaches the database.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from scripts.benchmark.contracts.history_record import MetricValue, Provenance, RunToRecord, StoredRun

from miles.utils.bench_metrics import finite_or_none

_metadata = sa.MetaData()

RUNS = sa.Table(
    "bench_runs",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("series", sa.String(400), nullable=False, index=True),
    sa.Column("preset", sa.String(100), nullable=True),
    sa.Column("framework", sa.String(20), nullable=False),
    sa.Column("backend", sa.String(20), nullable=False),
    sa.Column("layout", sa.String(20), nullable=False),
    sa.Column("hardware", sa.String(100), nullable=True),
    sa.Column("spec_hash", sa.String(64), nullable=False),
    sa.Column("cell_id", sa.String(100), nullable=False),
    sa.Column("report_generated_at", sa.String(40), nullable=False),
    sa.Column("run_dir", sa.Text, nullable=False),
    sa.Column("recorded_at", sa.String(40), nullable=False),
    sa.Column("commit", sa.String(64), nullable=True),
    sa.Column("pr", sa.Integer, nullable=True),
    sa.Column("ci_run_id", sa.String(64), nullable=True),
    sa.Column("trigger", sa.String(40), nullable=True),
    sa.Column("ref", sa.String(200), nullable=True),
    sa.Column("environment", sa.Text, nullable=False),
    sa.Column("trusted", sa.Boolean, nullable=False),
    sa.Column("trust_note", sa.Text, nullable=True),
    sa.Column("trust_changed_at", sa.String(40), nullable=True),
    sa.Column("baseline_reset", sa.Boolean, nullable=False, default=False),
    sa.UniqueConstraint("series", "cell_id", "report_generated_at", "run_dir", name="uq_bench_runs_report_cell"),
)

VALUES = sa.Table(
    "bench_values",
    _metadata,
    sa.Column("run_id", sa.Integer, sa.ForeignKey("bench_runs.id"), primary_key=True),
    sa.Column("metric", sa.String(100), primary_key=True),
    sa.Column("value", sa.Float, nullable=True),
    sa.Column("repeat_values", sa.Text, nullable=False),
    sa.Column("ci_low", sa.Float, nullable=True),
    sa.Column("ci_high", sa.Float, nullable=True),
    sa.Column("n", sa.Integer, nullable=False),
    sa.Column("unit", sa.String(40), nullable=True),
    sa.Column("direction", sa.String(10), nullable=True),
)


def normalize_url(url: str) -> str:
    """A plain path becomes a SQLite URL; `postgresql://` selects psycopg 3 (the driver this project installs)."""
    if "://" not in url:
        return f"sqlite:///{Path(url).expanduser().resolve()}"
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite store URL names; None for another kind of database, an in-memory one, or no URL at all."""
    try:
        parsed = sa.engine.make_url(normalize_url(url))
    except (sa.exc.ArgumentError, ValueError):
        return None
    database = (parsed.database or "").removeprefix("file:")
    if (
        not parsed.drivername.startswith("sqlite")
        or database in ("", ":memory:")
        or _option(parsed, "mode") == "memory"
    ):
        return None
    return Path(database).expanduser()


def _option(parsed: sa.engine.URL, name: str) -> str | None:
    value = parsed.query.get(name)
    return value[-1] if isinstance(value, tuple) else value


class StoreMissing(ValueError):
    """The --store URL names no history database (and --create was not given), or it cannot be reached."""


class NoHistoryYet(StoreMissing):
    """The --store URL is a database this history can use, but no history was ever made there."""


class HistoryStore:
    """Read and write the history tables; every statement is SQLAlchemy Core, so both backends share it."""

    def __init__(self, url: str, *, create: bool = True, writes: bool = False) -> None:
        self.url = normalize_url(url)
        try:
            parsed = sa.engine.make_url(self.url)
            shown = parsed.render_as_string(hide_password=True)
        except (sa.exc.ArgumentError, ValueError) as exc:  # a port that is no number, a URL that is no URL
            hidden = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", self.url)
            raise StoreMissing(f"--store {hidden}: not a database URL ({exc})") from exc
        if parsed.drivername.startswith("sqlite"):
            path = sqlite_file(self.url)
            if path is None:
                raise StoreMissing(
                    f"--store {shown or url!r}: names no database file, so it would be an in-memory database that "
                    "is gone when the command ends (is a variable in the URL unset?); give a file path or "
                    "sqlite:///PATH"
                )
            read_only = _option(parsed, "mode") == "ro" or _option(parsed, "immutable") in ("1", "true")
            if read_only and (writes or create):
                raise StoreMissing(f"--store {shown}: opens the database read-only, so nothing can be written to it")
            if not create and not path.is_file():
                raise NoHistoryYet(f"--store {shown}: no history database at {path} (pass --create to make one)")
            path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = sa.create_engine(self.url, future=True)
        except (sa.exc.ArgumentError, ValueError) as exc:  # sa.exc.NoSuchModuleError: an unknown database kind
            raise StoreMissing(f"--store {shown}: not a database this history can use ({exc})") from exc
        try:
            if create:
                _metadata.create_all(self.engine)
            elif not sa.inspect(self.engine).has_table(RUNS.name):
                raise NoHistoryYet(f"--store {shown}: holds no benchmark history (pass --create to make one)")
        except sa.exc.DatabaseError as exc:  # unreachable server, or a file that is not a database
            self.engine.dispose()
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else type(exc).__name__
            raise StoreMissing(f"--store {shown}: cannot open the database: {reason}") from exc

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(
        self,
        run: RunToRecord,
        provenance: Provenance,
        *,
        trusted: bool,
        baseline_reset: bool,
        trust_note: str | None = None,
    ) -> int:
        """Insert one run and its values in one transaction; refuses a cell of a report already recorded."""
        row = {
            "series": run.series.label(),
            "preset": run.series.preset,
            "framework": run.series.framework,
            "backend": run.series.backend,
            "layout": run.series.layout,
            "hardware": run.series.hardware,
            "spec_hash": run.series.spec_hash,
            "cell_id": run.cell_id,
            "report_generated_at": run.report_generated_at,
            "run_dir": run.run_dir,
            "recorded_at": _now(),
            "commit": provenance.commit,
            "pr": provenance.pr,
            "ci_run_id": provenance.ci_run_id,
            "trigger": provenance.trigger,
            "ref": provenance.ref,
            "environment": json.dumps(run.environment, sort_keys=True, default=str),
            "trusted": trusted,
            "trust_note": trust_note,
            "baseline_reset": baseline_reset,
        }
        with self.engine.begin() as conn:
            duplicate = _recorded_id(conn, run)
            if duplicate is not None:
                raise ValueError(
                    f"cell {run.cell_id!r} of the report generated at {run.report_generated_at} in {run.run_dir} "
                    f"is already recorded as run {duplicate}"
                )
            run_id = conn.execute(sa.insert(RUNS).values(**row)).inserted_primary_key[0]
            if run.values:
                conn.execute(sa.insert(VALUES), [_value_row(run_id, v) for v in run.values])
        return int(run_id)

    def recorded_run_id(self, run: RunToRecord) -> int | None:
        """The id this cell of this report was recorded as, or None: lets an interrupted `record` be completed."""
        with self.engine.connect() as conn:
            return _recorded_id(conn, run)

    def set_trusted(self, run_ids: Sequence[int], *, trusted: bool, note: str) -> list[int]:
        """Flip the trusted flag of existing runs (rows stay); returns the ids that exist."""
        with self.engine.begin() as conn:
            found = [r.id for r in conn.execute(sa.select(RUNS.c.id).where(RUNS.c.id.in_(list(run_ids))))]
            if found:
                conn.execute(
                    sa.update(RUNS)
                    .where(RUNS.c.id.in_(found))
                    .values(trusted=trusted, trust_note=note, trust_changed_at=_now())
                )
        return sorted(found)

    def run_ids_for_commit(self, commit: str) -> list[int]:
        """Ids of the runs whose commit starts with `commit` (a short sha is enough)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(RUNS.c.id).where(RUNS.c.commit.startswith(commit, autoescape=True)))
            return sorted(r.id for r in rows)

    def list_series(self) -> list[str]:
        with self.engine.connect() as conn:
            return [r.series for r in conn.execute(sa.select(RUNS.c.series).distinct().order_by(RUNS.c.series))]

    def runs(self, series: str) -> list[StoredRun]:
        """All runs of a series in insertion order, trusted or not."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(RUNS).where(RUNS.c.series == series).order_by(RUNS.c.id))
            return [_stored_run(r) for r in rows]

    def latest_cell_runs(self, *, preset: str | None, spec_hash: str, cell_id: str, limit: int) -> list[int]:
        """Ids of the newest `limit` runs of one cell of one spec (any node, trusted or not), newest first."""
        with self.engine.connect() as conn:
            query = (
                sa.select(RUNS.c.id)
                .where(RUNS.c.preset == preset, RUNS.c.spec_hash == spec_hash, RUNS.c.cell_id == cell_id)
                .order_by(RUNS.c.id.desc())
                .limit(limit)
            )
            return [r.id for r in conn.execute(query)]

    def values(self, run_ids: Iterable[int], metric: str) -> dict[int, float | None]:
        """Run id -> stored run-level value of `metric` (None when missing or non-finite)."""
        ids = list(run_ids)
        if not ids:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(VALUES.c.run_id, VALUES.c.value).where(VALUES.c.run_id.in_(ids), VALUES.c.metric == metric)
            )
            return {r.run_id: r.value for r in rows}

    def repeat_values(self, run_ids: Iterable[int], metric: str) -> dict[int, list[float | None]]:
        """Run id -> the stored per-repeat values of `metric` (empty where the run has none)."""
        ids = list(run_ids)
        if not ids:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(VALUES.c.run_id, VALUES.c.repeat_values).where(
                    VALUES.c.run_id.in_(ids), VALUES.c.metric == metric
                )
            )
            return {r.run_id: json.loads(r.repeat_values) for r in rows}

    def metrics(self, series: str) -> list[str]:
        with self.engine.connect() as conn:
            query = (
                sa.select(VALUES.c.metric)
                .join(RUNS, RUNS.c.id == VALUES.c.run_id)
                .where(RUNS.c.series == series)
                .distinct()
                .order_by(VALUES.c.metric)
            )
            return [r.metric for r in conn.execute(query)]


FLAGGED_NOTE = "flagged by the check when recorded"
RESTORED_NOTE = "trusted again: a lone flagged run, the next run of its series passed the check"


def lone_flagged_run(runs: Sequence[StoredRun]) -> StoredRun | None:
    """The series' last run when `record` left it untrusted because the check flagged it and the run before it was
    not so flagged: trusted again once the next run passes. Keeping every flagged run out for good cuts the top tail
    off the baseline, which then sits low with too small a spread and alarms more often (a point more nights at CV
    10%); a change that lasts flags two runs in a row and stays out."""
    if not runs or runs[-1].trusted or runs[-1].trust_note != FLAGGED_NOTE:
        return None
    if len(runs) > 1 and not runs[-2].trusted and runs[-2].trust_note == FLAGGED_NOTE:
        return None
    return runs[-1]


def baseline_runs(runs: Sequence[StoredRun]) -> list[StoredRun]:
    """Trusted runs since the latest trusted baseline reset (inclusive), oldest first."""
    start = 0
    for i, run in enumerate(runs):
        if run.trusted and run.baseline_reset:
            start = i
    return [r for r in runs[start:] if r.trusted]


def _recorded_id(conn: sa.Connection, run: RunToRecord) -> int | None:
    found = conn.execute(
        sa.select(RUNS.c.id).where(
            RUNS.c.series == run.series.label(),
            RUNS.c.cell_id == run.cell_id,
            RUNS.c.report_generated_at == run.report_generated_at,
            RUNS.c.run_dir == run.run_dir,
        )
    ).first()
    return None if found is None else int(found.id)


def _value_row(run_id: int, v: MetricValue) -> dict[str, Any]:
    finite = v.value is not None and math.isfinite(v.value)
    return {
        "run_id": run_id,
        "metric": v.metric,
        "value": float(v.value) if finite else None,
        "repeat_values": json.dumps([x if math.isfinite(x) else None for x in v.repeat_values]),
        "ci_low": finite_or_none(v.ci_low),
        "ci_high": finite_or_none(v.ci_high),
        "n": v.n,
        "unit": v.unit,
        "direction": v.direction,
    }


def _stored_run(r: Any) -> StoredRun:
    return StoredRun(
        id=r.id,
        series=r.series,
        cell_id=r.cell_id,
        commit=r.commit,
        pr=r.pr,
        ci_run_id=r.ci_run_id,
        trigger=r.trigger,
        recorded_at=r.recorded_at,
        trusted=bool(r.trusted),
        trust_note=r.trust_note,
        baseline_reset=bool(r.baseline_reset),
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
