"""--emit-sbatch: a Slurm batch script that starts Ray across the allocation and runs the same run.py command.

- `build_sbatch(plan, run_argv, ...)`: #SBATCH lines sized from the plan (nodes = the largest cell's gpus.nodes,
  GPUs per node = the largest gpus.per_node), a Ray head on the first node and one Ray worker per other node (each an
  `srun --overlap` step in the background), a wait until every node joined, then `run.py <run_argv>` with
  `--ray external --ray-address <head>:6379`, and finally a stop of exactly the srun steps it started (by pid).
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
    gres = f" --gres=gpu:{per_node}" if per_node else ""
    return f"""#!/usr/bin/env bash
#SBATCH --job-name={job_name}
#SBATCH --nodes={num_nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
{f"#SBATCH --gpus-per-node={per_node}" if per_node else "# (the plan names no GPUs per node)"}
#SBATCH --time={time_limit}
# Written by run.py execute --emit-sbatch: Ray across the allocation, then the same benchmark command.
set -euo pipefail
cd {shlex.quote(str(workdir))}
RAY=${{BENCH_RAY:-ray}}
RAY_PORT=${{BENCH_RAY_PORT:-6379}}
DASHBOARD_PORT=${{BENCH_RAY_DASHBOARD_PORT:-8265}}
# Extra `ray start` options for every node, split with shell quoting rules (as the private head's are).
mapfile -t start_args < <({shlex.quote(python)} -c 'import os, shlex
for word in shlex.split(os.environ.get("BENCH_RAY_START_ARGS", "")): print(word)')
mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
head_node=${{nodes[0]}}
head_ip=$(srun --overlap --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address | awk '{{print $1}}')
step_pids=()
stop_ray() {{
    # Only the srun steps this script started, by pid; srun forwards the signal to its Ray processes.
    for pid in "${{step_pids[@]}}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait || true
}}
trap stop_ray EXIT
srun --overlap --nodes=1 --ntasks=1{gres} -w "$head_node" $RAY start --head --block --disable-usage-stats \\
    --node-ip-address="$head_ip" --port="$RAY_PORT" --dashboard-host=0.0.0.0 --dashboard-port="$DASHBOARD_PORT" \\
    --num-gpus={per_node} "${{start_args[@]}}" &
step_pids+=($!)
port_open() {{ (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }}
# The head is up when its GCS and its job server (the dashboard port) accept connections.
for _ in $(seq 300); do
    port_open "$head_ip" "$RAY_PORT" && port_open "$head_ip" "$DASHBOARD_PORT" && break
    sleep 1
done
for node in "${{nodes[@]:1}}"; do
    srun --overlap --nodes=1 --ntasks=1{gres} -w "$node" $RAY start --block --disable-usage-stats \\
        --address="$head_ip:$RAY_PORT" --num-gpus={per_node} "${{start_args[@]}}" &
    step_pids+=($!)
done
while [ "${{#nodes[@]}}" -gt 1 ]; do  # ...and every worker node has joined (at most 10 minutes)
    joined=$($RAY status --address="$head_ip:$RAY_PORT" 2>/dev/null | grep -c "node_" || true)
    [ "$joined" -ge "${{#nodes[@]}}" ] || [ "$SECONDS" -gt 600 ] && break
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
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(0o755)
