# doc-dev: docs/benchmark.md
"""Run a plan: preparation steps once, then cells x repeats interleaved, each watched, recorded and stopped cleanly.

- `execute(plan_path, output_dir, options)` / `execute(None, output_dir, options, resume=True)`: checks everything that
  can be checked before any process starts (output folder writable, plan well formed and free of secrets,
  executables present, a Ray CLI where a private head is needed), then writes DIR/plan.json and DIR/manifest.json.
- Order: repeat 0 of every cell, then repeat 1, ...; within a repeat the cells of one (backend, layout) run
  Miles then VERL, so node drift hits both frameworks alike.
- Preparation steps run once, before the first cell, with this interpreter for a bare python (they are harness
  work: downloads, data conversion); a step whose `creates` exists is skipped.
- Per cell repeat: command.sh and env.json (redacted), environment.json, an optional private Ray head, the command in
  its own session (working directory: the cell repeat folder, so Hydra's outputs/ lands there) with log.txt, the
  sink followed into metrics.jsonl as steps complete, the watchdog; afterwards everything the harness started is
  stopped (SIGTERM, grace, SIGKILL) and GPU memory is checked.
- SIGINT/SIGTERM to the harness: the running cell is stopped and marked interrupted, the rest stay pending; exit 130.
- `--resume DIR`: complete cells (with all their steps on disk) are skipped; failed, interrupted, running (the
  harness died) and short cells rerun; the earlier attempt's folder is kept as rep-<k>.attempt-<n>.
- Returns the exit status: 0 all complete, 1 some cell not complete, 130 interrupted.
- At the end of every run (complete, failed or interrupted) where some cell repeat wrote a step, the report of
  `run.py report DIR` is written into DIR and its verdict printed; a report error (or a signal while it is written)
  never changes the exit status: it is printed and appended to the manifest's `warnings`.

Caveats:
- `RunError` (bad input) is raised before anything is started; everything after that is recorded in the manifest.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from miles.utils.bench_metrics import read_records
from scripts.benchmark.runner import environment_record, gpu_memory
from scripts.benchmark.runner.cell_command import (
    CellCommand,
    FrameworkRuntime,
    build_cell_command,
    find_executable_problem,
    framework_interpreter_argv,
    substitute_cell_dir,
    uses_ray_job_submit,
)
from scripts.benchmark.contracts.manifest import MANIFEST_NAME, CellRun, Manifest, new_cell_run, write_json_atomic
from scripts.benchmark.runner.process import ManagedProcess, become_child_subreaper, capture_output, run_to_completion
from scripts.benchmark.runner.progress import MatrixProgress
from scripts.benchmark.runner.ray_head import PrivateRayHead, RayTarget, external_target, start_private_head
from scripts.benchmark.runner.redaction import Redactor, find_plan_secrets
from scripts.benchmark.runner.sink_follower import SINK_FORMATS, SinkFollower
from scripts.benchmark.runner.watchdog import Verdict, Watchdog, WatchdogLimits

RayMode = Literal["auto", "private", "external", "none"]
_CELL_KEYS = ("id", "framework", "backend", "layout", "launch_argv", "sink", "num_steps")


class RunError(ValueError):
    """Bad input found before anything was started."""


@dataclass(kw_only=True)
class ExecuteOptions:
    repeats: int = 1
    fail_fast: bool = False
    skip_prepare: bool = False
    miles_python: str | None = None
    verl_python: str | None = None
    miles_prefix: str | None = None
    verl_prefix: str | None = None
    cell_timeout_s: float = WatchdogLimits.cell_timeout_s
    first_step_timeout_s: float = WatchdogLimits.first_step_timeout_s
    stall_timeout_s: float = WatchdogLimits.stall_timeout_s
    grace_s: float = 30.0
    ray: RayMode = "auto"
    ray_address: str | None = None
    ray_dashboard_url: str | None = None
    gpu_release_timeout_s: float = 120.0
    prepare_timeout_s: float = 4 * 3600.0
    poll_interval_s: float = 0.2

    def runtime(self, framework: str) -> FrameworkRuntime:
        if framework == "miles":
            return FrameworkRuntime.from_options(self.miles_python, self.miles_prefix)
        return FrameworkRuntime.from_options(self.verl_python, self.verl_prefix)

    def limits(self) -> WatchdogLimits:
        return WatchdogLimits(
            cell_timeout_s=self.cell_timeout_s,
            first_step_timeout_s=self.first_step_timeout_s,
            stall_timeout_s=self.stall_timeout_s,
        )


def check_output_dir(output_dir: Path) -> None:
    """Create the run folder and prove it is writable, or raise RunError naming the folder and the cause."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe = output_dir / ".write-probe"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise RunError(f"--output-dir {output_dir} is not writable: {exc.strerror or exc}") from exc


def load_plan(path: Path) -> dict[str, Any]:
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RunError(f"cannot read plan {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise RunError(f"plan {path} is not valid JSON: {exc}") from exc
    problems = validate_plan(plan)
    if problems:
        raise RunError(f"plan {path} cannot be executed:\n  " + "\n  ".join(problems))
    return plan


def validate_plan(plan: Any) -> list[str]:
    if not isinstance(plan, dict):
        return ["the plan is not a JSON object"]
    problems: list[str] = []
    if plan.get("schema_version") != 1:
        problems.append(f"schema_version is {plan.get('schema_version')!r}, expected 1")
    cells = plan.get("cells")
    if not isinstance(cells, list) or not cells:
        return [*problems, "cells must be a non-empty list"]
    seen: set[str] = set()
    for index, cell in enumerate(cells):
        where = f"cells[{index}]"
        missing = [k for k in _CELL_KEYS if k not in cell]
        if missing:
            problems.append(f"{where} lacks {', '.join(missing)}")
            continue
        where = f"cells[{index}] ({cell['id']})"
        if cell["id"] in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(cell["id"])
        if cell["framework"] not in ("miles", "verl"):
            problems.append(f"{where}: framework {cell['framework']!r} is not miles or verl")
        argv = cell["launch_argv"]
        if not isinstance(argv, list) or not argv or not all(isinstance(w, str) for w in argv):
            problems.append(f"{where}: launch_argv must be a non-empty list of strings")
        if cell["sink"].get("format") not in SINK_FORMATS:
            problems.append(f"{where}: sink.format {cell['sink'].get('format')!r} is not one of {SINK_FORMATS}")
        if not isinstance(cell["num_steps"], int) or cell["num_steps"] < 1:
            problems.append(f"{where}: num_steps must be a positive integer, got {cell['num_steps']!r}")
    for index, step in enumerate(plan.get("prepare") or []):
        argv = step.get("argv") if isinstance(step, dict) else None
        if not isinstance(step, dict) or not isinstance(step.get("name"), str):
            problems.append(f"prepare[{index}] must be an object with a name")
        elif not isinstance(argv, list) or not argv or not all(isinstance(w, str) for w in argv):
            problems.append(f"prepare[{index}] ({step['name']}): argv must be a non-empty list of strings")
    problems += [f"a literal secret in {where}" for where in find_plan_secrets(plan)]
    return problems


def interleaved_order(cells: list[dict[str, Any]], repeats: int) -> list[tuple[dict[str, Any], int]]:
    """Repeat by repeat; inside a repeat, per (backend, layout) in plan order, Miles then VERL."""
    groups: list[tuple[str, str]] = []
    for cell in cells:
        if (cell["backend"], cell["layout"]) not in groups:
            groups.append((cell["backend"], cell["layout"]))
    rank = {"miles": 0, "verl": 1}
    ordered = sorted(cells, key=lambda c: (groups.index((c["backend"], c["layout"])), rank.get(c["framework"], 2)))
    return [(cell, repeat) for repeat in range(repeats) for cell in ordered]


@dataclass
class _StopRequest:
    signal_name: str | None = None

    def install(self) -> dict[int, Any]:
        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, self._handle)
        return previous

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signal_name = signal.Signals(signum).name


class MatrixRunner:
    """One execution of a plan into a run folder (see the module docstring)."""

    def __init__(self, plan: dict[str, Any], manifest: Manifest, options: ExecuteOptions, progress: MatrixProgress):
        self.plan = plan
        self.manifest = manifest
        self.options = options
        self.progress = progress
        self.run_dir = manifest.run_dir
        self.redactor = Redactor.from_environ(os.environ)
        self.stop = _StopRequest()
        self._packages: dict[tuple, dict[str, Any]] = {}
        self._gpu_baseline: dict[int, float] | None = None
        self._cells_by_id = {cell["id"]: cell for cell in plan["cells"]}

    def run(self, todo: list[CellRun]) -> int:
        """The matrix, then its report; the harness's own signal handlers stay installed throughout (no gap)."""
        previous = self.stop.install()
        try:
            code = self._run_matrix(todo)
            self.progress.close()
            report_after_run(self.manifest, self.progress)
            return code
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.progress.close()

    def _run_matrix(self, todo: list[CellRun]) -> int:
        if not self.options.skip_prepare and not self._prepare():
            return 130 if self.stop.signal_name else 1
        self._gpu_baseline = gpu_memory.read_used_mib()
        for cell_run in todo:
            if self.stop.signal_name:
                break
            try:
                state = self._run_cell(self._cells_by_id[cell_run.id], cell_run)
            except Exception as exc:  # a runner bug or an I/O error: recorded on the cell, the matrix goes on
                if cell_run.state != "running":
                    self.manifest.set_state(cell_run, "running")
                verdict = Verdict("failed", f"runner error: {exc!r}")
                state = self._finish(cell_run, verdict, steps=cell_run.steps_completed)
            if state != "complete" and self.options.fail_fast and not self.stop.signal_name:
                self.progress.message(f"--fail-fast: stopping after {cell_run.id} rep {cell_run.repeat}")
                break
        if self.stop.signal_name:
            return 130
        return 0 if all(c.state == "complete" for c in self.manifest.cells) else 1

    def _stop_requested(self) -> bool:
        return self.stop.signal_name is not None

    def _prepare(self) -> bool:
        """Run the plan's preparation steps once (download, convert); False (recorded) when one fails."""
        self.manifest.prepare = []
        for step in self.plan.get("prepare") or []:
            entry = {"name": step["name"], "state": "skipped", "reason": None, "log": f"prepare/{step['name']}.log"}
            self.manifest.prepare.append(entry)
            creates = step.get("creates")
            if creates and step.get("skip_if_exists", True) and Path(creates).exists():
                entry["reason"] = f"{creates} exists"
                self.manifest.save()
                continue
            self.progress.message(f"prepare {step['name']}: {shlex.join(self.redactor.redact_argv(step['argv']))}")
            code = run_to_completion(
                harness_argv(step["argv"]),
                env=os.environ,
                cwd=Path.cwd(),
                log_path=self.run_dir / entry["log"],
                redactor=self.redactor,
                timeout_s=self.options.prepare_timeout_s,
                should_stop=self._stop_requested,
            )
            if self.stop.signal_name:
                entry["state"], entry["reason"] = "interrupted", f"interrupted by {self.stop.signal_name}"
            elif code != 0:
                entry["state"], entry["reason"] = "failed", f"exited with code {code}; see {entry['log']}"
            else:
                entry["state"] = "complete"
            self.manifest.save()
            if entry["state"] != "complete":
                self.progress.message(f"prepare {step['name']} {entry['state']}: {entry['reason']}")
                return False
        return True

    def _ray_target_for(self, cell: dict[str, Any]) -> tuple[RayTarget | None, bool]:
        """(target, start a private head?) for this cell under the --ray mode."""
        if self.options.ray == "none":
            return None, False
        if needs_private_head(cell, self.options):
            return None, True
        if self.options.ray_address:
            return external_target(self.options.ray_address, self.options.ray_dashboard_url), False
        return None, False

    def _run_cell(self, cell: dict[str, Any], cell_run: CellRun) -> str:
        cell_dir = self.run_dir / cell_run.dir
        self._archive_previous_attempt(cell_run, cell_dir)
        (cell_dir / "sink").mkdir(parents=True, exist_ok=True)
        runtime = self.options.runtime(cell["framework"])
        label = f"{cell_run.id} rep {cell_run.repeat}"
        self.manifest.set_state(cell_run, "running")
        cell_run.steps_completed = 0
        self.progress.cell_started(label, cell.get("num_steps"))
        target, start_head = self._ray_target_for(cell)
        head: PrivateRayHead | None = None
        try:
            if start_head:
                head = start_private_head(
                    runtime.ray_argv(),
                    num_gpus=int((cell.get("gpus") or {}).get("per_node") or 0),
                    env=os.environ,
                    log_path=cell_dir / "ray-head.log",
                    redactor=self.redactor,
                    should_stop=self._stop_requested,
                )
                target = head.target
                write_json_atomic(cell_dir / "ray.json", head.describe())
            elif target is not None:
                write_json_atomic(cell_dir / "ray.json", asdict(target))
        except RuntimeError as exc:
            if self._stop_requested():
                return self._finish(
                    cell_run, Verdict("interrupted", f"interrupted by {self.stop.signal_name}"), steps=0
                )
            return self._finish(cell_run, Verdict("failed", f"Ray head: {exc}"), steps=0)
        submission_id = f"bench-{cell_run.id}-rep{cell_run.repeat}-{int(time.time())}"
        command = build_cell_command(
            cell, cell_dir=cell_dir, runtime=runtime, ray=target, submission_id=submission_id, base_env=os.environ
        )
        self._write_command_record(cell_dir, command)
        self._write_environment(cell, cell_dir, runtime, command)
        try:
            verdict, steps = self._watch(cell, cell_run, cell_dir, command, target)
        finally:
            if head is not None:
                head.stop(self.options.grace_s)
        self._copy_outside_sink(cell, cell_dir)
        release = gpu_memory.wait_until_released(
            self._gpu_baseline, timeout_s=self.options.gpu_release_timeout_s, should_stop=self._stop_requested
        )
        if release is not None:
            self.manifest.warnings.append(f"after {label}: {release}")
        return self._finish(cell_run, verdict, steps=steps)

    def _watch(
        self,
        cell: dict[str, Any],
        cell_run: CellRun,
        cell_dir: Path,
        command: CellCommand,
        target: RayTarget | None,
    ) -> tuple[Verdict, int]:
        follower = SinkFollower(
            format=cell["sink"]["format"],
            path=Path(substitute_cell_dir(cell["sink"]["path"], cell_dir)),
            metrics_path=self.run_dir / cell_run.metrics,
            context={"cell": cell, "cell_dir": str(cell_dir), "device_name": self._device_name(cell_dir)},
            redactor=self.redactor,
        )
        process = ManagedProcess(
            argv=command.argv,
            env=command.process_env,
            cwd=cell_dir,
            log_path=cell_dir / "log.txt",
            redactor=self.redactor,
        )
        started = time.monotonic()
        watchdog = Watchdog(limits=self.options.limits(), started_at=started, num_steps=cell.get("num_steps"))
        process.start()
        try:
            return self._watch_started(process, follower, watchdog, cell_run, command, target)
        except BaseException:
            if process.poll() is None or process.live_tracked():
                process.stop(self.options.grace_s)  # never leave a cell running behind a runner error
            raise

    def _watch_started(
        self,
        process: ManagedProcess,
        follower: SinkFollower,
        watchdog: Watchdog,
        cell_run: CellRun,
        command: CellCommand,
        target: RayTarget | None,
    ) -> tuple[Verdict, int]:
        verdict: Verdict | None = None
        exited = False
        while verdict is None:
            time.sleep(self.options.poll_interval_s)
            process.track()
            exit_code = process.poll()
            try:
                self._follow(follower, watchdog, cell_run, final=False)
            except Exception as exc:  # an unreadable sink ends the cell with the reader's message
                verdict = Verdict("failed", f"metric sink unreadable: {exc}")
                break
            if self.stop.signal_name:
                verdict = Verdict("interrupted", f"interrupted by {self.stop.signal_name}")
                break
            verdict = watchdog.check(time.monotonic(), exit_code)
            exited = exit_code is not None
        if exited:
            outcome = process.finish(self.options.grace_s)
        else:
            self._stop_ray_job(command, target)
            outcome = process.stop(self.options.grace_s)
            cell_run.exit_code = outcome.exit_code
        try:
            self._follow(follower, watchdog, cell_run, final=True)
        except Exception as exc:
            if verdict.state == "complete":
                verdict = Verdict("failed", f"metric sink unreadable: {exc}")
        if exited:
            cell_run.exit_code = outcome.exit_code
            verdict = watchdog.check(time.monotonic(), outcome.exit_code) or verdict
        if outcome.survivors:
            self.manifest.warnings.append(
                f"{cell_run.id} rep {cell_run.repeat}: pids {outcome.survivors} survived SIGKILL"
            )
        return verdict, follower.steps_written

    @staticmethod
    def _device_name(cell_dir: Path) -> str | None:
        try:
            return json.loads((cell_dir / "environment.json").read_text(encoding="utf-8")).get("gpu_model")
        except (OSError, json.JSONDecodeError):
            return None

    def _follow(self, follower: SinkFollower, watchdog: Watchdog, cell_run: CellRun, *, final: bool) -> None:
        fresh = follower.poll(final=final)
        if not fresh:
            return
        watchdog.on_step(time.monotonic(), follower.steps_written)
        cell_run.steps_completed = follower.steps_written
        self.manifest.save()
        self.progress.step(follower.steps_written, fresh[-1].step_time_s)

    def _stop_ray_job(self, command: CellCommand, target: RayTarget | None) -> None:
        """A Ray job outlives its `ray job submit` client: stop it by its submission id (before any private head)."""
        if command.submission_id is None or target is None:
            return
        ray_argv = [w for w in command.argv[: command.argv.index("job")]]
        capture_output(
            [*ray_argv, "job", "stop", f"--address={target.dashboard_url}", command.submission_id],
            timeout_s=max(self.options.grace_s, 10.0),
            env=command.process_env,
        )

    def _finish(self, cell_run: CellRun, verdict: Verdict, *, steps: int) -> str:
        cell_run.steps_completed = steps
        self.manifest.set_state(cell_run, verdict.state, reason=verdict.reason)  # type: ignore[arg-type]
        self.progress.cell_ended(verdict.state, verdict.reason)
        return verdict.state

    def _archive_previous_attempt(self, cell_run: CellRun, cell_dir: Path) -> None:
        if not cell_dir.exists():
            return
        attempt = len(cell_run.previous_attempts) + 1
        while (kept := cell_dir.with_name(f"{cell_dir.name}.attempt-{attempt}")).exists():
            attempt += 1
        cell_dir.rename(kept)
        cell_run.previous_attempts.append(str(kept.relative_to(self.run_dir)))

    def _write_environment(
        self, cell: dict[str, Any], cell_dir: Path, runtime: FrameworkRuntime, command: CellCommand
    ) -> None:
        interpreter = framework_interpreter_argv(cell["launch_argv"], runtime)
        key = (cell["framework"], tuple(interpreter), command.plan_env.get("PYTHONPATH"))
        if key not in self._packages:
            self._packages[key] = environment_record.probe_packages(interpreter, env=command.process_env)
        record = environment_record.build_environment_record(
            framework=cell["framework"], interpreter_argv=interpreter, packages=self._packages[key]
        )
        write_json_atomic(cell_dir / "environment.json", self.redactor.redact_json(record))

    def _write_command_record(self, cell_dir: Path, command: CellCommand) -> None:
        """command.sh (runnable: cd to the cell folder, the plan's env, exec the argv) and env.json, redacted."""
        redacted_env = self.redactor.redact_env(command.plan_env)
        exports = "\n".join(f"export {k}={shlex.quote(v)}" for k, v in redacted_env.items())
        script = (
            "#!/usr/bin/env bash\n"
            "# The exact command the benchmark runner executed for this cell repeat (secrets redacted).\n"
            "set -euo pipefail\n"
            f"cd {shlex.quote(str(cell_dir))}\n"
            f"{exports}\n"
            f"exec {shlex.join(self.redactor.redact_argv(command.argv))}\n"
        )
        (cell_dir / "command.sh").write_text(script, encoding="utf-8")
        (cell_dir / "command.sh").chmod(0o755)
        inherited = {k: v for k, v in command.process_env.items() if k not in command.plan_env}
        write_json_atomic(
            cell_dir / "env.json",
            {"plan_and_runner": redacted_env, "inherited": self.redactor.redact_env(inherited)},
        )

    def _copy_outside_sink(self, cell: dict[str, Any], cell_dir: Path) -> None:
        """Keep the raw sink in the cell folder even when the plan pointed it elsewhere."""
        sink = Path(substitute_cell_dir(cell["sink"]["path"], cell_dir))
        if not sink.exists() or cell_dir.resolve() in sink.resolve().parents:
            return
        destination = cell_dir / "sink" / sink.name
        if sink.is_dir():
            shutil.copytree(sink, destination, dirs_exist_ok=True)
        else:
            shutil.copy2(sink, destination)


def harness_argv(argv: list[str]) -> list[str]:
    """A preparation step is harness work (download, data conversion): a bare python runs as this interpreter."""
    return [sys.executable if word in ("python", "python3") else word for word in argv]


def _needs_rerun(cell_run: CellRun, run_dir: Path) -> bool:
    if cell_run.state != "complete":
        return True
    metrics = run_dir / cell_run.metrics
    if not metrics.exists():
        return True
    steps = len(read_records(metrics))
    return cell_run.num_steps is not None and steps < cell_run.num_steps


def prepare_execution(
    plan_path: Path | None, output_dir: Path, options: ExecuteOptions, *, resume: bool
) -> tuple[dict[str, Any], Manifest, list[CellRun]]:
    """Every check that can fail before anything starts; returns the plan, the manifest and the cells to run."""
    check_output_dir(output_dir)
    manifest_path = output_dir / MANIFEST_NAME
    if resume:
        if not manifest_path.exists():
            raise RunError(f"--resume {output_dir}: no {MANIFEST_NAME} there (was it a run folder?)")
        plan = load_plan(output_dir / "plan.json")
    else:
        if manifest_path.exists():
            raise RunError(
                f"--output-dir {output_dir} already holds a run ({MANIFEST_NAME}); use --resume {output_dir}"
            )
        assert plan_path is not None
        plan = load_plan(plan_path)
    if options.repeats < 1:
        raise RunError(f"--repeats must be >= 1, got {options.repeats}")
    if options.ray == "external" and not options.ray_address:
        raise RunError("--ray external needs --ray-address (or RAY_ADDRESS in the environment)")
    _check_launchable(plan, options)
    if not resume:
        _copy_plan_files(plan_path, output_dir)
        manifest = Manifest(
            path=manifest_path,
            spec_hash=plan.get("spec_hash"),
            cells=[new_cell_run(cell, rep) for cell, rep in interleaved_order(plan["cells"], options.repeats)],
        )
    else:
        manifest = Manifest.load(manifest_path)
        known = {c.key for c in manifest.cells}
        for cell, rep in interleaved_order(plan["cells"], options.repeats):
            if (cell["id"], rep) not in known:  # --resume --repeats N with a larger N adds repeats
                manifest.cells.append(new_cell_run(cell, rep))
    manifest.options = Redactor.from_environ(os.environ).redact_json(asdict(options))
    manifest.save()
    todo = [c for c in manifest.cells if _needs_rerun(c, output_dir)]
    return plan, manifest, todo


def _copy_plan_files(plan_path: Path | None, output_dir: Path) -> None:
    assert plan_path is not None
    for name in ("parity.json", "parity.md"):
        sibling = plan_path.parent / name
        if sibling.exists() and not (output_dir / name).exists():
            shutil.copy2(sibling, output_dir / name)
    if plan_path.resolve() != (output_dir / "plan.json").resolve():
        shutil.copy2(plan_path, output_dir / "plan.json")


def needs_private_head(cell: Mapping[str, Any], options: ExecuteOptions) -> bool:
    """--ray private: every cell; --ray auto without RAY_ADDRESS: cells that submit a Ray job (Miles)."""
    if options.ray == "private":
        return True
    return options.ray == "auto" and not options.ray_address and uses_ray_job_submit(cell["launch_argv"])


def steps_to_prepare(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The preparation steps that will run: those whose `creates` is missing (or that are never skipped)."""
    return [
        step
        for step in plan.get("prepare") or []
        if not (step.get("creates") and step.get("skip_if_exists", True) and Path(step["creates"]).exists())
    ]


def _check_launchable(plan: dict[str, Any], options: ExecuteOptions) -> None:
    problems: list[str] = []
    for step in [] if options.skip_prepare else steps_to_prepare(plan):
        if problem := find_executable_problem(harness_argv(step["argv"])):
            problems.append(
                f"prepare step {step['name']}: {problem} (it creates {step.get('creates')}; "
                "install it, create that path, or pass --skip-prepare)"
            )
    for framework, python in (("miles", options.miles_python), ("verl", options.verl_python)):
        runtime = options.runtime(framework)
        if python and not runtime.prefix and (problem := find_executable_problem([python])):
            problems.append(f"--{framework}-python: {problem}")
    for cell in plan["cells"]:
        runtime = options.runtime(cell["framework"])
        if runtime.prefix:
            if problem := find_executable_problem(list(runtime.prefix)):
                problems.append(f"--{cell['framework']}-prefix: {problem}")
            continue
        argv = [runtime.python if runtime.python and w in ("python", "python3") else w for w in cell["launch_argv"]]
        if argv[0] == "ray":
            argv[0] = runtime.ray_argv()[-1]
        if problem := find_executable_problem(argv):
            problems.append(f"cell {cell['id']} launch_argv[0]: {problem}")
        if needs_private_head(cell, options) and (problem := find_executable_problem(runtime.ray_argv())):
            problems.append(
                f"cell {cell['id']} needs a private Ray head, but {problem} "
                "(use --{}-python of an environment with Ray, RAY_ADDRESS, or --ray none)".format(cell["framework"])
            )
    if problems:
        raise RunError("cannot start the matrix:\n  " + "\n  ".join(sorted(set(problems))))


def execute(
    plan_path: Path | None,
    output_dir: Path,
    options: ExecuteOptions,
    *,
    resume: bool = False,
    progress: MatrixProgress | None = None,
) -> int:
    # Absolute, because each cell runs with the cell folder as its working directory and ${BENCH_CELL_DIR} in its
    # sink path: a relative run folder would make the sink land one level down, where the runner never looks.
    output_dir = Path(output_dir).resolve()
    plan, manifest, todo = prepare_execution(plan_path, output_dir, options, resume=resume)
    become_child_subreaper()
    progress = progress or MatrixProgress(total_cells=len(todo))
    if not todo:
        progress.message(f"nothing to do: all {len(manifest.cells)} cell repeats in {output_dir} are complete")
        progress.close()
        return 0
    return MatrixRunner(plan, manifest, options, progress).run(todo)


class _ReportInterrupted(BaseException):
    """SIGINT/SIGTERM while the end-of-run report is written: stop it, keep the run's own exit status."""


def _interrupt_report(signum: int, _frame: Any) -> None:
    raise _ReportInterrupted(signal.Signals(signum).name)


def report_after_run(manifest: Manifest, progress: MatrixProgress) -> None:
    """`run.py report DIR` at the end of every run with a step on disk; a failure is logged and kept as a warning."""
    run_dir = manifest.run_dir
    if not any((run_dir / c.metrics).is_file() and (run_dir / c.metrics).stat().st_size for c in manifest.cells):
        progress.message(f"report: not written (no cell repeat wrote a step); run.py report {run_dir} later")
        return
    previous = {sig: signal.signal(sig, _interrupt_report) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        from scripts.benchmark.report.write import analyse_and_write, verdict_markdown

        doc, written = analyse_and_write(run_dir)
        progress.message(verdict_markdown(doc).rstrip())
        progress.message("report: wrote " + ", ".join(str(path) for path in written.values()))
        return
    except _ReportInterrupted as exc:
        warning = f"report: not written, interrupted by {exc}; run `run.py report {run_dir}`"
    except Exception as exc:  # the run's outcome stands whatever the report does
        warning = f"report: failed with {exc!r}; the run itself is recorded as it ended (run.py report {run_dir})"
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    progress.message(warning)
    manifest.warnings.append(warning)
    try:
        manifest.save()
    except OSError as exc:
        progress.message(f"manifest.json: could not record that warning: {exc}")


def options_from_manifest(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The options a run was started with (what --resume reuses unless overridden on the command line)."""
    known = set(ExecuteOptions.__dataclass_fields__)
    return {k: v for k, v in stored.items() if k in known and v != "<redacted>"}
