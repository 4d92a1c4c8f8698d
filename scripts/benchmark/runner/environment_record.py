"""environment.json of a cell repeat: the hardware and software a measurement was taken on.

- `read_gpus()`: GPU model, count, memory and driver via `nvidia-smi --query-gpu`, plus the CUDA version the driver
  reports (nvidia-smi's header); None with a reason when nvidia-smi is absent or fails.
- `probe_packages(interpreter_argv)`: versions and git commits of torch, sglang, megatron-core, transformers, ray
  and every registered framework's packages (its adapter's `packages`), plus the CUDA and NCCL versions torch was
  built with, read by RUNNING the framework's interpreter (through its launch prefix) on a small script that uses
  importlib.metadata and reads files. The frameworks are never imported into the harness, and the probe imports
  none of them either (it reads torch/version.py as text).
- `build_environment_record(...)`: the whole record; every missing fact is null and listed in "missing" with why.
  `sglang` names the framework's SGLang version and the ServerArgs field of its decode CUDA-graph cap.

Caveats:
- A commit is known only for a source checkout (editable install inside a git work tree) or a pip install from git
  (direct_url.json); a wheel from an index has none.
- The NCCL version is the nvidia-nccl wheel's version when torch uses one, else null (a system NCCL is not probed).
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
from collections.abc import Mapping, Sequence
from typing import Any

from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.sglang_version import cuda_graph_max_bs_key
from scripts.benchmark.runner.process import capture_output

PACKAGES: dict[str, str] = {
    "torch": "torch",
    "sglang": "sglang",
    "megatron-core": "megatron.core",
    "transformers": "transformers",
    "ray": "ray",
    **{dist: module for name in registry.names() for dist, module in registry.get(name).packages.items()},
}
"""Distribution -> module probed in every cell's interpreter: the shared stack, then each registered framework's."""

# Runs inside the framework's interpreter: stdlib only, imports no framework package.
_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, os, re, subprocess, sys
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]  # what the framework sees, not the cwd
packages = json.loads(sys.argv[1])
out = {"python": sys.version.split()[0], "executable": sys.executable, "packages": {}}
def commit_of(dist, module):
    try:
        direct = dist.read_text("direct_url.json") if dist else None
        if direct:
            vcs = json.loads(direct).get("vcs_info") or {}
            if vcs.get("commit_id"):
                return vcs["commit_id"]
    except Exception:
        pass
    try:
        top = module.split(".")[0]
        spec = iu.find_spec(top)
        where = list(spec.submodule_search_locations or [])[:1] or [os.path.dirname(spec.origin)]
        if re.search(r"[/\\](site|dist)-packages[/\\]", where[0]):
            return None  # an installed copy: a git repo around it (e.g. a venv inside a checkout) is not its source
        r = subprocess.run(["git", "-C", where[0], "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or None if r.returncode == 0 else None
    except Exception:
        return None
for name, module in packages.items():
    entry = {"version": None, "commit": None}
    try:
        dist = md.distribution(name)
        entry["version"] = dist.version
    except Exception:
        dist = None
    entry["commit"] = commit_of(dist, module)
    if entry["version"] is None and entry["commit"] is None:
        entry["missing"] = "not installed in this interpreter"
    out["packages"][name] = entry
try:
    spec = iu.find_spec("torch")
    text = open(os.path.join(list(spec.submodule_search_locations)[0], "version.py")).read()
    for key in ("cuda", "git_version", "hip"):
        m = re.search(r"^%s\s*(?::\s*\S+\s*)?=\s*'([^']*)'" % key, text, re.M)
        out["torch_" + key] = m.group(1) if m else None
except Exception:
    pass
for nccl in ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"):
    try:
        out["nccl"] = md.version(nccl)
        break
    except Exception:
        pass
print(json.dumps(out))
"""


def read_gpus() -> dict[str, Any]:
    if shutil.which("nvidia-smi") is None:
        return {"gpus": None, "missing": "nvidia-smi not found on PATH"}
    query = capture_output(
        ["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"],
        timeout_s=30,
    )
    if query is None:
        return {"gpus": None, "missing": "nvidia-smi --query-gpu failed"}
    gpus = []
    for line in query.strip().splitlines():
        index, name, memory, driver = (part.strip() for part in line.split(",")[:4])
        gpus.append({"index": int(index), "name": name, "memory_total_mib": float(memory), "driver": driver})
    header = capture_output(["nvidia-smi"], timeout_s=30) or ""
    cuda = header.split("CUDA Version:", 1)[1].split()[0] if "CUDA Version:" in header else None
    return {"gpus": gpus, "driver_cuda_version": cuda}


def probe_packages(
    interpreter_argv: Sequence[str], *, env: Mapping[str, str] | None = None, timeout_s: float = 120.0
) -> dict[str, Any]:
    """Run the probe in the framework's interpreter (with the cell's environment, for PYTHONPATH)."""
    argv = [*interpreter_argv, "-c", _PROBE, json.dumps(PACKAGES)]
    out = capture_output(argv, timeout_s=timeout_s, env=env)
    if out is None:
        return {"packages": None, "missing": f"could not run the interpreter probe: {' '.join(interpreter_argv)}"}
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"packages": None, "missing": "the interpreter probe printed no JSON"}


def _sglang_facts(packages: dict[str, Any]) -> dict[str, Any]:
    """The SGLang this framework runs and the name its ServerArgs gives the decode CUDA-graph cap."""
    version = ((packages.get("packages") or {}).get("sglang") or {}).get("version")
    try:
        key = cuda_graph_max_bs_key(version) if version else None
    except ValueError:
        key = None
    return {"version": version, "cuda_graph_max_bs_key": key}


def build_environment_record(*, framework: str, interpreter_argv: Sequence[str], packages: dict[str, Any]) -> dict:
    gpu_info = read_gpus()
    gpus = gpu_info.get("gpus")
    missing = {k: v for k, v in (("gpus", gpu_info.get("missing")), ("packages", packages.get("missing"))) if v}
    for name, entry in (packages.get("packages") or {}).items():
        if entry.get("missing"):
            missing[f"packages.{name}"] = entry["missing"]
    if packages.get("packages") is not None and packages.get("nccl") is None:
        missing["nccl"] = "no nvidia-nccl wheel in the framework's interpreter"
    return {
        "framework": framework,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "interpreter": list(interpreter_argv),
        "gpu_model": gpus[0]["name"] if gpus else None,
        "gpu_count": len(gpus) if gpus is not None else None,
        "gpus": gpus,
        "driver": gpus[0]["driver"] if gpus else None,
        "cuda_driver": gpu_info.get("driver_cuda_version"),
        "cuda_runtime": packages.get("torch_cuda"),
        "nccl": packages.get("nccl"),
        "torch_git_version": packages.get("torch_git_version"),
        "python": packages.get("python"),
        "packages": packages.get("packages"),
        "sglang": _sglang_facts(packages),
        "missing": missing,
    }
