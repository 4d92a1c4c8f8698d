"""--emit-sbatch: a Slurm batch script that starts Ray across the allocation and runs the same run.py command.

- `build_sbatch(plan, run_argv, ...)`: #SBATCH lines sized from the plan (nodes = the largest cell's gpus.nodes,
  GPUs per node = the largest gpus.per_node, requested once, for the job: the steps get the job's GPUs), a Ray head
  on the first node (its dashboard bound to the head's own address, not 0.0.0.0: Ray's job API has no
  authentication) and one Ray worker per other node (each an `srun --overlap` step in the background), a wait until
  the head's ports open and every node is in the Active section of `ray status` (exit 1 naming the node as soon as
  a node's step dies, and at the time limits), then `run.py <run_argv>` with `--ray external --ray-address
  <head>:6379`, and finally a clean stop: SIGTERM to each node's `ray start` alone, by the pid its step wrote,
  workers first, then the srun steps it started (by pid) for whatever is left.
- `write_sbatch(path, plan_path=..., run_argv=...)` writes it (mode 755).

- Environment read by the script (sbatch exports the submitter's): BENCH_RAY (the `ray` CLI, default `ray`),
  BENCH_RAY_PORT / BENCH_RAY_DASHBOARD_PORT (default 6379 / 8265), BENCH_RAY_START_ARGS (extra `ray start` options).

Caveats:
- Run on a real single-node Slurm by the tests (slurmctld + slurmd; a cell runs, scancel, resume); several nodes are
  not: the worker join loop is only checked by bash's parser.
- The ray CLI is `${BENCH_RAY:-ray}` on every node; its Python environment must match the frameworks'.
- Secret-looking words of the command line are redacted: pass secrets through the environment (sbatch exports it).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts.benchmark.common.redaction import Redactor

from miles.utils.bench_metrics import write_text_atomic

_RAY_OPTIONS = ("--ray", "--ray-address", "--ray-dashboard-url")
_RUN_PY = Path(__file__).resolve().parents[1] / "run.py"


def _without_ray_options(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in _RAY_OPTIONS:
            skip = True
        elif not any(word.startswith(name + "=") for name in _RAY_OPTIONS):
            out.append(word)
    return out


def build_sbatch(
    plan: dict[str, Any],
    run_argv: Sequence[str],
    *,
    python: str,
    workdir: Path,
    job_name: str = "miles-bench",
    time_limit: str = "24:00:00",
) -> str:
    gpus = [cell.get("gpus") or {} for cell in plan["cells"]]
    num_nodes = max(int(g.get("nodes") or 1) for g in gpus)
    per_node = max(int(g.get("per_node") or 0) for g in gpus)
    redacted = Redactor.from_environ(os.environ).redact_argv(_without_ray_options(run_argv))
    run_cmd = shlex.join([python, str(_RUN_PY), *redacted])
    return _SCRIPT.format(
        job_name=job_name,
        num_nodes=num_nodes,
        gpus_line=f"#SBATCH --gpus-per-node={per_node}" if per_node else "# (the plan names no GPUs per node)",
        time_limit=time_limit,
        workdir=shlex.quote(str(workdir)),
        python=shlex.quote(python),
        per_node=per_node,
        run_cmd=run_cmd,
    )


_SCRIPT = """#!/usr/bin/env bash
#SBATCH --job-name={job_name}
#SBATCH --nodes={num_nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
{gpus_line}
#SBATCH --time={time_limit}
# Written by run.py execute --emit-sbatch: Ray across the allocation, then the same benchmark command.
# GPUs are requested once, for the job; every step gets the job's GPUs of its node (Slurm's default).
set -euo pipefail
cd {workdir}
RAY=${{BENCH_RAY:-ray}}
RAY_PORT=${{BENCH_RAY_PORT:-6379}}
DASHBOARD_PORT=${{BENCH_RAY_DASHBOARD_PORT:-8265}}
# Extra `ray start` options for every node, split with shell quoting rules (as the private head's are).
mapfile -t start_args < <({python} -c 'import os, shlex
for word in shlex.split(os.environ.get("BENCH_RAY_START_ARGS", "")): print(word)')
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_node=${{nodes[0]}}
head_ip=$(srun --overlap --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{{print $1}}')
pid_dir=$(mktemp -d "${{TMPDIR:-/tmp}}/bench-sbatch.XXXXXX")
step_pids=()
step_names=()
stop_ray() {{
    # Workers first, then the head: SIGTERM to each node's `ray start` alone (its pid, written by its step), so it
    # shuts its node down in order; then the srun steps this script started, by pid, for whatever is left.
    local index
    for ((index = ${{#step_pids[@]}} - 1; index >= 0; index--)); do
        kill -0 "${{step_pids[index]}}" 2>/dev/null || continue  # its step ended: that pid may be another's now
        srun --overlap --nodes=1 --ntasks=1 -w "${{step_names[index]}}" \\
            bash -c 'test -s "$1" && kill -TERM "$(cat "$1")"; rm -f "$1"' _ "$pid_dir/$index.pid" 2>/dev/null \\
            || true
        for _ in $(seq 60); do kill -0 "${{step_pids[index]}}" 2>/dev/null || break; sleep 1; done
    done
    for pid in "${{step_pids[@]}}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait || true
    rm -rf "$pid_dir"
}}
trap stop_ray EXIT
start_node() {{  # start_node NODE RAY-START-OPTIONS...: one srun step running `ray start --block` on NODE
    local node=$1 index=${{#step_pids[@]}}
    shift
    srun --overlap --nodes=1 --ntasks=1 -w "$node" \\
        bash -c 'mkdir -p "${{0%/*}}"; echo $$ >"$0"; exec "$@"' "$pid_dir/$index.pid" \\
        $RAY start --block --disable-usage-stats "$@" --num-gpus={per_node} "${{start_args[@]}}" &
    step_pids+=($!)
    step_names+=("$node")
}}
step_alive() {{  # every step started so far still runs; else say which node's Ray died
    local index
    for index in "${{!step_pids[@]}}"; do
        kill -0 "${{step_pids[index]}}" 2>/dev/null && continue
        echo "error: the Ray node on ${{step_names[index]}} exited; see this job's output above" >&2
        return 1
    done
}}
# Ray turns token authentication on for a head it starts when a token exists and RAY_AUTH_MODE is unset, but its
# clients (ray status, the ray job submission and stop, the cells) read the token only in token mode: one mode for all of them.
if [ -z "${{RAY_AUTH_MODE:-}}" ] && {{ [ -n "${{RAY_AUTH_TOKEN:-}}" ] \\
    || [ -s "${{RAY_AUTH_TOKEN_PATH:-$HOME/.ray/auth_token}}" ]; }}; then
    export RAY_AUTH_MODE=token
fi
start_node "$head_node" --head --node-ip-address="$head_ip" --port="$RAY_PORT" \\
    --dashboard-host="$head_ip" --dashboard-port="$DASHBOARD_PORT"
port_open() {{ (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }}
# The head is up when its GCS and its job server (the dashboard port) accept connections.
ready=0
for _ in $(seq 300); do
    step_alive || exit 1
    port_open "$head_ip" "$RAY_PORT" && port_open "$head_ip" "$DASHBOARD_PORT" && ready=1 && break
    sleep 1
done
[ "$ready" = 1 ] || {{ echo "error: the Ray head on $head_node did not open its ports within 300 s" >&2; exit 1; }}
for node in "${{nodes[@]:1}}"; do
    start_node "$node" --address="$head_ip:$RAY_PORT"
done
alive_nodes() {{  # the nodes of `ray status`'s Active section (its Resources section may name node_* resources)
    $RAY status --address="$head_ip:$RAY_PORT" 2>/dev/null \\
        | awk '/^Active:/ {{ active = 1; next }} /^[A-Za-z]/ {{ active = 0 }} active && $2 ~ /^node_/ {{ n += $1 }}
               END {{ print n + 0 }}'
}}
joined=0
while [ "${{#nodes[@]}}" -gt 1 ]; do  # ...and every worker node has joined (at most 10 minutes)
    step_alive || exit 1
    joined=$(alive_nodes)
    [ "$joined" -ge "${{#nodes[@]}}" ] && break
    if [ "$SECONDS" -gt 600 ]; then
        echo "error: $joined of ${{#nodes[@]}} Ray nodes joined within 600 s" >&2
        exit 1
    fi
    sleep 5
done
export RAY_ADDRESS="$head_ip:$RAY_PORT"
status=0
{run_cmd} --ray external --ray-address "$RAY_ADDRESS" \\
    --ray-dashboard-url "http://$head_ip:$DASHBOARD_PORT" || status=$?
exit "$status"
"""


def write_sbatch(path: Path, *, plan_path: Path, run_argv: Sequence[str]) -> None:
    try:
        plan = json.loads(plan_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--emit-sbatch needs a readable plan at {plan_path}: {exc}") from exc
    text = build_sbatch(plan, run_argv, python=sys.executable, workdir=Path.cwd())
    write_text_atomic(path, text)  # a full disk leaves no torn script to submit
    path.chmod(0o755)
