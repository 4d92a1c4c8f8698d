"""Can this machine execute a plan? The one check `execute` (and so the main command) makes before anything starts.

- `launch_problems(plan, options) -> list[str]`: always checked: every executable the run will start exists (prepare
  steps, each cell's command or launch prefix, the interpreters, a Ray CLI where a private head is needed), and a
  run folder that `ray job submit` can carry.
- `check_can_execute(plan, skip_prepare=...) -> list[str]`: the machine (skippable with --no-preflight):
  nvidia-smi / enough GPUs, the Miles train.py path, `ray` on PATH, VERL importable by the cells' python3, the
  checkpoint and the prompt data (each either present, or downloadable by the plan's `hf download` step: the `hf`
  CLI on PATH), and an installed SGLang that accepts the SGLang keys the
  cells pass (`sglang_check`). An empty list means the plan can run here.
- `miles_parser_rejections(plan, python=None) -> list[str]`: the installed Miles's own parse_args (the checkout the
  cells' PYTHONPATH names) on every Miles cell, one line per rejected cell with Miles's message (the flag it names).
  Raises MilesParserUnavailable when that Miles cannot be imported by `python` (default: python3 on PATH).

Caveats:
- It only looks; it starts nothing. VERL is probed in a child python3 with importlib.util.find_spec, never imported
  here (the wheel's top-level `scripts`/`tests` packages would shadow ours).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from scripts.benchmark.frameworks.launch import ray_shell_problem
from scripts.benchmark.runner.cell_command import find_executable_problem, uses_ray_job_submit
from scripts.benchmark.runner.options import ExecuteOptions, harness_argv, needs_private_head
from scripts.benchmark.runner.sglang_check import installed_sglang_version, sglang_key_problems


def _gpu_count() -> tuple[int | None, str]:
    """GPUs nvidia-smi lists, read the way the runner's environment record reads them (environment_record)."""
    if shutil.which("nvidia-smi") is None:
        return None, "nvidia-smi not found on PATH (no NVIDIA driver / GPUs on this machine)"
    from scripts.benchmark.runner.environment_record import read_gpus

    gpus = read_gpus()
    if gpus["gpus"] is None:
        return None, f"cannot count the GPUs: {gpus['missing']}"
    return len(gpus["gpus"]), ""


def _verl_importable() -> bool:
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('verl') else 1)"
    python = shutil.which("python3")
    return bool(python) and subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0


def check_can_execute(plan: dict[str, Any], *, skip_prepare: bool = False) -> list[str]:
    missing: list[str] = []
    cells = plan["cells"]
    needed = max((cell.get("gpus", {}).get("total", 0) for cell in cells), default=0)
    count, why = _gpu_count()
    if count is None:
        missing.append(why)
    elif count < needed:
        missing.append(f"the plan needs {needed} GPUs per cell, nvidia-smi lists {count}")
    miles = [cell for cell in cells if cell["framework"] == "miles"]
    if miles:
        train_py = next((word for word in miles[0].get("argv") or [] if word.endswith(".py")), "train.py")
        if not Path(train_py).is_file():
            missing.append(f"Miles train.py not found at {train_py} (set MILES_ROOT or --miles-root)")
        if shutil.which("ray") is None:
            missing.append("ray not found on PATH (Miles cells run as `ray job submit`)")
    if any(cell["framework"] == "verl" for cell in cells) and not _verl_importable():
        missing.append("verl is not importable by python3 (pip install 'verl[sglang]==0.9.1' on the GPU node)")
    versions: dict[str, str | None] = {}
    missing += sglang_key_problems(cells, lambda framework: versions.setdefault("python3", installed_sglang_version()))
    return missing + _data_problems(plan, skip_prepare)


def _data_problems(plan: dict[str, Any], skip_prepare: bool) -> list[str]:
    missing: list[str] = []
    spec, steps = plan.get("spec") or {}, {step["name"]: step for step in plan.get("prepare") or []}
    for field, path, step in (
        ("model.hf_checkpoint", (spec.get("model") or {}).get("hf_checkpoint"), steps.get("download-model")),
        ("data.prompt_data", (spec.get("data") or {}).get("prompt_data"), steps.get("download-dataset")),
    ):
        if path is None or Path(path).exists():
            continue
        if skip_prepare:
            missing.append(f"{field} {path} does not exist (and --skip-prepare skips its download)")
        elif step is None:
            missing.append(f"{field} {path} does not exist (and the spec names no hf_repo to download it)")
        elif shutil.which(step["argv"][0]) is None:
            missing.append(
                f"{field} {path} does not exist and {step['argv'][0]!r} (the Hugging Face CLI: pip install "
                "huggingface_hub) is not on PATH to download it"
            )
    return missing


def miles_parser_rejections(plan: dict[str, Any], python: str | None = None) -> list[str]:
    """Miles's own verdict on the plan's Miles cells, before any GPU time: --hf-checkpoint points at a folder holding
    only the preset's config.json (the model may not be downloaded yet); Miles is where the cells' job finds it."""
    from scripts.benchmark.frameworks.miles.parser_check import (
        MilesParserUnavailable,
        parser_launches,
        run_miles_parser,
    )

    cells = [cell for cell in plan["cells"] if cell["framework"] == "miles"]
    if not cells:
        return []
    python = python or shutil.which("python3")
    if python is None:
        raise MilesParserUnavailable("python3 not found on PATH to run Miles's parser")
    with tempfile.TemporaryDirectory(prefix="miles-preflight-") as tmp:
        launches = parser_launches(cells, Path(tmp))
        verdicts = run_miles_parser(launches, _miles_path(cells[0]), python)
    return [
        f"{cell['id']}: {verdict['error']}"
        for cell, verdict in zip(cells, verdicts, strict=True)
        if not verdict["accepted"]
    ]


def _miles_path(cell: dict[str, Any]) -> list[str]:
    """The PYTHONPATH of the cell's `ray job submit --runtime-env-json` (the Miles and Megatron checkouts)."""
    argv = cell["launch_argv"]
    runtime_env = json.loads(argv[argv.index("--runtime-env-json") + 1])
    return [path for path in runtime_env["env_vars"].get("PYTHONPATH", "").split(os.pathsep) if path]


def launch_problems(plan: dict[str, Any], options: ExecuteOptions, run_dir: Path) -> list[str]:
    """Every executable the run will start, and the run folder `ray job submit` must carry (one line each)."""
    problems: list[str] = []
    for step in [] if options.skip_prepare else steps_to_prepare(plan):
        if problem := find_executable_problem(harness_argv(step["argv"])):
            problems.append(
                f"prepare step {step['name']}: {problem} (it creates {step.get('creates')}; "
                "install it, create that path, or pass --skip-prepare)"
            )
    for framework, python in (("miles", options.miles_python), ("verl", options.verl_python)):
        runtime = options.runtime(framework)
        if python and not runtime.prefix and (problem := find_executable_problem([python])):
            problems.append(f"--{framework}-python: {problem}")
    for cell in plan["cells"]:
        problems += _cell_launch_problems(cell, options, run_dir)
    return sorted(set(problems))


def _cell_launch_problems(cell: dict[str, Any], options: ExecuteOptions, run_dir: Path) -> list[str]:
    problems: list[str] = []
    runtime = options.runtime(cell["framework"])
    if uses_ray_job_submit(cell["launch_argv"]) and (problem := ray_shell_problem(str(run_dir))):
        problems.append(f"cell {cell['id']}: run folder {problem}")
    if runtime.prefix:
        if problem := find_executable_problem(list(runtime.prefix)):
            problems.append(f"--{cell['framework']}-prefix: {problem}")
        return problems
    argv = [runtime.python if runtime.python and w in ("python", "python3") else w for w in cell["launch_argv"]]
    if argv[0] == "ray":
        argv[0] = runtime.ray_argv()[-1]
    if problem := find_executable_problem(argv):
        problems.append(f"cell {cell['id']} launch_argv[0]: {problem}")
    if needs_private_head(cell, options) and (problem := find_executable_problem(runtime.ray_argv())):
        problems.append(
            f"cell {cell['id']} needs a private Ray head, but {problem} "
            "(use --{}-python of an environment with Ray, RAY_ADDRESS, or --ray none)".format(cell["framework"])
        )
    return problems


def steps_to_prepare(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The preparation steps that will run: those whose `creates` is missing (or that are never skipped)."""
    return [
        step
        for step in plan.get("prepare") or []
        if not (step.get("creates") and step.get("skip_if_exists", True) and Path(step["creates"]).exists())
    ]
