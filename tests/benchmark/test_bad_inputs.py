"""Bad input, as a new user types it: every case exits with its code, names the culprit, shows no traceback, and
leaves its output untouched (or absent).

Each row runs the real `run.py` app in-process (CliRunner); the rows about missing extras run it in a subprocess whose
imports of that extra's modules fail (tests/benchmark/standins/blocker/sitecustomize.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from scripts.benchmark.run import build_app
from tests.benchmark.read_only import lock_read_only
from tests.benchmark.standins.plans import REPO_ROOT, RUN_PY, STANDINS, standin_cell, write_plan
from tests.benchmark.synthetic_runs import gap_pair, write_run_folder
from typer.testing import CliRunner

SMOKE = REPO_ROOT / "scripts" / "benchmark" / "presets" / "smoke.yaml"


class Setup:
    """The files a case needs, made on demand under one temporary folder."""

    def __init__(self, tmp: Path, read_only: Path | None):
        self.tmp, self._read_only = tmp, read_only

    @property
    def read_only(self) -> Path:
        if self._read_only is None:
            pytest.skip("root on a file system without chattr +i and no permission to mount: nothing is read-only")
        return self._read_only

    def path(self, name: str) -> Path:
        return self.tmp / name

    def file(self, name: str, content: bytes | str) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return path

    def plan(self, name: str = "plan", mutate: Callable[[dict], None] | None = None, miles: bool = False) -> Path:
        cell = standin_cell("verl", steps=2)
        if miles:
            cell = standin_cell("miles", steps=2)
            cell["launch_argv"] = ["ray", "job", "submit", "--", *cell["launch_argv"]]
        path = write_plan(self.tmp / name, [cell])
        if mutate is not None:
            data = json.loads(path.read_text())
            mutate(data)
            path.write_text(json.dumps(data))
        return path

    def planned(self, name: str, *extra: str) -> Path:
        out = self.tmp / name
        result = CliRunner().invoke(build_app(), ["--preset", "smoke", "--output-dir", str(out), "--dry-run", *extra])
        assert result.exit_code == 0, result.output
        return out

    def run_folder(self, name: str, manifest: str) -> Path:
        self.file(f"{name}/manifest.json", manifest)
        self.file(f"{name}/plan.json", self.plan(f"{name}-plan").read_text())
        return self.tmp / name

    def damaged_run(self, name: str, file: str, content: bytes) -> Path:
        """A complete run folder of a Miles/VERL pair, one of whose files is then damaged (a half-copied folder)."""
        folder = write_run_folder(self.tmp / name, gap_pair({}, num_steps=12))
        (folder / file).write_bytes(content)
        return folder

    def run(self, name: str) -> Path:
        """A complete run folder of a Miles/VERL pair, with its report."""
        folder = write_run_folder(self.tmp / name, gap_pair({}, num_steps=12))
        assert CliRunner().invoke(build_app(), ["report", str(folder), "--quiet"]).exit_code == 0
        return folder

    def emptied_manifest(self, name: str) -> Path:
        """A run folder whose manifest.json lists no cell (its cells/ still there)."""
        folder = write_run_folder(self.tmp / name, gap_pair({}, num_steps=12))
        _edit_json(folder / "manifest.json", lambda manifest: manifest.update(cells=[]))
        return folder

    def negative_steps(self, name: str) -> Path:
        """A run folder one of whose cells logged step times below zero."""
        folder = write_run_folder(self.tmp / name, gap_pair({}, num_steps=12))
        metrics = folder / "cells/verl-fsdp-colocate/rep-0/metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        metrics.write_text("".join(json.dumps(row | {"step_time_s": -abs(row["step_time_s"])}) + "\n" for row in rows))
        return folder

    def recording(self, name: str) -> Path:
        """A small Miles recording (two steps of one group of two samples)."""
        from scripts.benchmark.frameworks.recorded import RecordedSample, RecordedStep, Recording
        from scripts.benchmark.frameworks.recording import write_recording

        samples = tuple(RecordedSample((1, 2), (3, i), (1, 1), float(i), 0, None) for i in range(2))
        write_recording(Recording((RecordedStep(samples), RecordedStep(samples))), self.tmp / name / "miles", "miles")
        return self.tmp / name / "miles"

    def link(self, name: str, target: str) -> Path:
        (self.tmp / name).symlink_to(self.tmp / target)
        return self.tmp / name

    def not_a_database(self) -> str:
        return f"sqlite:///{self.file('notes.txt', 'x' * 200)}"

    def store(self) -> str:
        return f"sqlite:///{self.tmp / 'missing' / 'history.db'}"


@dataclass(frozen=True)
class Case:
    id: str
    argv: Callable[[Setup], list[str]]
    culprit: tuple[str, ...]
    watched: Callable[[Setup], Path]
    code: int = 2


def _smoke(s: Setup, out: str = "out", *extra: str) -> list[str]:
    return ["--preset", "smoke", "--output-dir", str(s.path(out)), "--dry-run", *extra]


def _execute(s: Setup, plan: Path, *extra: str) -> list[str]:
    return ["execute", str(plan), "--output-dir", str(s.path("run")), "--ray", "none", "--no-preflight", *extra]


def _convert(s: Setup, start: str, end: str, source: Path | None = None, train_dir: Path | None = None) -> list[str]:
    rows = "".join(json.dumps({"prompt": f"q{i}", "label": "1"}) + "\n" for i in range(20))
    source = source or s.file("rows.jsonl", rows)
    train = (train_dir or s.path("data")) / "t.parquet"
    return ["convert-data", "--source", str(source), "--start", start, "--end", end, "--train-file", str(train),
            "--val-file", str(s.path("data") / "v.parquet"), "--val-rows", "2"]  # fmt: skip


def _spec_file(s: Setup, text: str | bytes) -> list[str]:
    return ["--spec", str(s.file("spec.yaml", text)), "--output-dir", str(s.path("out")), "--dry-run"]


def _edit_json(path: Path, change: Callable[[dict], object]) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _more_steps(plan: dict) -> None:
    plan["spec"]["run"]["num_steps"] += 1


def _other_lr(plan: dict) -> None:
    """The Miles cell's learning rate changed after planning, in the words parity read and in the words that run."""
    (cell,) = [c for c in plan["cells"] if c["framework"] == "miles"]
    for key in ("argv", "launch_argv"):
        cell[key] = [("3e-06" if i and cell[key][i - 1] == "--lr" else w) for i, w in enumerate(cell[key])]


def _other_data_source(plan: dict) -> None:
    """VERL's data conversion (its scorer) changed after planning: the words parity read its reward scorer from."""
    (step,) = [s for s in plan["prepare"] if s["name"] == "convert-data"]
    step["argv"] = [
        ("math" if i and step["argv"][i - 1] == "--data-source" else w) for i, w in enumerate(step["argv"])
    ]


def _unproven(s: Setup, damage: Callable[[Path], object]) -> Path:
    """A comparing plan of the dry run, damaged after planning."""
    folder = s.planned("cmp", "--compare-verl", "--backend", "fsdp")
    damage(folder)
    return folder / "plan.json"


OUT = lambda s: s.path("out")  # noqa: E731
RUN = lambda s: s.path("run")  # noqa: E731
DATA = lambda s: s.path("data")  # noqa: E731
STORE = lambda s: s.path("missing")  # noqa: E731
SMOKE_TEXT = SMOKE.read_text()
REP0 = "cells/miles-fsdp-colocate/rep-0"
VERL_LINE = json.dumps({"step": 1, "data": {"timing_s/step": 1.0}}) + "\n"

CASES = [
    # The main command (plan).
    Case("out-is-a-file", lambda s: _smoke(s, "f") if s.file("f", "keep") else [], ("is a file",),
         lambda s: s.path("f")),
    Case("out-read-only", lambda s: ["--preset", "smoke", "--output-dir", str(s.read_only / "o"), "--dry-run"],
         ("--output-dir", "read_only"), lambda s: s.read_only),
    Case("out-under-proc", lambda s: ["--preset", "smoke", "--output-dir", "/proc/bench-out", "--dry-run"],
         ("/proc/bench-out",), OUT),
    Case("yaml-syntax-error", lambda s: _spec_file(s, "name: [smoke\n"), ("spec.yaml", "not valid YAML", "line"), OUT),
    Case("binary-yaml", lambda s: _spec_file(s, b"\x89PNG\x00\xff\xfe"), ("spec.yaml", "UTF-8"), OUT),
    Case("yaml-not-a-mapping", lambda s: _spec_file(s, "- a\n- b\n"), ("spec.yaml", "mapping"), OUT),
    Case("spec-unknown-field", lambda s: _spec_file(s, SMOKE_TEXT + "bogus_field: 1\n"), ("bogus_field",), OUT),
    Case("spec-missing", lambda s: ["--spec", str(s.path("nope.yaml")), "--output-dir", str(s.path("out"))],
         ("nope.yaml",), OUT),
    Case("unknown-preset", lambda s: ["--preset", "qwen9", "--output-dir", str(s.path("out"))], ("--preset",), OUT),
    Case("preset-and-spec", lambda s: _smoke(s) + ["--spec", str(SMOKE)], ("--preset NAME or --spec",), OUT),
    Case("no-preset", lambda s: ["--output-dir", str(s.path("out"))], ("--preset NAME or --spec",), OUT),
    # Cost and budget: refused before anything is written.
    Case("budget-too-small", lambda s: _smoke(s, "out", "--budget-minutes", "5"),
         ("--budget-minutes 5", "start-ups included", "fits"), OUT),
    Case("budget-zero", lambda s: _smoke(s, "out", "--budget-minutes", "0"), ("--budget-minutes must be > 0",), OUT),
    Case("step-seconds-negative", lambda s: _smoke(s, "out", "--step-seconds", "-3"),
         ("--step-seconds must be > 0",), OUT),
    Case("sequential-two-frameworks", lambda s: _smoke(s, "out", "--sequential", "--compare-verl", "--backend", "fsdp"),
         ("--sequential", "two builds of one framework"), OUT),
    Case("sequential-two-backends", lambda s: _smoke(s, "out", "--sequential", "--candidate", "miles",
         "--candidate-root", "/ci/head", "--reference", "miles", "--reference-root", "/ci/base"),
         ("--sequential", "one --backend"), OUT),
    Case("cost-store-not-a-database", lambda s: _smoke(s, "out", "--cost-store", s.not_a_database()),
         ("--cost-store",), OUT),
    Case("learning-run-and-pr-workload", lambda s: _smoke(s, "out", "--learning-run", "--pr-workload"),
         ("--learning-run or --pr-workload",), OUT),
    Case("no-output-dir", lambda s: ["--preset", "smoke", "--dry-run"], ("--output-dir",), OUT),
    Case("bad-backend", lambda s: _smoke(s, "out", "--backend", "tpu"), ("--backend",), OUT),
    Case("bad-layout", lambda s: _smoke(s, "out", "--layout", "ring"), ("--layout",), OUT),
    Case("num-steps-zero", lambda s: _smoke(s, "out", "--num-steps", "0"), ("num_steps",), OUT),
    Case("num-steps-text", lambda s: _smoke(s, "out", "--num-steps", "ten"), ("--num-steps",), OUT),
    Case("gpus-per-node-zero", lambda s: _smoke(s, "out", "--gpus-per-node", "0"), ("gpus_per_node",), OUT),
    Case("repeats-zero", lambda s: _smoke(s, "out", "--repeats", "0"), ("--repeats",), OUT),
    Case("repeats-negative", lambda s: _smoke(s, "out", "--repeats", "-1"), ("--repeats",), OUT),
    Case("relative-miles-root", lambda s: _smoke(s, "out", "--miles-root", "miles"), ("--miles-root",), OUT),
    Case("relative-megatron-root", lambda s: _smoke(s, "out", "--megatron-root", "mg"), ("--megatron-root",), OUT),
    Case("plan-over-a-run", lambda s: _smoke(s, "r") if s.run_folder("r", "{}") else [], ("already holds a run",),
         lambda s: s.path("r")),
    Case("plan-over-another-plan", lambda s: _smoke(s, "p") if s.planned("p", "--num-steps", "5") else [],
         ("another spec", "--force"), lambda s: s.path("p")),
    Case("plan-into-a-full-folder", lambda s: _smoke(s, "home") if s.file("home/notes.txt", "mine") else [],
         ("not empty",), lambda s: s.path("home")),
    Case("dry-run-folder-ray-refuses", lambda s: _smoke(s, "it's $(x)"), ("--output-dir", "Ray job submission"),
         lambda s: s.path("it's $(x)")),
    Case("check-miles-root-missing", lambda s: _smoke(s, "out", "--check-miles", "--miles-root",
                                                      str(s.path("no-miles"))),
         ("no-miles", "--miles-root", "not a folder"), lambda s: s.path("no-miles"), code=4),
    Case("spec-continuous-colocated", lambda s: _spec_file(s, SMOKE_TEXT.replace(
        "placement:\n", "placement:\n  async_loop: {schedule: continuous}\n", 1)),
         ("placement.async_loop.schedule", "disaggregated"), OUT),
    Case("spec-duplicate-section", lambda s: _spec_file(s, SMOKE_TEXT + "\nrun:\n  num_steps: 3\n"),
         ("spec.yaml", "run"), OUT),
    Case("spec-steps-yes", lambda s: _spec_file(s, SMOKE_TEXT.replace("num_steps: 24", "num_steps: yes")),
         ("num_steps",), OUT),
    Case("spec-steps-fraction", lambda s: _spec_file(s, SMOKE_TEXT.replace("num_steps: 24", "num_steps: 2.5")),
         ("num_steps",), OUT),
    Case("unknown-candidate", lambda s: _smoke(s, "out", "--candidate", "slime"), ("--candidate", "slime"), OUT),
    Case("reference-root-alone", lambda s: _smoke(s, "out", "--reference-root", "/opt/base"),
         ("--reference-root", "--reference"), OUT),
    Case("compare-verl-and-reference", lambda s: _smoke(s, "out", "--compare-verl", "--reference", "verl"),
         ("--compare-verl", "--reference"), OUT),
    Case("unknown-miles-version", lambda s: _smoke(s, "out", "--miles-version", "9.9"), ("--miles-version",), OUT),
    # execute
    Case("plan-missing", lambda s: _execute(s, s.path("none/plan.json")), ("none/plan.json",), RUN),
    Case("plan-not-json", lambda s: _execute(s, s.file("p/plan.json", "{not json")), ("plan.json", "not valid JSON"),
         RUN),
    Case("plan-wrong-type", lambda s: _execute(s, s.plan(mutate=lambda d: d["cells"][0].update(num_steps="x"))),
         ("num_steps",), RUN),
    Case("plan-number-as-text", lambda s: _execute(s, s.plan(mutate=lambda d: d["cells"][0].update(num_steps="3"))),
         ("num_steps", "valid integer"), RUN),
    Case("plan-empty-command", lambda s: _execute(s, s.plan(mutate=lambda d: d["cells"][0].update(launch_argv=[]))),
         ("launch_argv",), RUN),
    Case("plan-blank-program", lambda s: _execute(s, s.plan(mutate=lambda d: d["cells"][0].update(launch_argv=[""]))),
         ("launch_argv",), RUN),
    Case("plan-not-an-object", lambda s: _execute(s, s.file("p/plan.json", "[1, 2]")), ("not a JSON object",), RUN),
    Case("cell-timeout-negative", lambda s: _execute(s, s.plan(), "--cell-timeout-s", "-5"), ("--cell-timeout-s",),
         RUN),
    Case("stall-timeout-negative", lambda s: _execute(s, s.plan(), "--stall-timeout-s", "-1"), ("--stall-timeout-s",),
         RUN),
    Case("poll-interval-zero", lambda s: _execute(s, s.plan(), "--poll-interval-s", "0"), ("--poll-interval-s",), RUN),
    Case("execute-repeats-zero", lambda s: _execute(s, s.plan(), "--repeats", "0"), ("--repeats",), RUN),
    Case("bad-ray-mode", lambda s: _execute(s, s.plan(), "--ray", "sometimes"), ("--ray",), RUN),
    Case("ray-external-without-address", lambda s: _execute(s, s.plan()) + ["--ray", "external"],
         ("--ray external",), RUN),
    Case("run-folder-is-a-file", lambda s: ["execute", str(s.plan()), "--output-dir", str(s.file("rf", "x")),
                                            "--no-preflight"], ("is a file",), lambda s: s.path("rf")),
    Case("resume-not-a-run", lambda s: ["execute", "--resume", str(s.file("nr/x.txt", "x").parent)],
         ("no manifest.json",), lambda s: s.path("nr")),
    Case("resume-truncated-manifest", lambda s: ["execute", "--resume", str(s.run_folder("tr", '{"schema_ver'))],
         ("manifest.json",), lambda s: s.path("tr")),
    Case("execute-without-plan", lambda s: ["execute", "--output-dir", str(s.path("run"))], ("--resume",), RUN),
    Case("plan-without-output-dir", lambda s: ["execute", str(s.plan())], ("--output-dir",), RUN),
    Case("sbatch-into-read-only", lambda s: _execute(s, s.plan()) + ["--emit-sbatch", str(s.read_only / "b.sbatch")],
         ("--emit-sbatch",), lambda s: s.read_only),
    Case("ray-unsafe-run-folder", lambda s: ["execute", str(s.plan(miles=True)), "--output-dir",
                                             str(s.path("$(touch pwned)")), "--ray", "none", "--no-preflight"],
         ("Ray job submission",), lambda s: s.path("$(touch pwned)")),
    Case("preflight-no-gpu", lambda s: ["execute", str(s.plan()), "--output-dir", str(s.path("run")), "--ray", "none"],
         ("nvidia-smi", "--no-preflight"), RUN, code=4),
    Case("plan-repeats-zero", lambda s: _execute(s, s.plan(mutate=lambda d: d.update(repeats=0))), ("repeats",), RUN),
    Case("plan-repeats-as-text", lambda s: _execute(s, s.plan(mutate=lambda d: d.update(repeats="3"))), ("repeats",),
         RUN),
    Case("plan-repeats-boolean", lambda s: _execute(s, s.plan(mutate=lambda d: d.update(repeats=True))),
         ("repeats",), RUN),
    Case("plan-origin-not-a-mapping", lambda s: _execute(s, s.plan(mutate=lambda d: d.update(origin="laptop"))),
         ("origin",), RUN),
    Case("plan-spec-hash-edited", lambda s: _execute(s, _unproven(s, lambda d: _edit_json(
        d / "plan.json", lambda p: p.update(spec_hash="ffffffffffff")))), ("plan.json", "spec_hash ffffffffffff"),
         RUN),
    Case("grace-negative", lambda s: _execute(s, s.plan(), "--grace-s", "-1"), ("--grace-s",), RUN),
    Case("first-step-timeout-negative", lambda s: _execute(s, s.plan(), "--first-step-timeout-s", "-1"),
         ("--first-step-timeout-s",), RUN),
    Case("gpu-release-timeout-negative", lambda s: _execute(s, s.plan(), "--gpu-release-timeout-s", "-2"),
         ("--gpu-release-timeout-s",), RUN),
    Case("plan-without-parity-table", lambda s: _execute(s, _unproven(s, lambda d: (d / "parity.json").unlink())),
         ("plan.json", "parity.json is missing"), RUN),
    Case("plan-spec-edited", lambda s: _execute(s, _unproven(s, lambda d: _edit_json(d / "plan.json", _more_steps))),
         ("plan.json", "no longer matches its spec_hash"), RUN),
    Case("plan-launch-edited", lambda s: _execute(s, _unproven(s, lambda d: _edit_json(d / "plan.json", _other_lr))),
         ("plan.json", "cells[miles-fsdp-colocate]", "parity.json proved matched"), RUN),
    Case("plan-prepare-edited", lambda s: _execute(s, _unproven(s, lambda d: _edit_json(
        d / "plan.json", _other_data_source))), ("cells[verl-fsdp-colocate]", "parity.json proved matched"), RUN),
    Case("parity-of-another-spec", lambda s: _execute(s, _unproven(s, lambda d: _edit_json(
        d / "parity.json", lambda p: p.update(spec_hash="ffffffffffff")))), ("parity.json", "ffffffffffff"), RUN),
    Case("parity-table-corrupt", lambda s: _execute(s, _unproven(s, lambda d: (d / "parity.json").write_text("{"))),
         ("parity.json",), RUN),
    # convert-data
    Case("convert-empty-slice", lambda s: _convert(s, "10", "5"), ("--start 10 --end 5",), DATA),
    Case("convert-bad-json-row", lambda s: _convert(s, "0", "5", s.file("bad.jsonl", '{"prompt": 1}\n{oops\n')),
         ("bad.jsonl line 2",), DATA),
    Case("convert-source-missing", lambda s: _convert(s, "0", "5", s.path("gone.jsonl")), ("gone.jsonl",), DATA),
    Case("convert-train-file-fails", lambda s: _convert(s, "0", "5", None, s.read_only), ("read_only",), DATA),
    # report, ingest
    Case("report-not-a-run", lambda s: ["report", str(s.file("empty/x", "x").parent)], ("manifest.json",),
         lambda s: s.path("empty")),
    Case("report-truncated-manifest", lambda s: ["report", str(s.run_folder("tm", '{"cells": ['))],
         ("manifest.json",), lambda s: s.path("tm")),
    Case("report-damaged-environment", lambda s: ["report", str(s.damaged_run("de", f"{REP0}/environment.json",
                                                                                b'{"gpu": '))],
         ("de/cells/miles-fsdp-colocate/rep-0/environment.json", "damaged"), lambda s: s.path("de")),
    Case("report-damaged-plan", lambda s: ["report", str(s.damaged_run("dp", "plan.json", b'{"cells": ['))],
         ("dp/plan.json", "damaged"), lambda s: s.path("dp")),
    Case("report-metrics-not-utf8", lambda s: ["report", str(s.damaged_run("dm", f"{REP0}/metrics.jsonl",
                                                                             b"\xff\xfe\x00junk\n"))],
         ("dm/cells/miles-fsdp-colocate/rep-0/metrics.jsonl", "not UTF-8"), lambda s: s.path("dm")),
    Case("report-confidence-percent", lambda s: ["report", str(s.path("x")), "--confidence", "95"],
         ("--confidence",), lambda s: s.path("x")),
    Case("ingest-zero-gpus", lambda s: ["ingest", str(s.file("sink.jsonl", "")), "--framework", "verl", "--model",
                                        "qwen3-0.6b", "--gpus", "0", "-o", str(s.path("m.jsonl"))],
         ("--gpus",), lambda s: s.path("m.jsonl")),
    Case("ingest-unknown-framework", lambda s: ["ingest", str(s.file("sink.jsonl", "")), "--framework", "slime",
                                                "--model", "qwen3-0.6b", "--gpus", "1", "-o", str(s.path("m.jsonl"))],
         ("--framework",), lambda s: s.path("m.jsonl")),
    Case("ingest-over-its-sink", lambda s: ["ingest", str(s.file("sink.jsonl", VERL_LINE)), "--framework", "verl",
                                            "--model", "qwen3-0.6b", "--gpus", "1", "-o", str(s.path("sink.jsonl"))],
         ("sink.jsonl", "over the input"), lambda s: s.path("sink.jsonl")),
    Case("ingest-over-a-link-to-its-sink", lambda s: ["ingest", str(s.file("sink.jsonl", VERL_LINE)), "--framework",
                                                      "verl", "--model", "qwen3-0.6b", "--gpus", "1", "-o",
                                                      str(s.link("link.jsonl", "sink.jsonl"))],
         ("sink.jsonl", "over the input"), lambda s: s.path("sink.jsonl")),
    Case("ingest-source-missing", lambda s: ["ingest", str(s.path("gone.jsonl")), "--framework", "verl", "--model",
                                             "qwen3-0.6b", "--gpus", "1", "-o", str(s.path("m.jsonl"))],
         ("gone.jsonl",), lambda s: s.path("m.jsonl")),
    Case("ingest-into-its-sink-folder", lambda s: ["ingest", str(s.file("sk/verl.jsonl", VERL_LINE).parent),
                                                   "--framework", "verl", "--model", "qwen3-0.6b", "--gpus", "1",
                                                   "-o", str(s.path("sk/m.jsonl"))],
         ("sk", "over the input"), lambda s: s.path("sk")),
    # the history store
    Case("check-store-missing", lambda s: ["check", str(s.path("r")), "--store", s.store()], ("history.db",), STORE),
    Case("record-report-v1", lambda s: ["record", str(s.file("v1/report.json", '{"schema_version": 1}').parent),
                                        "--store", str(s.path("h.db")), "--create"],
         ("schema_version 1", "run.py report"), lambda s: s.path("v1")),
    Case("record-store-missing", lambda s: ["record", str(s.path("r")), "--store", s.store()], ("history.db",), STORE),
    Case("history-store-missing", lambda s: ["history", "--store", s.store(), "--output-dir", str(s.path("h"))],
         ("history.db",), lambda s: s.path("h")),
    Case("untrust-store-missing", lambda s: ["untrust", "--store", s.store(), "--run-id", "1", "--reason", "x"],
         ("history.db",), STORE),
    Case("history-store-not-a-database", lambda s: ["history", "--store", s.not_a_database(), "--output-dir",
                                                     str(s.path("h"))],
         ("notes.txt", "not a database"), lambda s: s.path("notes.txt")),
    Case("record-store-not-a-database", lambda s: ["record", str(s.path("r")), "--store", s.not_a_database()],
         ("notes.txt", "not a database"), lambda s: s.path("notes.txt")),
    Case("mysql-store", lambda s: ["history", "--store", "mysql://u@localhost/db", "--output-dir", str(s.path("h"))],
         ("mysql", "postgresql://"), lambda s: s.path("h")),
    # Writers never write over their inputs or a run folder's own files; a store that would keep nothing is refused.
    Case("ci-record-over-the-manifest", lambda s: ["ci-record", str(s.run("r")), "--out",
                                                   str(s.path("r/manifest.json"))],
         ("--out", "manifest.json", "a file of the run folder"), lambda s: s.path("r")),
    Case("ci-record-over-a-cells-metrics", lambda s: ["ci-record", str(s.run("r")), "--out",
                                                      str(s.path(f"r/{REP0}/metrics.jsonl"))],
         ("--out", f"{REP0}/metrics.jsonl", "a file of the run folder"), lambda s: s.path("r")),
    Case("check-output-twin-over-the-manifest", lambda s: ["check", str(s.run("r")), "--store", str(s.path("h.db")),
                                                           "--create", "--output", str(s.path("r/manifest.md"))],
         ("manifest.json", "a file of the run folder"), lambda s: s.path("r")),
    Case("check-output-over-the-store", lambda s: ["check", str(s.run("r")), "--store", str(s.file("h.db", "")),
                                                   "--output", str(s.path("h.db"))],
         ("--output", "h.db", "over the input"), lambda s: s.path("h.db")),
    Case("emit-sbatch-over-its-plan", lambda s: _execute(s, s.plan()) + ["--emit-sbatch",
                                                                         str(s.path("plan/plan.json"))],
         ("--emit-sbatch", "plan.json"), lambda s: s.path("plan")),
    Case("convert-data-over-its-source", lambda s: ["convert-data", "--source", str(s.file("rows.jsonl", "{}\n")),
                                                    "--start", "0", "--end", "1", "--train-file",
                                                    str(s.path("rows.jsonl")), "--val-file", str(s.path("v.parquet"))],
         ("--train-file", "rows.jsonl", "over the input"), lambda s: s.path("rows.jsonl")),
    Case("convert-recording-into-its-source", lambda s: ["convert-recording", str(s.file("rec/0.pt", "x").parent),
                                                         "--from", "miles", "--to", "verl", "--out",
                                                         str(s.path("rec/verl"))],
         ("--out", "over the input"), lambda s: s.path("rec")),
    Case("history-into-a-runs-plots", lambda s: ["history", "--store", str(s.path("h.db")), "--create",
                                                 "--output-dir", str(s.run("r") / "plots")],
         ("--output-dir", "plots/history.md"), lambda s: s.path("r")),
    Case("record-in-memory-store", lambda s: ["record", str(s.run("r")), "--store", "sqlite:///", "--create"],
         ("--store", "in-memory", "variable"), lambda s: s.path("r")),
    Case("record-read-only-store", lambda s: ["record", str(s.run("r")), "--store",
                                              f"sqlite:///{s.path('ro.db')}?mode=ro", "--create"],
         ("--store", "read-only"), lambda s: s.path("ro.db")),
    Case("record-into-the-run-lock", lambda s: ["record", str(s.run("r")), "--store", str(s.file("r/run.lock", "")),
                                                "--create"], ("--store", "run.lock"), lambda s: s.path("r")),
    # Errors that name the file or value at fault and the fix.
    Case("ab-on-a-truncated-report", lambda s: ["ab", str(s.damaged_run("tr", "report.json", b'{"schema_version":'))],
         ("tr/report.json", "damaged", "run.py report"), lambda s: s.path("tr")),
    Case("ci-record-metrics-not-utf8", lambda s: ["ci-record", str(s.damaged_run("cu", f"{REP0}/metrics.jsonl",
                                                                                b"\xff\xfe\x00junk\n"))],
         (f"cu/{REP0}/metrics.jsonl", "damaged", "copy it again"), lambda s: s.path("cu")),
    Case("report-manifest-without-cells", lambda s: ["report", str(s.emptied_manifest("mc"))],
         ("mc/manifest.json", "lists no cell repeat", "cells/ holds 2 repeat folders", "restore it"),
         lambda s: s.path("mc")),
    Case("report-negative-step-times", lambda s: ["report", str(s.negative_steps("ng"))],
         ("ng/cells/verl-fsdp-colocate/rep-0/metrics.jsonl", "step 0: step_time_s is -", "never negative"),
         lambda s: s.path("ng")),
    Case("prepare-recording-empty-digest", lambda s: ["prepare-recording", "--source", str(s.recording("rc")),
                                                      "--source-format", "miles", "--digest-file",
                                                      str(s.file("rc/digest.txt", ""))],
         ("rc/digest.txt", "is empty", "delete it"), lambda s: s.path("rc")),
    Case("reference-verl-with-a-target", lambda s: _smoke(s, "out", "--reference", "verl@0.8.0"),
         ("--reference", "no target to choose", "give verl alone"), OUT),
    Case("candidate-root-relative", lambda s: _smoke(s, "out", "--candidate-root", "ci/head", "--reference",
                                                     "miles@0.0.2", "--backend", "megatron"),
         ("--candidate-root 'ci/head'", "absolute"), OUT),
    Case("candidate-with-an-empty-target", lambda s: _smoke(s, "out", "--candidate", "miles@"),
         ("--candidate", "no target after '@'", "miles@TARGET"), OUT),
    Case("release-miles-on-fsdp-only", lambda s: _smoke(s, "out", "--miles-version", "0.0.2", "--backend", "fsdp"),
         ("--backend fsdp", "0.0.2", "plan megatron"), OUT),
    Case("postgres-unreachable", lambda s: ["history", "--store", "postgresql://u:pw@127.0.0.1:9/db", "--output-dir",
                                            str(s.path("h"))], ("127.0.0.1:9", "cannot open"), lambda s: s.path("h")),
]  # fmt: skip


def _snapshot(path: Path) -> dict[str, str] | None:
    if not path.exists() and not path.is_symlink():
        return None
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(path.rglob("*"))
    }


@pytest.fixture
def read_only_dir(tmp_path: Path):
    """A folder nobody can write to, root included: immutable (chattr +i), else a read-only tmpfs mounted on it."""
    folder = tmp_path / "read_only"
    folder.mkdir()
    unlock = lock_read_only(folder)
    try:
        yield folder if unlock is not None else None
    finally:
        if unlock is not None:
            unlock()


def test_the_table_is_large_enough():
    assert len(CASES) >= 113 and len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input(case: Case, tmp_path: Path, read_only_dir: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin") + os.pathsep + os.environ["PATH"])
    monkeypatch.chdir(tmp_path)
    setup = Setup(tmp_path, read_only_dir)
    if case.id == "preflight-no-gpu":
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/bin")
    argv = case.argv(setup)
    before = _snapshot(case.watched(setup))
    result = CliRunner().invoke(build_app(), argv)
    output = result.output
    assert result.exit_code == case.code, output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in output
    for culprit in case.culprit:
        assert culprit in output, f"{culprit!r} not in {output!r}"
    assert _snapshot(case.watched(setup)) == before
    assert not (tmp_path / "pwned").exists()


EXTRAS = [
    ("record", "sqlalchemy", "analysis", lambda s: ["record", str(s.path("r")), "--store", s.store(), "--create"]),
    ("history", "sqlalchemy", "analysis", lambda s: ["history", "--store", s.store(), "--create"]),
    ("convert-data", "pyarrow", "verl", lambda s: _convert(s, "0", "5")),
    (
        "convert-recording",
        "torch",
        "recording",
        lambda s: [
            "convert-recording",
            str(s.file("rec/0.pt", "x").parent),
            "--from",
            "miles",
            "--to",
            "verl",
            "--out",
            str(s.path("data")),
        ],
    ),
]


@pytest.mark.parametrize("command,module,extra,argv", EXTRAS, ids=[e[0] for e in EXTRAS])
def test_a_missing_extra_names_what_to_install(command, module, extra, argv, tmp_path: Path):
    setup = Setup(tmp_path, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(STANDINS / "blocker"), "BENCH_TEST_BLOCK_MODULES": module}
    result = subprocess.run([sys.executable, str(RUN_PY), *argv(setup)], capture_output=True, text=True, env=env,
                            cwd=tmp_path, timeout=120)  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert f"'{extra}' extra" in result.stderr and f'pip install -e ".[{extra}]"' in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "missing").exists() and not (tmp_path / "data").exists()


def test_a_missing_module_no_extra_installs_names_its_own_command():
    """apache-otava is installed without its dependencies (its numpy pin): no extra can name it, the command can."""
    from scripts.benchmark.errors import missing_module_error

    error = missing_module_error(ModuleNotFoundError("No module named 'otava'", name="otava.analysis"))
    assert error is not None and "pip install --no-deps apache-otava==0.8.0" in str(error)
    assert "extra" not in str(error)
