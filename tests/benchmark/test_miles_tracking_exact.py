"""Miles's own metric logging read back exactly. Inside a Miles checkout (its CPU-CI environment, where the overlay
test runs the fast tier) Miles's real `init_tracking` / `log` / `finish_tracking` and its real callers log known
values for a few rollouts: the rollout manager's `log_rollout_data` (ray/rollout/metrics.py), the train actor's
`log_rollout_data` and `log_train_step` (training_utils/log_utils.py, on a one-rank gloo group) and its perf line,
`log_perf_data_raw` as the FSDP actor calls it or `log_perf_data` as the Megatron actor does. Each shape is a
train.py run (sync, colocated: offload and wake-up timers; Megatron also copies its weights to CPU after each
training, timed by the patch series' `weight_backup` timer) or a train_async.py one (the next rollout logged while
the current one trains), FSDP or Megatron. The driver, the rollout manager and the train rank each have their own
tracking manager and console name, as each is its own Ray process.

The benchmark backend's files give every field of every step as the known values make it, its raw metrics are
every value Miles logged (seen by a second backend registered beside it), and Miles's console lines of the same
calls, read by the stdout fallback, give the same records. Outside a Miles checkout it skips: there is no Miles
tracking code to drive.
"""

from __future__ import annotations

import io
import json
import logging
from argparse import Namespace
from dataclasses import asdict
from pathlib import Path

import pytest
from scripts.benchmark.frameworks.sinks import build_step_records
from tests.benchmark.test_miles_reader import (
    ARCH,
    CTX,
    INITIAL_SLEEP,
    INITIAL_UPDATE_WEIGHTS,
    MILES_DATEFMT,
    MILES_LOG_FORMAT,
    PROMPT_MEAN,
    Rollout,
)

from miles.utils.bench_flops import batch_train_flops

tracking = pytest.importorskip(
    "miles.utils.tracking_utils.tracking",
    reason="Miles's own tracking code is not importable: this test runs inside a Miles checkout (the overlay test)",
)
torch = pytest.importorskip("torch")
dist = torch.distributed

from miles.backends.training_utils import log_utils, parallel  # noqa: E402
from miles.ray.rollout import metrics as rollout_metrics  # noqa: E402
from miles.utils import timer as miles_timer  # noqa: E402
from miles.utils import train_metric_utils  # noqa: E402
from miles.utils.bench_tracking import BENCH_TRACKING_DIR_ENV  # noqa: E402
from miles.utils.flops_utils import flops_args_from_hf_config, fwd_tflops_per_gpu  # noqa: E402
from miles.utils.ft_utils.process_group_utils import GroupInfo  # noqa: E402
from miles.utils.timer import Timer, timer  # noqa: E402
from miles.utils.tracking_utils.base import TrackingBackend, TrackingManager  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
ROLLOUTS = 4
GROUPS, GROUP_SIZE = 4, 4  # 16 samples a rollout
SAMPLES = GROUPS * GROUP_SIZE
PROMPT = int(PROMPT_MEAN)
SHAPES = [(entry, backend) for entry in ("train.py", "train_async.py") for backend in ("fsdp", "megatron")]
ENTROPY = 0.5
OPTIMIZER_STEPS = (
    {"loss": 0.0125, "pg_loss": 0.0625, "pg_clipfrac": 0.125, "ppo_kl": 0.001953125, "grad_norm": 0.875},
    {"loss": 0.0375, "pg_loss": 0.1875, "pg_clipfrac": 0.25, "ppo_kl": 0.00390625, "grad_norm": 0.625},
)
"""The train rank's optimizer steps of every rollout (log_train_step's loss dict and grad norm)."""
WEIGHT_BACKUP = 1.5
"""Seconds the colocated Megatron actor spends copying its weights to CPU after each training (actor.py, after the
train timer and before its perf line: inside the next rollout's train_wait)."""
LOGGED: list[tuple[str, dict]] = []
"""Every (step_key, metrics) Miles handed its tracking manager, in call order, across the processes of a run."""


class Recorder(TrackingBackend):
    """A second backend in Miles's registry: what Miles logged, independently of the benchmark backend."""

    def init(self, args, *, primary: bool = True, **kwargs) -> None:
        pass

    def log(self, metrics, step=None, *, step_key=None, **kwargs) -> None:
        LOGGED.append((step_key, dict(metrics)))

    def finish(self) -> None:
        pass


def response_length(k: int) -> int:
    return int(Rollout(k).response_mean)


def async_wait(k: int) -> float:
    """train_async.py: how long training k waited for its rollout beyond the weight update before it."""
    return 2.0 + k / 4


def backs_up(entry: str, backend: str) -> bool:
    """The Megatron actor copies its weights to CPU after training under --colocate (train.py's layout)."""
    return entry == "train.py" and backend == "megatron"


def timers(entry: str, backend: str, k: int) -> dict[str, float]:
    """The train rank's Timer for rollout k: train.py books the offload and the weight update after training k-1
    into train_wait (its inverse timer), plus the wake-up and the Megatron weight copy after training k-1;
    train_async.py only the weight update."""
    r, previous = Rollout(k), Rollout(k - 1)
    update_before = INITIAL_UPDATE_WEIGHTS if k == 0 else previous.update_weights
    values = {"log_probs": r.log_probs, "actor_train": r.actor_train}
    values["train"] = r.log_probs + r.actor_train + r.train_overhead
    values["update_weights"] = update_before
    if entry == "train.py":
        sleep_before = INITIAL_SLEEP if k == 0 else previous.sleep
        backup_before = WEIGHT_BACKUP if backs_up(entry, backend) and k > 0 else 0.0
        values |= {"sleep": sleep_before, "wake_up": r.wake_up}
        values["train_wait"] = backup_before + sleep_before + update_before + r.generate + r.rm_overhead + r.wake_up
    else:
        values["train_wait"] = update_before + async_wait(k)
    return values


def truth(entry: str, backend: str, k: int) -> dict[str, float]:
    """What really happened in step k+1, booked as VERL books it (generation through the update after training)."""
    r = Rollout(k)
    if entry == "train.py":
        backup = WEIGHT_BACKUP if backs_up(entry, backend) else 0.0
        return {
            "step_time_s": r.truth_step_time() + backup,
            "rollout_wait": r.generate + r.rm_overhead + r.wake_up,
            "other": r.train_overhead + r.sleep + backup,
        }
    train_block = r.log_probs + r.actor_train + r.train_overhead
    return {
        "step_time_s": async_wait(k) + train_block + r.update_weights,
        "rollout_wait": async_wait(k),
        "other": r.train_overhead,
    }


class Clock:
    """The wall clock Miles's Timer reads (`time()` in miles/utils/timer.py): it moves only when the test says."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def timed(name: str, seconds: float, clock: Clock, step_back: float = 0.0) -> None:
    """Miles's own Timer around `seconds` of work, while its wall clock steps back `step_back` seconds. Its console
    lines are left out: they are markers to the stdout reader, which this test's other timers do not write."""
    miles_timer.logger.disabled = True
    try:
        with timer(name):
            clock.now += seconds - step_back
    finally:
        miles_timer.logger.disabled = False


class Console(logging.Handler):
    """The job's console: every Miles log record in Miles's own format (logging_utils.configure_logger_raw), with
    the name of the process that logged it."""

    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.stream = io.StringIO()
        self.process = ""

    def emit(self, record: logging.LogRecord) -> None:
        formatter = logging.Formatter(MILES_LOG_FORMAT.format(name=self.process), datefmt=MILES_DATEFMT)
        self.stream.write(formatter.format(record) + "\n")


class MilesProcess:
    """One Ray process of a Miles job: its own TrackingManager (Miles keeps one per process) and console name."""

    def __init__(self, name: str, console: Console) -> None:
        registry = {**tracking.BACKEND_REGISTRY, "recorder": (Recorder, "use_bench_tracking")}
        self.name, self.console, self.manager = name, console, TrackingManager(registry)

    def enter(self) -> None:
        tracking._manager = self.manager
        self.console.process = self.name


@pytest.fixture(scope="module")
def one_rank_group(tmp_path_factory):
    """A one-rank gloo group and Miles's ParallelState on it: the train rank's collectives run for real."""
    started_here = not dist.is_initialized()
    if started_here:
        store = tmp_path_factory.mktemp("gloo") / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    group = GroupInfo(rank=0, size=1, group=dist.group.WORLD, gloo_group=dist.group.WORLD)
    previous = parallel._parallel_state
    state = parallel.ParallelState(
        **{name: group for name in ("intra_dp", "intra_dp_cp", "cp", "tp", "pp")}, ep=group, etp=group, indep_dp=group
    )
    parallel.set_parallel_state(state)
    yield
    parallel._parallel_state = previous
    if started_here:
        dist.destroy_process_group()


def hf_config() -> Namespace:
    return Namespace(**json.loads((REPO_ROOT / "scripts/benchmark/model_configs/qwen3-4b.json").read_text()))


def train_args(backend: str) -> Namespace:
    args = Namespace(use_bench_tracking=True, wandb_always_use_train_step=False, mfu_peak_tflops=989.0)
    args.__dict__ |= {"ci_test": False, "qkv_format": "thd", "log_multi_turn": False, "true_on_policy_mode": False}
    args.__dict__ |= {"log_passrate": False, "log_correct_samples": False}
    if backend == "megatron":  # the Megatron actor sizes its FLOPs from its own arguments
        args.__dict__ |= vars(flops_args_from_hf_config(hf_config()))
    return args


def rollout_manager_args(replay: bool = False) -> Namespace:
    from tests.fast.ray.rollout.conftest import make_args  # Miles's own test helpers

    recording = {"load_debug_rollout_data": "/recording/{rollout_id}.pt"} if replay else {}
    return make_args(use_bench_tracking=True, rollout_num_gpus=8, log_passrate=False, **recording)


def rollout_manager_logs(args: Namespace, k: int) -> None:
    from tests.fast.ray.rollout.conftest import make_samples_grouped

    samples = make_samples_grouped(GROUPS, GROUP_SIZE, rewards=[0.25 * (i % 4) for i in range(SAMPLES)])
    for sample in samples:
        sample.response_length = response_length(k)
        sample.tokens = list(range(PROMPT + response_length(k)))
        sample.loss_mask = [1] * response_length(k)
    rollout_metrics.log_rollout_data(k, args, samples, None, Rollout(k).generate)


def train_rank_logs(
    args: Namespace, entry: str, backend: str, k: int, clock: Clock, step_back: dict[int, float]
) -> None:
    """The actor's calls of one training: rollout data, one optimizer step, the Megatron actor's weight copy, then
    the perf line. `step_back`: rollout -> seconds the wall clock steps back while its train_wait runs."""
    length = response_length(k)
    rollout_data = {
        "response_lengths": [length] * SAMPLES,
        "total_lengths": [PROMPT + length] * SAMPLES,
        "loss_masks": [torch.ones(length, dtype=torch.int32) for _ in range(SAMPLES)],
        "log_probs": [torch.full((length,), -0.25) for _ in range(SAMPLES)],
        "entropy": [torch.full((length,), ENTROPY) for _ in range(SAMPLES)],
        "rewards": [0.25 * (i % 4) - 0.375 for i in range(SAMPLES)],  # group-normalised
        "raw_reward": [0.25 * (i % 4) for i in range(SAMPLES)],
    }
    log_utils.log_rollout_data(k, args, rollout_data)
    for step_id, losses in enumerate(OPTIMIZER_STEPS):
        log_utils.log_train_step(args, dict(losses), losses["grad_norm"], k, step_id, len(OPTIMIZER_STEPS))
    values = timers(entry, backend, k)
    for name, seconds in values.items():
        if name != "train_wait" or k not in step_back:
            Timer().add(name, seconds)
    if k in step_back:
        timed("train_wait", values["train_wait"], clock, step_back[k])
    if backs_up(entry, backend):  # the patch series' timer around the actor's weight copy, after the train timer
        timed("weight_backup", WEIGHT_BACKUP, clock)
    Timer().seq_lens = rollout_data["total_lengths"]
    if backend == "fsdp":
        flops_args = flops_args_from_hf_config(hf_config())
        train_metric_utils.log_perf_data_raw(
            rollout_id=k,
            args=args,
            is_primary_rank=dist.get_rank() == 0,
            compute_total_fwd_flops=lambda seq_lens: fwd_tflops_per_gpu(seq_lens, flops_args, dist.get_world_size()),
        )
    else:
        log_utils.log_perf_data(k, args, extra_metrics={})


def run_miles(
    entry: str,
    backend: str,
    folder: Path,
    monkeypatch,
    step_back: dict[int, float] | None = None,
    replay: bool = False,
) -> Path:
    """One run's three processes, their calls in the order the entry script makes them; returns the console."""
    monkeypatch.setenv(BENCH_TRACKING_DIR_ENV, str(folder / "sink"))
    clock = Clock()
    monkeypatch.setattr(miles_timer, "time", clock)
    monkeypatch.setattr(tracking, "_manager", tracking._manager)
    console = Console()
    root = logging.getLogger()
    level, root.level = root.level, logging.INFO
    root.addHandler(console)
    driver, manager, rank = (MilesProcess(n, console) for n in ("main", "rollout_manager", "actor_cell0_rank0"))
    rm_args, args = rollout_manager_args(replay), train_args(backend)
    try:
        driver.enter()
        tracking.init_tracking(args)
        manager.enter()
        tracking.init_tracking(rm_args, primary=False, router_addr="http://127.0.0.1:30000")
        rank.enter()
        tracking.init_tracking(args, primary=False)
        ahead = 1 if entry == "train_async.py" else 0  # train_async.py generates rollout k+1 while k trains
        for k in range(ahead):
            manager.enter()
            rollout_manager_logs(rm_args, k)
        for k in range(ROLLOUTS):
            if k + ahead < ROLLOUTS:
                manager.enter()
                rollout_manager_logs(rm_args, k + ahead)
            rank.enter()
            train_rank_logs(args, entry, backend, k, clock, step_back or {})
        for process in (rank, manager, driver):
            process.enter()
            tracking.finish_tracking()
    finally:
        root.removeHandler(console)
        root.level = level
    (folder / "console.log").write_text(console.stream.getvalue())
    return folder / "console.log"


def logged_per_rollout() -> dict[int, dict]:
    """What Miles logged with the rollout step key, merged per rollout across processes."""
    merged: dict[int, dict] = {}
    for step_key, metrics in LOGGED:
        if step_key == "rollout/step":
            merged.setdefault(metrics["rollout/step"], {}).update(metrics)
    return merged


def comparable(record) -> dict:
    """A record without its step key (a console line does not print it), flags in any order."""
    data = asdict(record)
    data["raw"] = {key: value for key, value in data["raw"].items() if key != "rollout/step"}
    data["flags"] = sorted(data["flags"])
    return data


def mean(key: str) -> float:
    return sum(step[key] for step in OPTIMIZER_STEPS) / len(OPTIMIZER_STEPS)


def assert_train_side(record, entry: str, backend: str, k: int) -> None:
    """Throughput, FLOPs, overlap and the learning signals of step k+1 from the known values."""
    r, seq_lens = Rollout(k), [PROMPT + response_length(k)] * SAMPLES
    assert record.train_tokens_per_s == pytest.approx(sum(seq_lens) / r.actor_train, rel=1e-12)
    tflops = batch_train_flops(ARCH, seq_lens) / r.actor_train / CTX.num_train_gpus / 1e12
    assert record.train_tflops_per_gpu == pytest.approx(tflops, rel=1e-12)
    assert record.train_mfu == pytest.approx(tflops / 989.0, rel=1e-12)
    rollout_wait = truth(entry, backend, k)["rollout_wait"]
    assert record.overlap_s == (0.0 if entry == "train.py" else pytest.approx(r.generate - rollout_wait))
    assert record.learning == {
        "reward_mean": 0.375,
        "response_length_mean": float(response_length(k)),
        "truncation_fraction": 0.0,
        "entropy": ENTROPY,
        "clip_fraction": mean("pg_clipfrac"),
        "approx_kl": mean("ppo_kl"),
        "grad_norm": mean("grad_norm"),
        "policy_loss": mean("pg_loss"),
    }


@pytest.mark.parametrize("entry,backend", SHAPES)
def test_every_field_of_every_step_exactly_and_stdout_agrees(entry, backend, one_rank_group, tmp_path, monkeypatch):
    LOGGED.clear()
    console = run_miles(entry, backend, tmp_path, monkeypatch)
    files = sorted(p.name.split("-")[0] for p in (tmp_path / "sink").glob("*.jsonl"))
    assert files == ["main", "rollout_manager", "train"]
    records = build_step_records("miles", [tmp_path / "sink"], CTX)
    from_stdout = build_step_records("miles", [console], CTX)
    logged = logged_per_rollout()
    assert [r.step for r in records] == [r.step for r in from_stdout] == list(range(1, ROLLOUTS + 1))
    for record in records:
        k = record.step - 1
        assert record.raw == logged[k]  # every value every process logged for the rollout, as logged
        assert record.raw["perf/train_wait_time"] == timers(entry, backend, k)["train_wait"]
        r, expected = Rollout(k), truth(entry, backend, k)
        assert record.phases_s["generate"] == r.generate
        assert record.phases_s["old_logprob"] == r.log_probs and record.phases_s["train"] == r.actor_train
        assert record.phases_s["ref_logprob"] is None
        assert record.phases_s["rollout_wait"] == pytest.approx(expected["rollout_wait"], rel=1e-12)
        assert record.samples == SAMPLES
        assert record.tokens == {"prompt": SAMPLES * PROMPT, "response": SAMPLES * response_length(k)}
        assert record.rollout_tokens_per_gpu_s == pytest.approx(SAMPLES * response_length(k) / r.generate / 8)
        assert_train_side(record, entry, backend, k)
        if k == ROLLOUTS - 1:
            assert record.step_time_s is None and "miles_shift:no_next_step" in record.flags
            continue
        assert record.step_time_s == pytest.approx(expected["step_time_s"], rel=1e-12)
        assert record.phases_s["weight_sync"] == r.update_weights
        assert record.phases_s["other"] == pytest.approx(expected["other"], rel=1e-12, abs=1e-12)
        busy = r.log_probs + r.actor_train
        assert record.wait_ratio == pytest.approx(1 - busy / expected["step_time_s"], rel=1e-12)
    assert [comparable(r) for r in records] == [comparable(r) for r in from_stdout]


def test_the_megatron_actor_times_its_weight_copy_in_the_steps_own_perf_line():
    """The patch series' timer: in the Megatron actor's train_actor(), the CPU weight copy runs inside `timer(
    "weight_backup")`, after the train timer's block and before the perf line that logs it (so the copy's seconds
    reach the record whose step caused them, which the reader books in that step)."""
    import ast
    import importlib.util

    source = Path(importlib.util.find_spec("miles.backends.megatron_utils.actor").origin).read_text()
    train = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "train_actor"
    )
    blocks = {ast.unparse(w.items[0].context_expr): w for w in ast.walk(train) if isinstance(w, ast.With)}
    backup = blocks["timer('weight_backup')"]
    assert [ast.unparse(statement) for statement in backup.body] == ["self.weights_backuper.backup('actor')"]
    train_block = blocks["inverse_timer('train_wait')"]
    (perf_line,) = [c for c in ast.walk(train) if isinstance(c, ast.Call) and ast.unparse(c.func) == "log_perf_data"]
    assert train_block.end_lineno < backup.lineno < perf_line.lineno


@pytest.mark.parametrize("step_back", [46.0, 60.0])
def test_a_wall_clock_step_back_inside_a_timer_is_flagged_and_left_out(
    step_back, one_rank_group, tmp_path, monkeypatch
):
    """Miles's Timer reads time.time(): the clock stepping back while rollout 2's train_wait runs shortens it below
    the work inside it (46 s) or below zero (60 s). That step's wait and step time are left out, flagged; every
    other step keeps its exact values."""
    LOGGED.clear()
    console = run_miles("train.py", "fsdp", tmp_path, monkeypatch, step_back={2: step_back})
    records = build_step_records("miles", [tmp_path / "sink"], CTX)
    from_stdout = build_step_records("miles", [console], CTX)
    assert [comparable(r) for r in records] == [comparable(r) for r in from_stdout]
    stepped = records[2]
    assert stepped.raw["perf/train_wait_time"] == pytest.approx(
        timers("train.py", "fsdp", 2)["train_wait"] - step_back
    )
    assert stepped.step_time_s is None and stepped.phases_s["rollout_wait"] is None
    negative = (
        "negative_duration:perf/train_wait_time" if step_back == 60.0 else "negative_duration:phases_s.rollout_wait"
    )
    assert negative in stepped.flags
    assert stepped.phases_s["train"] == Rollout(2).actor_train
    for record in records[:2]:
        expected = truth("train.py", "fsdp", record.step - 1)
        assert record.step_time_s == pytest.approx(expected["step_time_s"], rel=1e-12)
        assert not any(f.startswith("negative_duration") for f in record.flags)


@pytest.mark.parametrize("backend", ["fsdp", "megatron"])
def test_a_replay_logs_no_rollout_record_and_is_read_without_a_missing_key(
    backend, one_rank_group, tmp_path, monkeypatch
):
    """A train-only cell (--load-debug-rollout-data): Miles's own log_rollout_data returns before logging the rollout
    manager's record, so the sink holds the train rank's records only. Read as a replay, no step misses a key, none
    has a generate time or a policy lag; read as a full loop, every step would miss perf/rollout_time."""
    from dataclasses import replace

    LOGGED.clear()
    console = run_miles("train.py", backend, tmp_path, monkeypatch, replay=True)
    assert not any(metrics.get("perf/rollout_time") is not None for _, metrics in LOGGED)
    replayed = replace(CTX, replay=True)
    records = build_step_records("miles", [tmp_path / "sink"], replayed)
    assert [comparable(r) for r in records] == [
        comparable(r) for r in build_step_records("miles", [console], replayed)
    ]
    for record in records:
        assert not [f for f in record.flags if f.startswith("missing:")], record.flags
        assert record.phases_s["generate"] is None and "generate:not_recorded:replay" in record.flags
        assert record.policy_lag == {} and record.phases_s["train"] == Rollout(record.step - 1).actor_train
    assert all(r.step_time_s is not None for r in records[:-1])
    full_loop = build_step_records("miles", [tmp_path / "sink"], CTX)
    assert all("missing:perf/rollout_time" in r.flags for r in full_loop)
