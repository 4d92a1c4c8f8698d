# doc-dev: docs/benchmark.md
"""The Ray cluster a cell runs on: a private head started by the harness, or an existing cluster it joins.

- `RayTarget`: where a cell's Ray clients connect: `gcs_address` ("host:port", what `ray.init` takes; VERL) and
  `dashboard_url` ("http://host:port", what `ray job submit` takes; Miles).
- `start_private_head(ray_argv0, ...)` runs `ray start --head --block` with its own temp dir and free ports in its own
  process group (via `ManagedProcess`), waits until the GCS and dashboard ports accept connections, and returns a
  `PrivateRayHead`; `PrivateRayHead.stop(grace_s)` stops exactly that group (`--block` keeps `ray start` in the
  foreground, so the group holds the whole head).
- `external_target(address, dashboard_url)` joins an existing cluster (RAY_ADDRESS, e.g. under Slurm).

Caveats:
- Ray's unix socket paths must stay under ~107 characters, so the temp dir is a short folder under the system temp
  dir, not inside the run folder; its path is recorded in the cell's ray.json.
- On an external cluster the harness stops a Miles job with `ray job stop` (it adds a known --submission-id); it
  never stops the cluster itself.
"""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts.benchmark.runner.process import ManagedProcess, StopOutcome
from scripts.benchmark.runner.redaction import Redactor

_READY_TIMEOUT_S = 180.0


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
        return self.process.stop(grace_s)

    def describe(self) -> dict:
        return {
            "private": True,
            "gcs_address": self.target.gcs_address,
            "dashboard_url": self.target.dashboard_url,
            "temp_dir": str(self.temp_dir),
            "argv": self.argv,
            "pid": self.process.pid,
        }


def build_head_argv(ray_argv0: Sequence[str], *, ports: Sequence[int], temp_dir: Path, num_gpus: int) -> list[str]:
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
    ports = find_free_ports(6)
    temp_dir = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    argv = build_head_argv(ray_argv0, ports=ports, temp_dir=temp_dir, num_gpus=num_gpus)
    process = ManagedProcess(argv=argv, env=env, cwd=temp_dir, log_path=log_path, redactor=redactor)
    process.start()
    target = RayTarget(gcs_address=f"127.0.0.1:{ports[0]}", dashboard_url=f"http://127.0.0.1:{ports[1]}", private=True)
    head = PrivateRayHead(process=process, target=target, temp_dir=temp_dir, argv=argv)
    deadline = time.monotonic() + ready_timeout_s
    while not (_port_open(ports[0]) and _port_open(ports[1])):
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
            raise RuntimeError(f"the private Ray head did not open ports {ports[:2]} within {ready_timeout_s:.0f} s")
        time.sleep(0.2)
    return head
