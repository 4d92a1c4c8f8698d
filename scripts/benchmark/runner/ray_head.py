"""The Ray cluster a cell runs on: a private head started by the harness, or an existing cluster it joins.

- `RayTarget`: where a cell's Ray clients connect: `gcs_address` ("host:port", what `ray.init` takes; VERL) and
  `dashboard_url` ("http://host:port", what `ray job` takes; Miles).
- `start_private_head(ray_argv0, ...)` runs `ray start --head --block` with its own temp dir and free ports in its own
  process group (via `ManagedProcess`), waits until the GCS and dashboard ports and the dashboard agent's HTTP port
  accept connections (the job server hands a submitted job to that agent: with the first two alone, `ray job
  submit` now and then failed with "No available agent to submit job"), and returns a
  `PrivateRayHead`; `PrivateRayHead.stop(grace_s)` sends SIGTERM to the `ray start` process alone first, so that it
  shuts its node down in order (it stops its own GCS, raylet and dashboard within a few seconds), then stops whatever
  is left of that group, then removes the head's temp dir (its Ray session folder) once none of its processes is
  left. (SIGTERM to the whole group at once kills the GCS under `ray start`, whose shutdown then waits ~30 s for a
  drain RPC that can no longer be answered.)
- `remove_session_folder(temp_dir)`: a private head's temp dir removed, and only one the harness made (`bench-ray-*`).
- BENCH_RAY_START_ARGS (in the runner's environment): extra `ray start` options for every Ray node the harness starts,
  e.g. "--num-cpus=2 --object-store-memory=200000000" on a small machine; the private head and the --emit-sbatch
  script's head and workers take them.
- `external_target(address, dashboard_url)` joins an existing cluster (RAY_ADDRESS, e.g. under Slurm).
- `stop_ray_job(...)`: `ray job stop` of one job; what Ray answered when it failed (kept in the manifest's warnings).

Caveats:
- Ray's unix socket paths must stay under ~107 characters, so the temp dir is a short folder under the system temp
  dir, not inside the run folder; its path is recorded in the cell's ray.json.
- On an external cluster the harness stops a Miles job with `ray job stop` (it adds a known --submission-id); it
  never stops the cluster itself.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts.benchmark.common.redaction import Redactor
from scripts.benchmark.runner.process import ManagedProcess, StopOutcome, is_alive, run_capturing

_READY_TIMEOUT_S = 180.0
START_ARGS_ENV = "BENCH_RAY_START_ARGS"
TEMP_PREFIX = "bench-ray-"
_MIN_GROUP_GRACE_S = 5.0


@dataclass(frozen=True)
class RayTarget:
    gcs_address: str
    dashboard_url: str
    private: bool


def external_target(address: str, dashboard_url: str | None) -> RayTarget:
    """RAY_ADDRESS may be "host:port" (GCS) or an http dashboard URL; the other half defaults to Ray's port 8265."""
    if address.startswith(("http://", "https://")):
        host = address.split("://", 1)[1].rsplit(":", 1)[0]
        return RayTarget(gcs_address=f"{host}:6379", dashboard_url=dashboard_url or address, private=False)
    host = address.rsplit(":", 1)[0]
    return RayTarget(gcs_address=address, dashboard_url=dashboard_url or f"http://{host}:8265", private=False)


def find_free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class PrivateRayHead:
    process: ManagedProcess
    target: RayTarget
    temp_dir: Path
    argv: list[str]

    def stop(self, grace_s: float) -> StopOutcome:
        """SIGTERM to `ray start` alone (an orderly node shutdown), then the group's usual stop for what is left."""
        self.process.track()
        leader = self.process.pid
        deadline = time.monotonic() + grace_s
        if self.process.poll() is None and is_alive(leader, self.process.tracked.get(leader)):
            try:
                os.kill(leader, signal.SIGTERM)
            except ProcessLookupError:
                pass
            while self.process.poll() is None and time.monotonic() < deadline:
                self.process.track()
                time.sleep(0.1)
        outcome = self.process.stop(max(deadline - time.monotonic(), _MIN_GROUP_GRACE_S))
        if not outcome.survivors:  # a survivor may still write there: its folder stays, as its pids are recorded
            remove_session_folder(self.temp_dir)
        return outcome

    def describe(self) -> dict:
        return {
            "private": True,
            "gcs_address": self.target.gcs_address,
            "dashboard_url": self.target.dashboard_url,
            "temp_dir": str(self.temp_dir),
            "argv": self.argv,
            "pid": self.process.pid,
        }


def remove_session_folder(temp_dir: Path | str | None) -> None:
    """A private head's temp dir (Ray's session folder: sockets, logs, spilled objects) once its head is gone; only a
    folder the harness made (`bench-ray-*`), never a path from elsewhere."""
    if temp_dir is not None and Path(temp_dir).name.startswith(TEMP_PREFIX) and Path(temp_dir).is_dir():
        shutil.rmtree(temp_dir, ignore_errors=True)


AUTH_MODE_ENV = "RAY_AUTH_MODE"


def ray_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of every Ray command the harness runs (head, `ray job` submission and stop, the cells).

    Ray enables token authentication on a head it starts when RAY_AUTH_MODE is unset and a token exists
    (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token), but its clients read that token only in token mode:
    the head and its clients must be told the same mode, so the token mode is made explicit there."""
    resolved = dict(env)
    if resolved.get(AUTH_MODE_ENV):
        return resolved
    home = resolved.get("HOME") or str(Path.home())
    token_file = Path(resolved.get("RAY_AUTH_TOKEN_PATH") or Path(home) / ".ray" / "auth_token")
    has_token_file = token_file.is_file() and token_file.stat().st_size > 0
    if resolved.get("RAY_AUTH_TOKEN") or has_token_file:
        resolved[AUTH_MODE_ENV] = "token"
    return resolved


def extra_start_args(env: Mapping[str, str]) -> list[str]:
    """The words of BENCH_RAY_START_ARGS; ValueError naming the variable when it does not parse."""
    try:
        return shlex.split(env.get(START_ARGS_ENV, ""))
    except ValueError as exc:
        raise ValueError(f"{START_ARGS_ENV} is not a valid shell word list: {exc}") from exc


def build_head_argv(
    ray_argv0: Sequence[str],
    *,
    ports: Sequence[int],
    temp_dir: Path,
    num_gpus: int,
    extra: Sequence[str] = (),
) -> list[str]:
    gcs, dashboard, client, agent_grpc, agent_http, metrics = ports
    return [
        *ray_argv0,
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        f"--port={gcs}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
        f"--ray-client-server-port={client}",
        f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--dashboard-agent-listen-port={agent_http}",
        f"--metrics-export-port={metrics}",
        f"--temp-dir={temp_dir}",
        f"--num-gpus={num_gpus}",
        "--disable-usage-stats",
        *extra,
    ]


def start_private_head(
    ray_argv0: Sequence[str],
    *,
    num_gpus: int,
    env: Mapping[str, str],
    log_path: Path,
    redactor: Redactor,
    ready_timeout_s: float = _READY_TIMEOUT_S,
    should_stop: Callable[[], bool] = lambda: False,
) -> PrivateRayHead:
    """Start `ray start --head --block` in its own group and wait for its ports; raise RuntimeError if it dies."""
    try:
        extra = extra_start_args(env)
    except ValueError as exc:
        raise RuntimeError(str(exc)) from exc
    ports = find_free_ports(6)
    temp_dir = Path(tempfile.mkdtemp(prefix=TEMP_PREFIX))
    argv = build_head_argv(ray_argv0, ports=ports, temp_dir=temp_dir, num_gpus=num_gpus, extra=extra)
    process = ManagedProcess(argv=argv, env=env, cwd=temp_dir, log_path=log_path, redactor=redactor)
    process.start()
    target = RayTarget(gcs_address=f"127.0.0.1:{ports[0]}", dashboard_url=f"http://127.0.0.1:{ports[1]}", private=True)
    head = PrivateRayHead(process=process, target=target, temp_dir=temp_dir, argv=argv)
    deadline = time.monotonic() + ready_timeout_s
    needed = [ports[0], ports[1], ports[4]]  # GCS, dashboard (job server), dashboard agent (runs the jobs)
    while not all(_port_open(port) for port in needed):
        process.track()
        if process.poll() is not None:
            head.stop(grace_s=1.0)
            raise RuntimeError(
                f"the private Ray head exited with code {process.poll()} before it was ready; see {log_path}"
            )
        if should_stop():
            head.stop(grace_s=10.0)
            raise RuntimeError("interrupted while the private Ray head was starting")
        if time.monotonic() > deadline:
            head.stop(grace_s=10.0)
            raise RuntimeError(f"the private Ray head did not open ports {needed} within {ready_timeout_s:.0f} s")
        time.sleep(0.2)
    return head


def stop_ray_job(
    ray_argv0: Sequence[str], dashboard_url: str, submission_id: str, *, timeout_s: float, env: Mapping[str, str]
) -> str | None:
    """`ray job stop` of one job (waits until it stopped); None when it did, else one line with Ray's own answer."""
    code, output = run_capturing(
        [*ray_argv0, "job", "stop", f"--address={dashboard_url}", submission_id], timeout_s=timeout_s, env=env
    )
    if code == 0:
        return None
    tail = " | ".join(line.strip() for line in output.strip().splitlines()[-3:] if line.strip())
    return f"ray job stop {submission_id} at {dashboard_url}: exit {code}: {tail or 'no output'}"
