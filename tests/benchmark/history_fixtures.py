"""Test helpers for the history: report.json files that follow its typed definition, and a private PostgreSQL server.

- `write_report(run_dir, ...)` writes DIR/report.json (schema 2) with one cell and side per framework, the NOMINAL
  metrics summarised, samples per repeat included, exactly the shape `run.py report` writes.
- `PostgresServer` runs initdb + pg_ctl into a temporary folder on 127.0.0.1 and a free port (as the `postgres` user
  when the tests run as root, because initdb refuses root), and stops it at the end.

Caveats:
- The server binaries are looked up in /usr/lib/postgresql/*/bin (Debian, Ubuntu) and on PATH.
"""

from __future__ import annotations

import glob
import json
import os
import pwd
import shutil
import socket
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from miles.utils.bench_metrics import METRICS, encode_nonfinite

# Nominal values of a healthy run; the builder scales step-like metrics by `slowdown`.
NOMINAL = {
    "step_time_s": 60.0,
    "phases_s.generate": 30.0,
    "phases_s.train": 20.0,
    "train_tflops_per_gpu": 300.0,
    "train_mfu": 0.30,
    "train_tokens_per_s": 40000.0,
    "rollout_tokens_per_gpu_s": 1500.0,
    "wait_ratio": 0.6,
}


def write_report(
    run_dir: Path,
    *,
    slowdown: float = 1.0,
    seed: int = 0,
    noise: float = 0.005,
    frameworks: tuple[str, ...] = ("miles",),
    overrides: dict[str, float | None] | None = None,
    drop: tuple[str, ...] = (),
    nan_steps: tuple[str, ...] = (),
    generated_at: str = "2026-12-01T00:00:00+00:00",
    spec_hash: str = "abcdef123456",
    repeats: int = 2,
    steps: int = 6,
) -> Path:
    """A report.json whose time metrics are NOMINAL * slowdown and rate metrics NOMINAL / slowdown, with noise.

    `overrides` sets a metric's level (None: never reported), `drop` leaves metrics out, `nan_steps` puts a NaN step
    into repeat 0 of the named metrics.
    """
    rng = np.random.default_rng(seed)
    overrides = overrides or {}
    cells = []
    for framework in frameworks:
        summaries, samples = {}, {}
        for name, nominal in NOMINAL.items():
            if name in drop:
                continue
            level = nominal * slowdown if METRICS[name].direction == "lower" else nominal / slowdown
            if name in overrides:
                level = overrides[name]
            # As `run.py report` writes it: a metric never reported has an empty list per repeat and a null median;
            # a missing or non-finite step stays in place as NaN.
            reps = [[] if level is None else [level * (1 + noise * rng.standard_normal()) for _ in range(steps)]
                    for _ in range(repeats)]  # fmt: skip
            if name in nan_steps:
                reps[0][0] = float("nan")
            flat = [x for r in reps for x in r]
            median = statistics.median(flat) if flat and name not in nan_steps else None
            summaries[name] = {
                "median": median,
                "ci_low": None if median is None else median * 0.99,
                "ci_high": None if median is None else median * 1.01,
                "n": len(flat),
                "method": "bootstrap",
                "unit": METRICS[name].unit,
                "direction": METRICS[name].direction,
            }
            samples[name] = reps
        cells.append(
            {
                "id": f"{framework}-fsdp-colocate",
                "framework": framework,
                "side": framework,
                "backend": "fsdp",
                "layout": "colocate",
                "repeats": repeats,
                "hardware": "8x NVIDIA H200",
                "environment": {"gpu": "NVIDIA H200", "gpu_count": 8, "driver": "570.86"},
                "steady_state": {"start_step": 2, "reached": True, "method": "mser5"},
                "summaries": summaries,
                "samples": samples,
            }
        )
    sides = [
        {"role": "candidate" if i == 0 else "reference", "name": f, "framework": f, "label": f}
        for i, f in enumerate(frameworks)
    ]
    report = {
        "schema_version": 2,
        "sides": sides,
        "run_dir": str(run_dir),
        "generated_at": generated_at,
        "spec_hash": spec_hash,
        "preset": "smoke",
        "cells": cells,
        "comparisons": [],
        "attribution": [],
        "parity": None,
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / "report.json"
    path.write_text(json.dumps(encode_nonfinite(report), indent=1, allow_nan=False), encoding="utf-8")
    return path


def postgres_bindir() -> Path | None:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class ExternalPostgres:
    """A PostgreSQL server someone else started (`.ci/run` does); databases are created on it as on our own."""

    def __init__(self, url: str) -> None:
        self.url = url

    def database_url(self, name: str) -> str:
        return self.url.rsplit("/", 1)[0] + "/" + name

    def create_database(self, name: str) -> str:
        import sqlalchemy as sa

        engine = sa.create_engine(
            self.url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
        )
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.database_url(name)


class PostgresServer:
    """A throwaway PostgreSQL cluster; `url` accepts any database name via `database_url(name)`."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="bench-pg-"))
        self.data = self.root / "data"
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            # initdb refuses to run as root: run the server as the `postgres` account the Debian package creates.
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.prefix, *argv], check=True, capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "bench", "-E", "UTF8",
                  "--locale=C", "--no-sync")  # fmt: skip
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -F"
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log.txt"), "-o", options,
                  "-w", "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def database_url(self, name: str) -> str:
        return f"postgresql://bench@127.0.0.1:{self.port}/{name}"

    def create_database(self, name: str) -> str:
        import sqlalchemy as sa

        engine = sa.create_engine(
            self.database_url("postgres").replace("postgresql://", "postgresql+psycopg://"),
            isolation_level="AUTOCOMMIT",
        )
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.database_url(name)
