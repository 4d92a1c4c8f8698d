"""Can this machine execute a plan? The one check `execute` (and so the main command) makes before anything starts.

- `launch_problems(plan, options) -> list[str]`: always checked: every executable the run will start exists (prepare
  steps, each cell's command or launch prefix, the interpreters, a Ray CLI where a private head is needed), and a
  run folder that a Ray job submission can carry.
- `check_can_execute(plan, skip_prepare=...) -> list[str]`: the machine (skippable with --no-preflight):
  nvidia-smi / enough GPUs, what each framework's adapter needs (its entry script, `ray` on PATH, its package
  importable by the cells' python3), the checkpoint and the prompt data (each either present, or downloadable by
  the plan's `hf download` step: the `hf` CLI on PATH), and an installed SGLang that accepts the SGLang keys the
  cells pass (`sglang_check`). An empty list means the plan can run here.
- `installed_check_rejections(plan)`: each framework's own check that needs it installed on this machine (e.g.
  Miles's own parse_args, from the checkout the cells' PYTHONPATH names), one line per rejected cell.

Caveats:
- It only looks; it starts nothing. What a framework needs is its adapter's `preflight` (a framework is probed in a
  child python3, never imported here).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from scripts.benchmark.contracts.plan import checked_cells
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.launch import ray_shell_problem, uses_ray_job_submit
from scripts.benchmark.runner.cell_command import find_executable_problem
from scripts.benchmark.runner.options import ExecuteOptions, given_name, harness_argv, needs_private_head
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


def check_can_execute(plan: dict[str, Any], *, skip_prepare: bool = False) -> list[str]:
    missing: list[str] = []
    cells = plan["cells"]
    needed = max((cell.get("gpus", {}).get("total", 0) for cell in cells), default=0)
    count, why = _gpu_count()
    if count is None:
        missing.append(why)
    elif count < needed:
        missing.append(f"the plan needs {needed} GPUs per cell, nvidia-smi lists {count}")
    for framework, mine in _cells_by_framework(cells).items():
        missing += registry.get(framework).preflight(mine)
    versions: dict[str, str | None] = {}
    missing += sglang_key_problems(cells, lambda framework: versions.setdefault("python3", installed_sglang_version()))
    return missing + _data_problems(plan, skip_prepare)


def _cells_by_framework(cells: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_framework: dict[str, list[dict[str, Any]]] = {}
    for cell in cells:
        by_framework.setdefault(cell["framework"], []).append(cell)
    return by_framework


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


def installed_check_rejections(plan: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """Each framework's own check that needs it installed here (e.g. Miles's own parse_args, from the checkout the
    cells' PYTHONPATH names), before any GPU time: (rejections "<cell>: <why>" under their check's failure sentence,
    unavailable reasons, "<title>: ok for N cell(s)" lines)."""
    rejected, unavailable, passed = [], [], []
    for check in registry.own_checks(checked_cells(plan), "installed"):
        if check.problems is None:
            unavailable.append(check.unavailable)
            continue
        lines = [f"{cell}: {problem}" for cell, problems in check.problems.items() for problem in problems]
        if lines:
            rejected.append(check.failure + ":\n  - " + "\n  - ".join(lines))
        else:
            passed.append(f"{check.title}: ok for {len(check.problems)} cell(s)")
    return rejected, unavailable, passed


def launch_problems(plan: dict[str, Any], options: ExecuteOptions, run_dir: Path) -> list[str]:
    """Every executable the run will start, and the run folder a Ray job submission must carry (one line each)."""
    problems: list[str] = []
    for step in [] if options.skip_prepare else steps_to_prepare(plan):
        if problem := find_executable_problem(harness_argv(step["argv"])):
            problems.append(
                f"prepare step {step['name']}: {problem} (it creates {step.get('creates')}; "
                "install it, create that path, or pass --skip-prepare)"
            )
    problems += _unknown_runtime_names(plan["cells"], options)
    for cell in plan["cells"]:
        problems += _cell_launch_problems(cell, options, run_dir)
    return sorted(set(problems))


def _unknown_runtime_names(cells: list[dict[str, Any]], options: ExecuteOptions) -> list[str]:
    """A --side-python / --side-prefix NAME that is neither a side nor a framework of the plan (a typo would
    otherwise run that side in the wrong environment)."""
    known = sorted({cell.get("side") or cell["framework"] for cell in cells} | {cell["framework"] for cell in cells})
    return [
        f"{option} {name}: the plan has no side or framework named {name!r} (it has {', '.join(known)})"
        for option, table in (("--side-python", options.pythons), ("--side-prefix", options.prefixes))
        for name in table
        if name not in known
    ]


def _cell_launch_problems(cell: dict[str, Any], options: ExecuteOptions, run_dir: Path) -> list[str]:
    problems: list[str] = []
    runtime = options.runtime(cell)
    if uses_ray_job_submit(cell["launch_argv"]) and (problem := ray_shell_problem(str(run_dir))):
        problems.append(f"cell {cell['id']}: run folder {problem}")
    if runtime.prefix:
        if problem := find_executable_problem(list(runtime.prefix)):
            problems.append(f"--side-prefix {given_name(options.prefixes, cell)}: {problem}")
        return problems
    if runtime.python and (problem := find_executable_problem([runtime.python])):
        problems.append(f"--side-python {given_name(options.pythons, cell)}: {problem}")
    argv = [runtime.python if runtime.python and w in ("python", "python3") else w for w in cell["launch_argv"]]
    if argv[0] == "ray":
        argv[0] = runtime.ray_argv()[-1]
    if problem := find_executable_problem(argv):
        problems.append(f"cell {cell['id']} launch_argv[0]: {problem}")
    if needs_private_head(cell, options) and (problem := find_executable_problem(runtime.ray_argv())):
        problems.append(
            f"cell {cell['id']} needs a private Ray head, but {problem} "
            f"(use --side-python {cell.get('side') or cell['framework']}=PATH of an environment with Ray, "
            "RAY_ADDRESS, or --ray none)"
        )
    return problems


def steps_to_prepare(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The preparation steps that will run: those whose `creates` is missing (or that are never skipped)."""
    return [
        step
        for step in plan.get("prepare") or []
        if not (step.get("creates") and step.get("skip_if_exists", True) and Path(step["creates"]).exists())
    ]
