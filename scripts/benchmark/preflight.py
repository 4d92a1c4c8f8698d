"""Can this machine execute a plan? The check a real (non dry-run) invocation makes before touching a GPU.

- `check_can_execute(plan) -> list[str]`: one human-readable line per missing thing: nvidia-smi / enough GPUs, the
  Miles train.py path, `ray` on PATH, VERL importable by the cells' python3, the checkpoint and the prompt data.
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


def _gpu_count() -> tuple[int | None, str]:
    if shutil.which("nvidia-smi") is None:
        return None, "nvidia-smi not found on PATH (no NVIDIA driver / GPUs on this machine)"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if out.returncode != 0:
        return None, f"nvidia-smi -L exited {out.returncode}: {out.stderr.strip()[:200]}"
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU ")), ""


def _verl_importable() -> bool:
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('verl') else 1)"
    python = shutil.which("python3")
    return bool(python) and subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0


def check_can_execute(plan: dict[str, Any]) -> list[str]:
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
    spec = plan["spec"]
    if not Path(spec["model"]["hf_checkpoint"]).exists():
        missing.append(f"model.hf_checkpoint {spec['model']['hf_checkpoint']} does not exist")
    if not Path(spec["data"]["prompt_data"]).is_file():
        missing.append(f"data.prompt_data {spec['data']['prompt_data']} does not exist")
    return missing
