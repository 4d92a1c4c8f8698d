"""What a killed harness left running: found from the manifest's per-cell process records, stopped before --resume.

- `find_leftovers(record)`: the live processes of one recorded cell, pid -> start time. A process belongs to it when
  its (pid, start time) was recorded; or it carries the record's token in its environment (BENCH_PROCESS_TOKEN,
  inherited from the cell's command: found even when it escaped before any poll recorded it); or it is in the
  recorded process group or session, started no earlier than the recorded leader, while that leader still runs (a
  record without a token, from an older harness: or while its pid is free); or it descends (by parent pid) from
  one of those. Never by name: a dead leader's pid reused as another session's id is not the cell's. Nothing is
  found on another host or after a reboot (start times do not compare).
- `stop_leftovers(manifest, grace_s)`: for every cell with a process record (a cell the dead harness was running)
  or earlier survivors: first `ray job stop` of the Ray job it recorded (on a private head or an external cluster:
  only the run's own job, never the cluster), then `stop_until_gone` on what `find_leftovers` finds in its own
  record and in its private Ray head's (SIGTERM, grace, SIGKILL, rescans); the record is cleared (and the head's
  Ray session folder removed) when nothing is left, else the survivors are recorded on the cell and in `warnings`.
- `alive_survivors(cell)`: the recorded survivors still running (a cell with any is not rerun: a late writer could
  write into the new attempt's sink).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable

from scripts.benchmark.contracts.manifest import CellProcesses, CellRun, Manifest, ProcessRecord
from scripts.benchmark.runner.process import (
    ProcInfo,
    boot_id,
    carries_token,
    is_alive,
    read_proc_table,
    stop_until_gone,
)
from scripts.benchmark.runner.ray_head import ray_environment, remove_session_folder, stop_ray_job


def _same_boot(record: CellProcesses) -> bool:
    return record.host == socket.gethostname() and (record.boot_id is None or record.boot_id == boot_id())


def find_leftovers(record: CellProcesses, table: dict[int, ProcInfo] | None = None) -> dict[int, int]:
    """Live processes of the recorded cell, pid -> start time (see the module docstring)."""
    if not _same_boot(record):
        return {}
    table = read_proc_table() if table is None else table
    live = {pid: info for pid, info in table.items() if info.state != "Z"}
    found = {
        p.pid: p.start_time
        for p in (record.leader, *record.members)
        if p.pid in live and live[p.pid].start_time == p.start_time
    }
    leader_now = live.get(record.leader.pid)
    leader_alive = leader_now is not None and leader_now.start_time == record.leader.start_time
    for pid, info in live.items():
        if info.start_time < record.leader.start_time:
            continue
        if record.token is not None and carries_token(pid, record.token):
            found[pid] = info.start_time  # escaped before a poll saw it: its inherited token tells
        elif (info.pgid == record.pgid or info.sid == record.sid) and (
            leader_alive or (leader_now is None and record.token is None)
        ):
            found[pid] = info.start_time  # with the leader dead, a group or session of that id may be another's
    grew = True
    while grew:
        children = {
            pid: info.start_time
            for pid, info in live.items()
            if info.ppid in found and pid not in found and info.start_time >= found[info.ppid]
        }
        grew = bool(children)
        found.update(children)
    found.pop(os.getpid(), None)
    return found


def alive_survivors(cell: CellRun) -> list[ProcessRecord]:
    return [p for p in cell.survivors if is_alive(p.pid, p.start_time)]


def _recorded(cell: CellRun) -> list[CellProcesses]:
    """The cell's own processes and its private Ray head's (a head outlives the harness that started it)."""
    head = cell.ray.head if cell.ray is not None else None
    return [record for record in (cell.processes, head) if record is not None]


def _stop_ray_job(cell: CellRun, grace_s: float) -> str | None:
    """`ray job stop` of the job the cell submitted (on an external cluster, only the run's own job is stopped)."""
    ray = cell.ray
    if ray is None or ray.submission_id is None or ray.dashboard_url is None or not ray.ray_argv:
        return None
    return stop_ray_job(
        ray.ray_argv,
        ray.dashboard_url,
        ray.submission_id,
        timeout_s=max(grace_s, 10.0),
        env=ray_environment(os.environ),
    )


def _stop_cell_leftovers(cell: CellRun, grace_s: float) -> dict[int, int]:
    records = _recorded(cell)
    earlier = {p.pid: p.start_time for p in alive_survivors(cell)}

    def scan() -> dict[int, int]:
        found = {pid: start for pid, start in earlier.items() if is_alive(pid, start)}
        for record in records:
            found.update(find_leftovers(record))
        return found

    _, survivors = stop_until_gone(scan, grace_s=grace_s)
    return survivors


def stop_leftovers(manifest: Manifest, grace_s: float, say: Callable[[str], None] = print) -> int:
    """Stop every recorded process of the run that is still alive; returns how many were found."""
    found_total = 0
    for cell in manifest.cells:
        if cell.processes is None and cell.ray is None and not cell.survivors:
            continue
        label = f"{cell.id} rep {cell.repeat}"
        if cell.ray is not None and cell.ray.submission_id is not None:
            say(f"{label}: stopping Ray job {cell.ray.submission_id} left by the previous harness")
            if (problem := _stop_ray_job(cell, grace_s)) is not None:
                say(f"{label}: {problem}")
                manifest.warnings.append(f"{label}: {problem}")
        found = {pid: start for record in _recorded(cell) for pid, start in find_leftovers(record).items()}
        found.update({p.pid: p.start_time for p in alive_survivors(cell)})
        if found:
            found_total += len(found)
            say(f"{label}: stopping {len(found)} process(es) left by the previous harness: pids {sorted(found)}")
        survivors = _stop_cell_leftovers(cell, grace_s) if found else {}
        if not survivors and cell.ray is not None:
            remove_session_folder(cell.ray.temp_dir)
        cell.processes = None
        cell.ray = None
        cell.survivors = [ProcessRecord(pid=p, start_time=t) for p, t in sorted(survivors.items())]
        if survivors:
            manifest.warnings.append(f"{label}: pids {sorted(survivors)} of the previous attempt survived SIGKILL")
    manifest.save()
    return found_total
