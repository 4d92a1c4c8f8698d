"""VERL 0.9.1's own checks on generated VERL cells, on CPU: what `main_ppo` does before it touches Ray or a GPU.

- `run_verl_own_checks(cells, root, python) -> {name: result}`: one child process (`python this_file --inner`,
  PYTHONPATH = the unpacked wheel only, cwd /) checks every cell; result["status"] is "accepted" or "rejected"
  (with the stage, the error and the VERL file:line that raised) or "error" (the child died).
- `find_check_python()`: the interpreter holding VERL's import-time dependencies (env VERL_CHECK_PYTHON, else
  <repo>/.cache/verl-check-venv/bin/python, which the README test command builds); None when absent.

What runs, all real VERL code from the wheel:
1. compose: Hydra initialize_config_dir(<wheel>/verl/trainer/config) + compose("ppo_trainer", overrides), the config
   `@hydra.main` builds in verl/trainer/main_ppo.py (`hydra.*` overrides dropped, ${BENCH_CELL_DIR} a placeholder).
2. main: `verl.trainer.main_ppo.main(cfg)` through Hydra's passthrough call: auto_set_device, validate_config (batch
   divisibility, mutually exclusive micro-batch options, ActorConfig dataclass + validate), the trainer.use_v1 branch.
3. trainer: the Ray-free start of TaskRunnerV1.run: get_trainer_cls(mode), transfer_queue.enable, OmegaConf.resolve
   and the real constructor (PPOTrainerSync / PPOTrainerSeparateAsync: parameter_sync_step x ppo_mini_batch_size ==
   train_batch_size, a rollout pool, a non-naive checkpoint engine, the replay buffer's threshold/strategy checks).
4. conversions: rollout.checkpoint_engine and actor_rollout_ref.rollout to their dataclasses.
5. replay (train-only cells, skip.rollout_tq on): SkipManager.init(config), what the trainer's fit() runs first, and
   the RolloutTqSkip it builds: its action, steps and the folder it loads recorded batches from (`rollout_tq`).

Left out (LEFT_OUT, reported with every result; nothing is faked into success): main_ppo.run_ppo (ray.init and
TaskRunnerV1.remote: replaced, for the child's lifetime, by step 3, which raises whatever VERL raises),
tq.init (TransferQueue Ray actors), trainer.init() and later (Ray pools, model/tokenizer load, SGLang, NCCL), the
HFModelConfig conversion (reads the model folder). SGLang's engine_kwargs reach ServerArgs only inside the server:
preflight checks those against the installed SGLang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[4]
CHECK_VENV = REPO_ROOT / ".cache" / "verl-check-venv"
BENCH_CELL_DIR = "${BENCH_CELL_DIR}"
RESULT_MARK = "@@VERL_OWN_CHECK@@ "
VALIDATE_CONFIG_OK = "[validate_config] All configuration checks passed successfully!"
LEFT_OUT = (
    "main_ppo.run_ppo: ray.init + TaskRunnerV1.remote().run.remote (the Ray-free start of run() runs instead)",
    "TaskRunnerV1.run: tq.init(config.transfer_queue) (TransferQueue Ray actors)",
    "trainer.init() and later: Ray pools and worker groups, tokenizer/model load, SGLang servers, NCCL",
    "HFModelConfig conversion (reads the model folder)",
)


def find_check_python() -> Path | None:
    explicit = os.environ.get("VERL_CHECK_PYTHON")
    candidate = Path(explicit) if explicit else CHECK_VENV / "bin" / "python"
    return candidate if candidate.is_file() else None


def run_verl_own_checks(
    cells: list[tuple[str, list[str]]], *, root: Path, python: Path, timeout_s: float = 900
) -> dict[str, dict]:
    """Every cell's result, checked in one child (VERL's imports, ~20 s, are paid once)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PYTHONPATH=str(root), HYDRA_FULL_ERROR="1", RAY_DISABLE_IMPORT_WARNING="1")
    proc = subprocess.run(
        [str(python), str(Path(__file__).resolve()), "--inner"],
        input=json.dumps({"root": str(root), "cells": cells}),
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=timeout_s,
    )
    results: dict[str, dict] = {}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK) :])
            results[result.pop("name")] = result
    tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
    for name, _ in cells:
        results.setdefault(name, {"status": "error", "stage": "child", "error": f"exit {proc.returncode}: {tail}"})
    return results


# ---------------------------------------------------------------- the child: VERL on sys.path, not the harness


def _compose(overrides: list[str], root: Path):
    from hydra import compose, initialize_config_dir

    cleaned = [o.replace(BENCH_CELL_DIR, "/bench-cell") for o in overrides if not o.lstrip("+~").startswith("hydra.")]
    with initialize_config_dir(config_dir=str(root / "verl" / "trainer" / "config"), version_base=None):
        return compose(config_name="ppo_trainer", overrides=cleaned)


def _construct_trainer(config, task_runner_class, progress: dict) -> None:
    """TaskRunnerV1.run up to tq.init: pick the trainer class, resolve the config, build the trainer."""
    from omegaconf import OmegaConf
    from verl.trainer import main_ppo
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.utils.config import omega_conf_to_dataclass

    if task_runner_class is not main_ppo.TaskRunnerV1:
        raise RuntimeError(f"main() chose {task_runner_class.__name__}, not TaskRunnerV1 (trainer.use_v1 is off)")
    progress["stage"] = "trainer"
    trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
    config.transfer_queue.enable = True
    OmegaConf.resolve(config)
    trainer = trainer_cls(config=config)
    progress.update(trainer_class=type(trainer).__name__, parameter_sync_step=trainer.parameter_sync_step)
    progress["replay_buffer"] = type(trainer.replay_buffer).__name__
    progress["stage"] = "conversions"
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout.checkpoint_engine)
    progress["rollout_config"] = type(omega_conf_to_dataclass(config.actor_rollout_ref.rollout)).__name__
    if config.skip.rollout_tq.enable:
        _replay_skip(config, progress)


def _replay_skip(config, progress: dict) -> None:
    """The replay a train-only cell asks for, as VERL's own SkipManager sets it up at the start of fit()."""
    from verl.utils.skip import SkipManager

    progress["stage"] = "skip"
    SkipManager.init(config)
    skip = SkipManager.skip_instances["rollout_tq"]
    progress["rollout_tq"] = {
        "class": type(skip).__name__,
        "enabled": skip.is_enabled(),
        "action": skip.action.value,
        "steps": list(skip.steps),
        "parameter_sync_step": skip.parameter_sync_step,
        "project_dump_dir": str(skip._get_project_dump_dir()),
    }


def _check_cell(main_ppo, overrides: list[str], root: Path) -> dict:
    progress: dict = {"stage": "compose", "left_out": list(LEFT_OUT)}
    try:
        cfg = _compose(overrides, root)
        progress["stage"] = "main"
        main_ppo.run_ppo = lambda config, task_runner_class: _construct_trainer(config, task_runner_class, progress)
        main_ppo.main(cfg)
        progress.update(status="accepted", stage="done")
    except BaseException as exc:  # AssertionError, ValueError, SystemExit: every rejection is a result
        cause = f" (caused by {type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else ""
        frames = traceback.extract_tb(exc.__traceback__)
        inside = [f for f in reversed(frames) if Path(f.filename).is_relative_to(root)]
        where = f"{Path(inside[0].filename).relative_to(root)}:{inside[0].lineno}" if inside else ""
        progress.update(status="rejected", error=f"{type(exc).__name__}: {exc}{cause}", where=where)
    return progress


def _inner_main() -> int:
    import contextlib
    import io

    request = json.loads(sys.stdin.read())
    root = Path(request["root"])
    from verl.trainer import main_ppo

    for name, overrides in request["cells"]:
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            result = _check_cell(main_ppo, overrides, root)
        result["validate_config_passed"] = VALIDATE_CONFIG_OK in captured.getvalue()
        print(RESULT_MARK + json.dumps({"name": name, **result}), flush=True)
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--inner"]:
    here = Path(__file__).resolve().parent  # run as a script: its folder (config.py, data.py...) must not shadow
    sys.path[:] = [p for p in sys.path if p and Path(p).resolve() != here]
    sys.exit(_inner_main())
