"""One execution of a plan into a run folder: preparation steps once, then each cell repeat started, watched,
followed into metrics.jsonl and stopped cleanly; SIGINT/SIGTERM stop the running cell and leave the rest pending.

A train-only run's recording is proven against its kept digest before the first cell and again before each cell
(runner/recording_check.py); a damaged one stops the matrix with exit 2 naming the file, the rest left pending.

While a cell runs, its process record (group, session, pids with start times) is kept in the manifest, so a --resume
after a killed harness can find what is left. A write error in the run folder (a full disk) fails the running cell
with the error as reason, stops the matrix (exit 1) and leaves everything resumable."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scripts.benchmark.common.redaction import Redactor
from scripts.benchmark.contracts.manifest import (
    NOT_NEEDED,
    SKIPPED,
    CellRun,
    Manifest,
    ProcessRecord,
    RayRecord,
    write_json_atomic,
)
from scripts.benchmark.runner import cell_records, gpu_memory
from scripts.benchmark.runner.cell_command import CellCommand, build_cell_command, substitute_cell_dir
from scripts.benchmark.runner.end_report import EndReport, report_after_run
from scripts.benchmark.runner.leftovers import alive_survivors
from scripts.benchmark.runner.options import ExecuteOptions, harness_argv, needs_private_head
from scripts.benchmark.runner.process import ManagedProcess, run_to_completion
from scripts.benchmark.runner.progress import MatrixProgress
from scripts.benchmark.runner.ray_head import (
    PrivateRayHead,
    RayTarget,
    external_target,
    ray_environment,
    start_private_head,
    stop_ray_job,
)
from scripts.benchmark.runner.recording_check import RecordingCheck, RecordingDamaged
from scripts.benchmark.runner.rounds import LooksFor, Rounds
from scripts.benchmark.runner.sink_follower import SinkFollower
from scripts.benchmark.runner.watchdog import CellOutcome, Watchdog
from scripts.benchmark.runner.write_errors import SpaceReserve, describe_write_error, write_error_in


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

    def __init__(
        self,
        plan: dict[str, Any],
        manifest: Manifest,
        options: ExecuteOptions,
        progress: MatrixProgress,
        end_report: EndReport | None = None,
        looks_for: LooksFor | None = None,
    ):
        self.end_report = end_report
        self.plan = plan
        self.manifest = manifest
        self.options = options
        self.progress = progress
        self.run_dir = manifest.run_dir
        self.redactor = Redactor.from_environ(os.environ)
        manifest.scrub = self.redactor.redact_json
        self.stop = _StopRequest()
        self.reserve = SpaceReserve(self.run_dir)
        self.write_failure: str | None = None
        self.recording = RecordingCheck(plan) if plan.get("recording") else None
        self.recording_failure: str | None = None
        self._packages: dict[tuple, dict[str, Any]] = {}
        self._gpu_baseline: dict[int, float] | None = None
        self._cells_by_id = {cell["id"]: cell for cell in plan["cells"]}
        self.rounds = Rounds(plan, manifest, options.budget_s, looks_for)

    def run(self, todo: list[CellRun]) -> int:
        """The matrix, then its report; the harness's own signal handlers stay installed throughout (no gap)."""
        previous = self.stop.install()
        self.reserve.claim()
        try:
            code = self._run_matrix(todo)
            self.progress.close()
            if self.recording_failure is not None:
                print(f"error: {self.recording_failure}", file=sys.stderr)
            if self.write_failure is None:
                report_after_run(self.manifest, self.progress, self.end_report)
            else:
                print(f"run stopped: {self.write_failure}; free space, then --resume {self.run_dir}", file=sys.stderr)
            return code
        finally:
            self.reserve.release()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.progress.close()

    def _run_matrix(self, todo: list[CellRun]) -> int:
        if not self.options.skip_prepare and not self._prepare():
            return 130 if self.stop.signal_name else 1
        if not self._note_recording():
            return 2
        self._gpu_baseline = gpu_memory.read_used_mib()
        for cell_run in todo:
            if self.stop.signal_name:
                break
            skip = self.rounds.skip(cell_run)
            if skip is not None:
                self.manifest.set_state(cell_run, skip[0], reason=skip[1])
                self.progress.message(f"{cell_run.id} rep {cell_run.repeat}: {skip[1]}")
                continue
            self.rounds.started(cell_run)
            try:
                state = self._run_cell(self._cells_by_id[cell_run.id], cell_run)
            except Exception as exc:  # a runner bug or an I/O error: recorded on the cell, the matrix goes on
                state = self._record_runner_error(cell_run, exc)
            if self.write_failure is not None or self.recording_failure is not None:
                break
            if not self.stop.signal_name and (line := self.rounds.after(cell_run)) is not None:
                self.progress.message(line)
            if state != "complete" and self.options.fail_fast and not self.stop.signal_name:
                self.progress.message(f"--fail-fast: stopping after {cell_run.id} rep {cell_run.repeat}")
                break
        if self.stop.signal_name:
            return 130
        if self.recording_failure is not None:
            return 2
        done = {"complete", NOT_NEEDED} | ({SKIPPED} if self.rounds.sequential else set())
        return 0 if all(c.state in done for c in self.manifest.cells) else 1

    def _record_runner_error(self, cell_run: CellRun, exc: Exception) -> str:
        """The cell fails with the error; a write error (full disk) also stops the matrix, after freeing the reserve
        so that this last manifest write fits."""
        write_error = write_error_in(exc)
        if write_error is not None:
            self.write_failure = self.write_failure or describe_write_error(write_error)
            self.reserve.release()
        reason = self.write_failure if write_error is not None else f"runner error: {exc!r}"
        try:
            if cell_run.state != "running":
                self.manifest.set_state(cell_run, "running")
            return self._finish(cell_run, CellOutcome("failed", reason), steps=cell_run.steps_completed)
        except OSError as again:
            self.write_failure = self.write_failure or describe_write_error(again)
            print(f"error: cannot record {cell_run.id} rep {cell_run.repeat} as failed: {again}", file=sys.stderr)
            return "failed"

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

    def _note_recording(self) -> bool:
        """A train-only plan: every recording folder its cells replay proven against the kept digest before any cell
        starts, and that digest into the manifest (the report shows it); False (said, and kept in the warnings)
        when one is damaged."""
        if self.recording is None:
            return True
        recording = self.plan["recording"]
        try:
            for cell in self._cells_by_id.values():
                self.recording.check(cell)
            digest = self.recording.digest()
        except RecordingDamaged as exc:
            self.recording_failure = str(exc)
            self.manifest.warnings.append(f"recording: {exc}")
            self.manifest.save()
            return False
        self.manifest.recording = {"key": recording["key"], "root": recording["root"], "digest": digest}
        self.manifest.save()
        return True

    def _refusal(self, cell: dict[str, Any], cell_run: CellRun) -> str | None:
        """The cell failed before it starts (its state), or None: processes of its previous attempt still alive
        (they could write into its sink), or a recording changed since it was proven (it is never replayed)."""
        if survivors := alive_survivors(cell_run):
            pids = sorted(p.pid for p in survivors)
            reason = f"not rerun: pids {pids} of its previous attempt are still alive and could write into its sink"
        elif self.recording is not None:
            try:
                self.recording.check(cell)
                return None
            except RecordingDamaged as exc:
                self.recording_failure = reason = str(exc)
        else:
            return None
        self.manifest.set_state(cell_run, "running")
        return self._finish(cell_run, CellOutcome("failed", reason), steps=0)

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
        if (refused := self._refusal(cell, cell_run)) is not None:
            return refused
        self._archive_previous_attempt(cell, cell_run, cell_dir)
        (cell_dir / "sink").mkdir(parents=True, exist_ok=True)
        runtime = self.options.runtime(cell)
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
                    env=ray_environment(os.environ),
                    log_path=cell_dir / "ray-head.log",
                    redactor=self.redactor,
                    should_stop=self._stop_requested,
                )
                target = head.target
            elif target is not None:
                write_json_atomic(cell_dir / "ray.json", asdict(target))
        except RuntimeError as exc:
            if self._stop_requested():
                return self._finish(
                    cell_run, CellOutcome("interrupted", f"interrupted by {self.stop.signal_name}"), steps=0
                )
            return self._finish(cell_run, CellOutcome("failed", f"Ray head: {exc}"), steps=0)
        try:  # from here on, whatever fails (a full disk too) the private head is stopped
            if head is not None:
                write_json_atomic(cell_dir / "ray.json", head.describe())
            submission_id = f"bench-{cell_run.id}-rep{cell_run.repeat}-{int(time.time())}"
            command = build_cell_command(
                cell,
                cell_dir=cell_dir,
                runtime=runtime,
                ray=target,
                submission_id=submission_id,
                base_env=ray_environment(os.environ),
            )
            self._record_ray(cell_run, head, command, target)
            cell_records.write_command_record(cell_dir, command, self.redactor)
            cell_records.write_environment(cell, cell_dir, runtime, command, self.redactor, self._packages)
            verdict, steps = self._watch(cell, cell_run, cell_dir, command, target)
        finally:
            if head is not None:
                head.stop(self.options.grace_s)
        cell_records.copy_outside_sink(cell, cell_dir)
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
    ) -> tuple[CellOutcome, int]:
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
        watchdog = Watchdog(
            limits=self.options.limits(),
            started_at=started,
            num_steps=cell.get("num_steps"),
            deadline=self.rounds.deadline,
        )
        process.start()
        try:
            self._record_processes(cell_run, process)
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
    ) -> tuple[CellOutcome, int]:
        verdict: CellOutcome | None = None
        exited = False
        while verdict is None:
            time.sleep(self.options.poll_interval_s)
            self._record_processes(cell_run, process)
            exit_code = process.poll()
            try:
                self._follow(follower, watchdog, cell_run, final=False)
                if process.log_error is not None:
                    raise process.log_error
            except Exception as exc:  # an unreadable sink ends the cell with the reader's message
                verdict = self._verdict_for_error(exc)
                break
            if self.stop.signal_name:
                verdict = CellOutcome("interrupted", f"interrupted by {self.stop.signal_name}")
                break
            verdict = watchdog.check(time.monotonic(), exit_code)
            exited = exit_code is not None
        if exited:
            outcome = process.finish(self.options.grace_s)
        else:
            self._stop_ray_job(command, target)
            outcome = process.stop(self.options.grace_s)
            cell_run.exit_code = outcome.exit_code
        sink_error = None
        try:
            if self.write_failure is None:
                self._follow(follower, watchdog, cell_run, final=True)
        except Exception as exc:
            sink_error = exc
            if verdict.state == "complete" or write_error_in(exc):
                verdict = self._verdict_for_error(exc)
        if exited and self.write_failure is None:
            cell_run.exit_code = outcome.exit_code
            verdict = watchdog.check(time.monotonic(), outcome.exit_code) or verdict
        if sink_error is not None and not follower.steps_written and verdict.state == "failed":
            unreadable = f"metric sink unreadable: {sink_error}"
            if unreadable not in (verdict.reason or ""):  # why no step was read, not only that none was
                verdict = CellOutcome("failed", f"{verdict.reason}; {unreadable}" if verdict.reason else unreadable)
        cell_run.survivors = [ProcessRecord(pid=pid, start_time=start) for pid, start in outcome.survivors]
        if outcome.survivors:
            pids = [pid for pid, _ in outcome.survivors]
            self.manifest.warnings.append(f"{cell_run.id} rep {cell_run.repeat}: pids {pids} survived SIGKILL")
        return verdict, follower.steps_written

    def _verdict_for_error(self, exc: Exception) -> CellOutcome:
        write_error = write_error_in(exc)
        if write_error is None:
            return CellOutcome("failed", f"metric sink unreadable: {exc}")
        self.write_failure = self.write_failure or describe_write_error(write_error)
        self.reserve.release()
        return CellOutcome("failed", self.write_failure)

    def _record_processes(self, cell_run: CellRun, process: ManagedProcess) -> None:
        """Keep the cell's process record in the manifest current (saved only when a process appeared)."""
        process.track()
        record = process.describe()
        if cell_run.processes is None or record.members != cell_run.processes.members:
            cell_run.processes = record
            self.manifest.save()

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

    def _record_ray(
        self, cell_run: CellRun, head: PrivateRayHead | None, command: CellCommand, target: RayTarget | None
    ) -> None:
        """The head's processes and the job's id in the manifest before the job is submitted: a --resume after a
        killed harness stops them (the head's processes and the job outlive the harness)."""
        record = RayRecord(head=head.process.describe() if head is not None else None)
        record.temp_dir = str(head.temp_dir) if head is not None else None
        if command.submission_id is not None and target is not None:
            record.submission_id, record.dashboard_url = command.submission_id, target.dashboard_url
            record.ray_argv = list(command.argv[: command.argv.index("job")])
        if record.head is not None or record.submission_id is not None:
            cell_run.ray = record
            self.manifest.save()

    def _stop_ray_job(self, command: CellCommand, target: RayTarget | None) -> None:
        """A Ray job outlives the client that submitted it: stop it by its submission id (before any private head);
        what Ray answers when that fails is kept in the manifest's warnings."""
        if command.submission_id is None or target is None:
            return
        problem = stop_ray_job(
            command.argv[: command.argv.index("job")],
            target.dashboard_url,
            command.submission_id,
            timeout_s=max(self.options.grace_s, 10.0),
            env=command.process_env,
        )
        if problem is not None:
            self.progress.message(problem)
            self.manifest.warnings.append(problem)

    def _finish(self, cell_run: CellRun, verdict: CellOutcome, *, steps: int) -> str:
        cell_run.steps_completed = steps
        cell_run.processes = None  # stopped; what could not be stopped is in cell_run.survivors
        cell_run.ray = None
        self.manifest.set_state(cell_run, verdict.state, reason=verdict.reason)  # type: ignore[arg-type]
        self.progress.cell_ended(verdict.state, verdict.reason)
        return verdict.state

    def _archive_previous_attempt(self, cell: dict[str, Any], cell_run: CellRun, cell_dir: Path) -> None:
        """Move the earlier attempt aside (its folder, and a sink the plan put outside it) before the new one."""
        outside_sink = Path(substitute_cell_dir(cell["sink"]["path"], cell_dir))
        if cell_dir.resolve() in outside_sink.resolve().parents or not outside_sink.exists():
            outside_sink = None
        if not cell_dir.exists() and outside_sink is None:
            return
        attempt = len(cell_run.previous_attempts) + 1
        while (kept := cell_dir.with_name(f"{cell_dir.name}.attempt-{attempt}")).exists():
            attempt += 1
        if cell_dir.exists():
            cell_dir.rename(kept)
        if outside_sink is not None:
            (kept / "sink-outside").mkdir(parents=True, exist_ok=True)
            shutil.move(str(outside_sink), str(kept / "sink-outside" / outside_sink.name))
        cell_run.previous_attempts.append(str(kept.relative_to(self.run_dir)))
