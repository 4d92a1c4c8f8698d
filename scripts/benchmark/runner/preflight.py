"""Can this machine execute a plan? The check a real (non dry-run) invocation makes before touching a GPU.

- `check_can_execute(plan) -> list[str]`: one human-readable line per missing thing: nvidia-smi / enough GPUs, the
  Miles train.py path, `ray` on PATH, VERL importable by the cells' python3, the checkpoint and the prompt data
  (each either present, or downloadable by the plan's `hf download` step: the `hf` CLI on PATH), and an installed
  SGLang that accepts the SGLang keys the cells pass (`sglang_check`).
  An empty list means the plan can run here.

Caveats:
- It only looks; it starts nothing. VERL is probed in a child python3 with importlib.util.find_spec, never imported
  here (the wheel's top-level `scripts`/`tests` packages would shadow ours).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

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
    needed = max((cell["gpus"]["total"] for cell in cells), default=0)
    count, why = _gpu_count()
    if count is None:
        missing.append(why)
    elif count < needed:
        missing.append(f"the plan needs {needed} GPUs per cell, nvidia-smi lists {count}")
    miles = [cell for cell in cells if cell["framework"] == "miles"]
    if miles:
        train_py = miles[0]["argv"][1]
        if not Path(train_py).is_file():
            missing.append(f"Miles train.py not found at {train_py} (set MILES_ROOT or --miles-root)")
        if shutil.which("ray") is None:
            missing.append("ray not found on PATH (Miles cells run as `ray job submit`)")
    if any(cell["framework"] == "verl" for cell in cells) and not _verl_importable():
        missing.append("verl is not importable by python3 (pip install 'verl[sglang]==0.9.1' on the GPU node)")
    versions: dict[str, str | None] = {}
    missing += sglang_key_problems(cells, lambda framework: versions.setdefault("python3", installed_sglang_version()))
    spec, steps = plan["spec"], {step["name"]: step for step in plan.get("prepare") or []}
    for field, path, step in (
        ("model.hf_checkpoint", spec["model"]["hf_checkpoint"], steps.get("download-model")),
        ("data.prompt_data", spec["data"]["prompt_data"], steps.get("download-dataset")),
    ):
        if Path(path).exists():
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
