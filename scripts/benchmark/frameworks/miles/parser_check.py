"""Run a real Miles's own parser (parse_worker.py, in a child process) on the Miles cells of a plan.

- `parser_launches(cells, checkpoint_dir)`: per Miles cell, the flags after the launcher prefix (`python3
  .../<entry>.py`, whichever entry script the plan names), ${BENCH_CELL_DIR} expanded, --hf-checkpoint pointed at
  a folder holding only the cell's config.json (written under checkpoint_dir), and the environment the job adds
  (the runtime env's env_vars, PYTHONPATH excepted: that is where Miles is, given to the child separately).
- `run_miles_parser(launches, miles_path, python, transformer_config=False)`: one child for all launches;
  [{"accepted", "error"[, "config_error"]}] in order. transformer_config: also build, for Megatron launches, the
  TransformerConfig Miles's model provider builds from the parsed args (Megatron's heads/TP and MoE/EP checks).
  Raises MilesParserUnavailable when the child cannot import or run Miles's parser.
- `release_dir()`: the isolated `pip install --no-deps --target` folder of the PyPI release the tests use
  (MILES_RELEASE_DIR, default .cache/miles-rl-<MILES_RELEASE>).

Caveats:
- The child runs the worker by path from an empty temp dir, with a PYTHONPATH of Miles's folders only: the
  benchmark's own `miles` package and the repository root never shadow the real Miles (nor do its
  `megatron`/`sglang` shadow anything of ours).
- Without a GPU, the child answers Megatron's compute-capability question with `CAPABILITY_WITHOUT_GPU` (9.0:
  H100/H200, the GPUs the presets target) and stands in for triton/torchvision only where absent (parse_worker.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from scripts.benchmark.frameworks.launch import BENCH_CELL_DIR
from scripts.benchmark.frameworks.miles.versions import MILES_RELEASE

WORKER = Path(__file__).resolve().parent / "parse_worker.py"
REPO_ROOT = Path(__file__).resolve().parents[4]
CAPABILITY_WITHOUT_GPU = (9, 0)
RUN_WORKER = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
"""Runs the worker by path without putting its folder on sys.path (python -P needs 3.11); cwd is a fresh temp dir."""


class MilesParserUnavailable(RuntimeError):
    """The child could not run Miles's parser (Miles or one of its imports missing): no verdict on any launch."""


def release_dir() -> Path:
    return Path(os.environ.get("MILES_RELEASE_DIR") or REPO_ROOT / ".cache" / f"miles-rl-{MILES_RELEASE}")


def entry_flags(argv: list[str]) -> list[str]:
    """The flags Miles's parser sees: everything after the entry script (train.py, train_async.py, ...)."""
    entry = next((i for i, token in enumerate(argv) if token.endswith(".py")), None)
    if entry is None:
        raise ValueError(f"no entry script (*.py) in the Miles argv {argv[:3]}")
    return argv[entry + 1 :]


def job_env(launch_argv: list[str]) -> dict[str, str]:
    """env_vars of the Ray job submission's --runtime-env-json the cell runs, without PYTHONPATH."""
    if "--runtime-env-json" not in launch_argv:
        return {}
    runtime_env = json.loads(launch_argv[launch_argv.index("--runtime-env-json") + 1])
    return {k: v for k, v in runtime_env.get("env_vars", {}).items() if k != "PYTHONPATH"}


def config_only_checkpoint(model_config: str, checkpoint_dir: Path) -> str:
    """A folder holding just config.json: all Miles's parser reads of --hf-checkpoint (AutoConfig)."""
    folder = checkpoint_dir / Path(model_config).stem
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_config, folder / "config.json")
    return str(folder)


def parser_launches(cells: list[dict[str, Any]], checkpoint_dir: Path) -> list[dict[str, Any]]:
    launches = []
    for cell in cells:
        cell_dir = str(checkpoint_dir / "cells" / cell["id"])
        flags = [token.replace(BENCH_CELL_DIR, cell_dir) for token in entry_flags(cell["argv"])]
        if "--hf-checkpoint" in flags:
            flags[flags.index("--hf-checkpoint") + 1] = config_only_checkpoint(cell["model_config"], checkpoint_dir)
        launches.append({"argv": flags, "env": job_env(cell.get("launch_argv") or [])})
    return launches


def run_miles_parser(
    launches: list[dict[str, Any]],
    miles_path: list[str],
    python: str,
    *,
    transformer_config: bool = False,
    timeout_s: float = 600,
) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="miles-parse-") as tmp:
        request, result = Path(tmp) / "request.json", Path(tmp) / "result.json"
        request.write_text(
            json.dumps(
                {
                    "launches": launches,
                    "capability_without_gpu": CAPABILITY_WITHOUT_GPU,
                    "transformer_config": transformer_config,
                }
            )
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(miles_path)}
        try:
            done = subprocess.run(
                [python, "-c", RUN_WORKER, str(WORKER), str(request), str(result)],
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MilesParserUnavailable(f"cannot run Miles's parser with {python}: {exc}") from exc
        if done.returncode != 0 or not result.is_file():
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            raise MilesParserUnavailable(
                f"Miles's parser could not run ({python}, PYTHONPATH {miles_path}): {tail[0]}"
            )
        return json.loads(result.read_text())
