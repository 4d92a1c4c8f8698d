"""TEST STAND-IN, not a framework: writes a real sink format step by step so the runner can be tested without a GPU.

- `--format verl-file-logger --sink FILE`: one VERL FileLogger line per step, `{"step": N, "data": {...}}` (timing_s/*,
  perf/*, response_length/*, prompt_length/*), plus the step-0 validation line VERL writes before training.
- `--format miles-stdout --sink LOG`: what the harness reads from Miles: the same calls printed to stdout as Miles's
  loggers print them (`[<time> <process>] <file>:<line> - perf N: {...}`), the train rank's `Timer train end` line
  before its perf line; the runner writes stdout to LOG (the cell's log.txt), so the stand-in never opens it.
- `--format miles-event-log --sink DIR`: Miles's --save-debug-event-data layout, one JSONL file per process
  (rollout_manager.jsonl, actor_cell0_rank0.jsonl); per rollout the RolloutManager logs its rollout perf, then the
  train rank its rollout data, train/step series and timers, each a
  `{"timestamp", "source", "type": "metric", "metrics": {...}}` line.
- `--format miles-tracking --sink DIR`: the same calls through the benchmark tracking backend's own class
  (miles/utils/bench_tracking.py), one file per process instance; a restart opens new files.
- Faults on demand: `--crash-after K` (exit 1 after K steps), `--stall-after K` (stay alive, no more steps),
  `--ignore-sigterm`, `--spawn-children N` (children that ignore SIGTERM; one more escapes with setsid + double fork),
  `--fork-workers` (a supervisor that ignores SIGTERM and forks a new worker every few milliseconds, some escaping
  with setsid, for as long as it lives), `--restart-after K --restart-from J` (after step K the trainer "restarts"
  and runs steps J.. again with other values: VERL's FileLogger truncates its file, Miles's event logger appends);
  every process it creates goes to `--pid-file` as "pid start_time". `--print-env` prints the environment (secret
  redaction test); STANDIN_LOG_BYTES in the environment adds that many bytes of output per step (full-disk test),
  STANDIN_STEP_S overrides --step-s (a slow first attempt, a fast rerun).
  `--sigterm-file FILE`: on SIGTERM, append "SIGTERM <pid> <unix time>" to FILE and exit 143 (who stopped it, when).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path


def _ignore_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _write_on_sigterm(path: Path) -> None:
    def handler(_signum: int, _frame: object) -> None:
        with open(path, "a") as f:
            f.write(f"SIGTERM {os.getpid()} {time.time()}\n")
        sys.exit(143)

    signal.signal(signal.SIGTERM, handler)


def _start_time(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def _record_pid(pid_file: Path | None, pid: int) -> None:
    if pid_file is not None:
        with open(pid_file, "a") as f:
            f.write(f"{pid} {_start_time(pid)}\n")


def _fork_workers(pid_file: Path | None, limit: int = 400) -> None:
    """A supervisor process that keeps forking workers (every 5 ms, every other one in its own session)."""
    if os.fork() != 0:
        return
    _ignore_sigterm()
    _record_pid(pid_file, os.getpid())
    for index in range(limit):
        worker = os.fork()
        if worker == 0:
            if index % 2:
                os.setsid()
            _ignore_sigterm()
            _sleep_forever()
        _record_pid(pid_file, worker)
        time.sleep(0.005)
    _sleep_forever()


def _sleep_forever() -> None:
    while True:
        time.sleep(1)


def _spawn_children(count: int, pid_file: Path | None) -> None:
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            _ignore_sigterm()
            _sleep_forever()
        _record_pid(pid_file, pid)
    # An escaped grandchild: fork, setsid (new session and group), fork again, the middle process exits at once.
    read_fd, write_fd = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        grandchild = os.fork()
        if grandchild == 0:
            _ignore_sigterm()
            os.close(read_fd)
            os.write(write_fd, f"{os.getpid()}\n".encode())
            os.close(write_fd)
            _sleep_forever()
        os._exit(0)
    os.close(write_fd)
    escaped = int(os.read(read_fd, 64).decode().strip())
    os.close(read_fd)
    os.waitpid(middle, 0)
    _record_pid(pid_file, escaped)


def _say(text: str) -> None:
    """A line of output; when the reader of stdout is gone (a SIGKILLed harness) training goes on, as a real
    trainer's does when its log pipe closes."""
    try:
        print(text, flush=True)
    except (BrokenPipeError, OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def _write_line(path: Path, obj: dict) -> None:
    with open(path, "ab", buffering=0) as f:
        f.write((json.dumps(obj) + "\n").encode())


LEARNING_KEYS = {
    "verl-file-logger": {
        "policy_loss": "actor/pg_loss",
        "grad_norm": "actor/grad_norm",
        "approx_kl": "actor/ppo_kl",
        "clip_fraction": "actor/pg_clipfrac",
    },
    "miles": {
        "policy_loss": "train/pg_loss",
        "grad_norm": "train/grad_norm",
        "approx_kl": "train/ppo_kl",
        "clip_fraction": "train/pg_clipfrac",
    },
}
"""--learning: each learning signal under the native key the format's reader takes it from."""


def _native_learning(fmt: str, learning: dict[str, float]) -> dict[str, float]:
    keys = LEARNING_KEYS["verl-file-logger" if fmt == "verl-file-logger" else "miles"]
    return {keys[name]: value for name, value in learning.items()}


def _verl_step(step: int, step_s: float, rng: random.Random) -> dict:
    gen = step_s * 0.6
    response_mean = rng.uniform(200, 400)
    tokens = int(64 * (response_mean + 120))
    return {
        "step": step,
        "data": {
            "timing_s/step": step_s,
            "timing_s/gen": gen,
            "timing_s/old_log_prob": step_s * 0.1,
            "timing_s/adv": 0.001,
            "timing_s/update_actor": step_s * 0.25,
            "timing_s/update_weights": step_s * 0.04,
            "perf/total_num_tokens": tokens,
            "perf/time_per_step": step_s,
            "perf/throughput": tokens / step_s / 8,
            "perf/mfu/actor": 0.21,
            "perf/max_memory_allocated_gb": 30.5,
            "response_length/mean": response_mean,
            "response_length/max": 512.0,
            "prompt_length/mean": 120.0,
            "training/global_step": step,
            "training/epoch": 0,
        },
    }


ROLLOUT_MANAGER = {"component": "rollout_manager"}
TRAIN_RANK = {"component": "actor", "cell_index": 0, "rank_within_cell": 0}


def _replayed(calls: list[tuple[dict, dict]]) -> list[tuple[dict, dict]]:
    """A replay's calls (--load-debug-rollout-data): Miles's rollout manager returns from log_rollout_data before
    logging (miles/ray/rollout/metrics.py), and the actor's update_weights returns at once (debug_train_only)."""
    return [
        (identity, {**metrics, "perf/update_weights_time": 0.0} if "perf/update_weights_time" in metrics else metrics)
        for identity, metrics in calls
        if identity is not ROLLOUT_MANAGER
    ]


def _miles_rollout_calls(rollout_id: int, step_s: float, rng: random.Random) -> list[tuple[dict, dict]]:
    """The tracking.log calls of one rollout, in a colocated run's order: RolloutManager perf, then the train rank's
    rollout data, train/step series and timers (the timers carry the previous rollout's weight update)."""
    rollout_time = step_s * 0.6
    response_mean = rng.uniform(200, 400)
    samples, prompt_mean = 64, 120.0
    update_weights = 0.04 * step_s
    train_wait = rollout_time + update_weights + 0.01
    train_block = step_s * 0.35
    return [
        (
            ROLLOUT_MANAGER,
            {
                "rollout/step": rollout_id,
                "perf/rollout_time": rollout_time,
                "perf/tokens_per_gpu_per_sec": samples * response_mean / rollout_time / 8,
                "rollout/response_len/mean": response_mean,
            },
        ),
        (
            TRAIN_RANK,
            {
                "rollout/step": rollout_id,
                "rollout/response_lengths": response_mean,
                "rollout/total_lengths": prompt_mean + response_mean,
            },
        ),
        (TRAIN_RANK, {"train/step": rollout_id, "train/loss": 0.0125, "train/grad_norm": 0.91}),
        (
            TRAIN_RANK,
            {
                "rollout/step": rollout_id,
                "perf/train_wait_time": train_wait,
                "perf/train_time": train_block,
                "perf/actor_train_time": step_s * 0.25,
                "perf/log_probs_time": step_s * 0.08,
                "perf/update_weights_time": update_weights,
                "perf/step_time": train_wait + train_block,
                "perf/wait_time_ratio": train_wait / (train_wait + train_block),
                "perf/actor_train_tok_per_s": samples * (prompt_mean + response_mean) / (step_s * 0.25),
                "perf/actor_train_tflops": 150.0,
            },
        ),
    ]


def _event(identity: dict, metrics: dict) -> dict:
    """A Miles MetricEvent line (one per tracking.log call)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1e6) % 1000000:06d}Z"
    return {"timestamp": stamp, "source": identity, "type": "metric", "rollout_id": None, "attempt": None,
            "metrics": metrics}  # fmt: skip


def _print_miles_line(identity: dict, metrics: dict) -> None:
    """One Miles logger line: `perf N:` for timers, `rollout N:` for the train rank's data (train/step is skipped)."""
    if "rollout/step" not in metrics:
        return
    process = "rollout_manager" if identity["component"] == "rollout_manager" else "actor_cell0_rank0"
    now = time.time()
    prefix = f"[{time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(now))}.{int(now * 1000) % 1000:03d} {process}]"
    body = {k: v for k, v in metrics.items() if k != "rollout/step"}
    kind = "perf" if any(k.startswith("perf/") for k in body) else "rollout"
    if kind == "perf" and "perf/train_time" in body:
        print(f"{prefix} timer.py:42 - Timer train end (elapsed: {body['perf/train_time']:.1f}s)", flush=True)
    print(f"{prefix} metrics.py:89 - {kind} {metrics['rollout/step']}: {body!r}", flush=True)


FORMATS = ("verl-file-logger", "miles-stdout", "miles-event-log", "miles-tracking")


def _tracking_backends(folder: Path) -> dict[str, object]:
    """One tracking backend per Miles process of the run, as Miles's init_tracking opens them."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from miles.utils.bench_tracking import BENCH_TRACKING_DIR_ENV, BenchTrackingBackend

    os.environ[BENCH_TRACKING_DIR_ENV] = str(folder)
    backends = {"rollout_manager": BenchTrackingBackend(), "actor": BenchTrackingBackend()}
    backends["rollout_manager"].init(None, primary=False, router_addr="http://127.0.0.1:0")
    backends["actor"].init(None, primary=False)
    return backends


def _log_tracking(backends: dict[str, object], identity: dict, metrics: dict) -> None:
    step_key = "rollout/step" if "rollout/step" in metrics else "train/step"
    backends[identity["component"]].log(metrics, step_key=step_key)


def _process_file(identity: dict) -> str:
    if identity["component"] == "rollout_manager":
        return "rollout_manager.jsonl"
    return f"{identity['component']}_cell{identity['cell_index']}_rank{identity['rank_within_cell']}.jsonl"


def _hold(path: Path) -> None:
    """Wait while the test holds the file: a cell that is still running whenever the test acts, however slow the
    machine (an event, not a time window)."""
    _say(f"standin holds while {path} exists")
    while path.exists():
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--format", required=True, choices=[*FORMATS])
    parser.add_argument("--sink", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--step-s", type=float, default=0.15)
    parser.add_argument("--startup-s", type=float, default=0.1)
    parser.add_argument("--crash-after", type=int, default=None)
    parser.add_argument("--stall-after", type=int, default=None)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--spawn-children", type=int, default=0)
    parser.add_argument("--pid-file", type=Path, default=None)
    parser.add_argument("--print-env", action="store_true")
    parser.add_argument("--sigterm-file", type=Path, default=None)
    parser.add_argument("--fork-workers", action="store_true")
    parser.add_argument("--restart-after", type=int, default=None)
    parser.add_argument("--restart-from", type=int, default=None)
    parser.add_argument("--hold-after", type=int, default=None, help="after this step, wait while --hold-file exists")
    parser.add_argument("--hold-file", type=Path, default=None)
    parser.add_argument("--learning", type=json.loads, default={}, help="signal -> value logged at every step")
    parser.add_argument("--replay", action="store_true", help="a train-only cell: log what a replay logs")
    args = parser.parse_args()
    learning = _native_learning(args.format, args.learning)

    _record_pid(args.pid_file, os.getpid())
    if args.sigterm_file is not None:
        _write_on_sigterm(args.sigterm_file)
    if args.ignore_sigterm:
        _ignore_sigterm()
    if args.spawn_children:
        _spawn_children(args.spawn_children, args.pid_file)
    if args.fork_workers:
        _fork_workers(args.pid_file)
    if args.print_env:
        for name, value in sorted(os.environ.items()):
            print(f"{name}={value}", flush=True)
    print(f"standin start: {args.format} {args.steps} steps", flush=True)
    time.sleep(args.startup_s)
    rng = random.Random(0)
    if args.format == "verl-file-logger":
        args.sink.parent.mkdir(parents=True, exist_ok=True)
        args.sink.write_bytes(b"")  # FileLogger truncates its file at start-up
        _write_line(args.sink, {"step": 0, "data": {"val-core/math/acc/mean@1": 0.1}})
    elif args.format == "miles-event-log":
        args.sink.mkdir(parents=True, exist_ok=True)
    backends = _tracking_backends(args.sink) if args.format == "miles-tracking" else {}
    schedule = [(step, 1.0) for step in range(1, args.steps + 1)]
    if args.restart_after is not None:
        first = [(step, 1.0) for step in range(1, args.restart_after + 1)]
        schedule = first + [(step, 1.5) for step in range(args.restart_from, args.steps + 1)]
    extra_output = "x" * int(os.environ.get("STANDIN_LOG_BYTES", "0"))
    for index, (step, scale) in enumerate(schedule):
        if args.stall_after is not None and step > args.stall_after:
            _say(f"standin stalls after step {args.stall_after}")
            _sleep_forever()
        if index and step <= schedule[index - 1][0]:
            _say(f"standin restarts at step {step}")
            time.sleep(1.0)  # a restart takes a while: the runner sees the last step before it
            if args.format == "verl-file-logger":
                args.sink.write_bytes(b"")  # a restarted FileLogger truncates its file
            if backends:
                backends = _tracking_backends(args.sink)  # a restarted process writes new files
        if extra_output:
            _say(extra_output)
        step_s = float(os.environ.get("STANDIN_STEP_S", args.step_s)) * scale * rng.uniform(0.9, 1.1)
        time.sleep(step_s)
        calls = _miles_rollout_calls(step - 1, step_s, rng)  # Miles counts rollouts from 0
        calls = _replayed(calls) if args.replay else calls
        if args.format == "verl-file-logger":
            record = _verl_step(step, step_s, rng)
            record["data"].update(learning)
            if args.replay:  # VERL's replay loader stamps each trajectory with the current step (rollout_skip.py)
                record["data"].update(
                    {f"training/off_policy/trajectory_staleness_worst/{s}": -1 for s in ("mean", "max")}
                )
            _write_line(args.sink, record)
        elif args.format == "miles-stdout":
            for identity, metrics in calls:
                _print_miles_line(identity, metrics)
        elif backends:
            for identity, metrics in calls:
                _log_tracking(backends, identity, {**metrics, **learning} if "train/step" in metrics else metrics)
        else:
            for identity, metrics in calls:
                _write_line(args.sink / _process_file(identity), _event(identity, metrics))
        _say(f"standin step {step}/{args.steps} {step_s:.3f} s")
        if args.hold_after == step and args.hold_file is not None:
            _hold(args.hold_file)
        if args.crash_after is not None and step >= args.crash_after:
            print("Traceback (most recent call last):\nRuntimeError: standin crash on demand", file=sys.stderr)
            sys.exit(1)
    _say("standin done")


if __name__ == "__main__":
    main()
