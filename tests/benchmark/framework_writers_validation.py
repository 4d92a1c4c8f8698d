"""The learning guard's validation on lines the frameworks' own writers print: learning_validation.py's noise model
and planted differences, with the candidate written by Miles's own logging code as its train rank's log.txt
(miles_learning_log_worker.py, run by a Miles-importable python inside a Miles tree: `configure_logger_raw`,
`gather_log_data`, `log_train_step`, `log_perf_data_raw`) and the reference by VERL 0.9.1's FileLogger (loaded from
the wheel by file path). The project's readers read both back (`build_step_records`) and analysis/learning.py's
`signal_row` judges every signal under the default spec (entropy on its drift, the aggregations differ) with each
side's 3 repeats (one log or jsonl per run), as `run.py report` does for a Miles/VERL pair.

    python -m tests.benchmark.framework_writers_validation --miles-root MILES_TREE --miles-python PYTHON \
        --pairs 100 --steps 24 200

Rates as learning_validation.py names them (A/A, each plant, a gap equal to the margin). What this adds to it: the
values go through the frameworks' printing (Python's repr in Miles's log lines, orjson in VERL's jsonl), the
readers' parsing, Miles's train-step averaging and the step shift; a difference there shows as a rate that moves.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
from scripts.benchmark.analysis.learning import LEVEL_NOT_COMPARABLE, signal_row
from scripts.benchmark.contracts.report import DIFFERENT, SAME
from scripts.benchmark.frameworks.sinks import build_step_records
from scripts.benchmark.frameworks.verl.learning import VERL_CLIP_RATIO_KEY, VERL_LEARNING_KEYS, VERL_LENGTH_MAX_KEY
from tests.benchmark.learning_validation import PLANTED, PLANTED_SIGNAL, REPEATS, generate_pair, shown
from tests.benchmark.test_miles_reader import TRAIN_RANK, miles_log_calls
from tests.benchmark.test_verl_reader import load_file_logger_class, verl_step_metrics

from miles.utils.bench_metrics import LEARNING_SIGNALS, RunContext

WORKER = Path(__file__).resolve().parent / "miles_learning_log_worker.py"
VERL_ROOT = Path(os.environ.get("VERL_ISOLATED_DIR", Path(__file__).resolve().parents[2] / ".cache" / "verl-0.9.1"))
MAX_RESPONSE = 8192
OPTIMIZER_STEPS = 2
MILES_CTX = RunContext.build(arch=None, num_train_gpus=8, optimizer_steps_per_step=OPTIMIZER_STEPS)
VERL_CTX = RunContext.build(arch=None, num_train_gpus=8, max_response_tokens=MAX_RESPONSE)


def miles_rollouts(values: dict[str, np.ndarray], steps: int) -> list[dict]:
    """The worker's request for one run: rollout fields, two optimizer steps carrying the step's train values
    (their mean is the value), and the train rank's perf dict of the reader test's run."""
    perf = [m for identity, _, m in miles_log_calls(range(steps)) if identity == TRAIN_RANK and "perf/train_time" in m]
    out = []
    for k in range(steps):
        v = {name: float(series[k]) for name, series in values.items()}
        rollout = {"raw_reward": v["reward_mean"], "response_lengths": v["response_length_mean"]}
        rollout |= {"total_lengths": 180.5 + v["response_length_mean"], "log_probs": -0.3, "rewards": 0.0}
        rollout |= {"truncated": v["truncation_fraction"], "entropy": v["entropy"]}
        loss = {"loss": v["policy_loss"], "pg_loss": v["policy_loss"], "entropy_loss": 0.0}
        loss |= {"pg_clipfrac": v["clip_fraction"], "ppo_kl": v["approx_kl"]}
        train = [{"loss": loss, "grad_norm": v["grad_norm"]}] * OPTIMIZER_STEPS
        extra = {key: value for key, value in perf[k].items() if key != "rollout/step"}
        out.append({"rollout_id": k, "rollout": rollout, "train_steps": train, "perf": extra})
    return out


def write_verl(path: Path, values: dict[str, np.ndarray], steps: int, file_logger) -> None:
    """One run's jsonl through VERL's FileLogger, step s carrying the values of index s - 1."""
    os.environ["VERL_FILE_LOGGER_PATH"] = str(path)
    logger = file_logger("bench", path.stem)
    for k in range(steps):
        v = {name: float(series[k]) for name, series in values.items()}
        data = verl_step_metrics(k + 1, gen=40.0, update_actor=20.0, prompt_mean=180.5, response_mean=1500.0)
        data |= {VERL_LEARNING_KEYS[name]: v[name] for name in VERL_LEARNING_KEYS}
        data |= {VERL_CLIP_RATIO_KEY: v["truncation_fraction"], VERL_LENGTH_MAX_KEY: float(MAX_RESPONSE)}
        logger.log(data=data, step=k + 1)
    logger.finish()


def read_side(paths: list[Path], framework: str, ctx: RunContext, steps: int) -> list[dict[int, dict[str, float]]]:
    """Each run's records read back, step -> signals (every step, or the run stops)."""
    out = []
    for path in paths:
        records = build_step_records(framework, [path], ctx)
        if len(records) != steps:
            raise SystemExit(f"{path.name}: {len(records)} {framework} steps read back, not {steps}")
        out.append({r.step: r.learning for r in records})
    return out


def judge(miles_logs: list[Path], verl_jsonls: list[Path], steps: int) -> dict[str, str]:
    """Per signal, the guard's verdict on the pair's runs as the readers read them back, judged with each side's
    repeats as `run.py report` does."""
    sides = read_side(miles_logs, "miles", MILES_CTX, steps), read_side(verl_jsonls, "verl", VERL_CTX, steps)
    verdicts = {}
    for name in LEARNING_SIGNALS:
        repeats = [[{s: v[name] for s, v in run.items() if v.get(name) is not None} for run in side] for side in sides]
        means = [{s: float(np.mean([run[s] for run in side if s in run])) for s in side[0]} for side in repeats]
        row = signal_row(
            name,
            *means,
            None,
            family=len(LEARNING_SIGNALS),
            labels=("Miles", "VERL"),
            repeats=(repeats[0], repeats[1]),
        )
        verdicts[name] = row["verdict"]
    return verdicts


def write_and_judge(args, folder: Path, pairs: list[dict], steps: int) -> list[dict[str, str]]:
    """Every run of every pair written (Miles's side through one worker run), read back and judged."""
    names = [[(f"{i}-{j}", j) for j in range(REPEATS)] for i in range(len(pairs))]
    runs = [
        {"path": str(folder / f"miles-{tag}.log"), "rollouts": miles_rollouts(_run(pair, 0, j), steps)}
        for pair, tags in zip(pairs, names, strict=True)
        for tag, j in tags
    ]
    request = folder / "request.json"
    request.write_text(json.dumps({"runs": runs}))
    env = {**os.environ, "PYTHONPATH": str(Path(args.miles_root).resolve())}
    command = [args.miles_python, str(WORKER), str(request)]
    done = subprocess.run(command, cwd=args.miles_root, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the Miles log worker failed under {args.miles_python}:\n{done.stderr[-3000:]}")
    file_logger = load_file_logger_class(VERL_ROOT)
    with contextlib.redirect_stdout(io.StringIO()):  # FileLogger prints the path it creates
        for pair, tags in zip(pairs, names, strict=True):
            for tag, j in tags:
                write_verl(folder / f"verl-{tag}.jsonl", _run(pair, 1, j), steps, file_logger)
    return [
        judge([folder / f"miles-{t}.log" for t, _ in tags], [folder / f"verl-{t}.jsonl" for t, _ in tags], steps)
        for tags in names
    ]


def _run(pair: dict, side: int, repeat: int) -> dict[str, np.ndarray]:
    """One run's series of every signal: side 0 the candidate (Miles), 1 the reference (VERL)."""
    return {name: runs[side][repeat] for name, runs in pair.items()}


def rates(args, steps: int) -> dict[str, float]:
    """learning_validation.py's rates over pairs written by the frameworks' writers (3 repeats a side)."""
    rng = np.random.default_rng(args.seed)
    families = (None, *PLANTED, "at margin")
    pairs = [generate_pair(rng, steps, planted, REPEATS) for planted in families for _ in range(args.pairs)]
    with tempfile.TemporaryDirectory() as tmp:
        calls = write_and_judge(args, Path(tmp), pairs, steps)
    by_family = {planted: calls[i * args.pairs : (i + 1) * args.pairs] for i, planted in enumerate(families)}
    out = {"A/A any different": float(np.mean([DIFFERENT in v.values() for v in by_family[None]]))}
    for planted in PLANTED:
        called = [v[PLANTED_SIGNAL[planted]] == DIFFERENT for v in by_family[planted]]
        out[f"{planted}: different"] = float(np.mean(called))
    for name in LEARNING_SIGNALS:
        if name not in LEVEL_NOT_COMPARABLE:
            same = [v[name] == SAME for v in by_family["at margin"]]
            out[f"{name} gap = margin: same"] = float(np.mean(same))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--miles-root", required=True, help="a Miles tree whose python imports its miles package")
    parser.add_argument("--miles-python", required=True)
    parser.add_argument("--pairs", type=int, default=100)
    parser.add_argument("--steps", type=int, nargs="+", default=[24, 200])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for steps in args.steps:
        print(f"\n{steps} steps, {args.pairs} pairs, {REPEATS} repeats a side", flush=True)
        for name, rate in rates(args, steps).items():
            print(f"| {name} | {shown(name, rate, args.pairs)} |", flush=True)


if __name__ == "__main__":
    main()
