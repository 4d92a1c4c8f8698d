"""Does the SGLang installed for each framework accept the SGLang keys its cells pass? (part of preflight)

- `installed_sglang_version(python)`: the sglang distribution's version in that interpreter (importlib.metadata in a
  child; sglang itself is never imported), or None.
- `sglang_key_problems(cells, installed)`: one line per key of a cell spelled for another SGLang (the decode
  CUDA-graph cap, the prefill-graph switch). Each adapter finds the keys its launch passes (`sglang_keys`) and says
  which spellings an SGLang version accepts (`sglang_accepts`): VERL hands engine_kwargs.sglang.* to the ServerArgs
  dataclass, which refuses an unknown field; Miles's CLI still parses --sglang-cuda-graph-max-bs as a deprecated
  alias after the 0.5.14 rename.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from typing import Any

from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.sglang_version import graph_key_in
from scripts.benchmark.runner.process import capture_output


def installed_sglang_version(python: str = "python3") -> str | None:
    interpreter = shutil.which(python)
    if interpreter is None:
        return None
    probe = "import importlib.metadata as m\ntry: print(m.version('sglang'))\nexcept m.PackageNotFoundError: pass"
    out = capture_output([interpreter, "-c", probe], timeout_s=60)
    return (out or "").strip() or None


def sglang_key_problems(cells: list[dict[str, Any]], installed: Callable[[str], str | None]) -> list[str]:
    """`installed(framework)` is the SGLang version that framework's interpreter has (None: not installed)."""
    problems = []
    for cell in cells:
        adapter = registry.get(cell["framework"])
        keys = adapter.sglang_keys(cell["argv"])
        if not keys:
            continue
        version = installed(cell["framework"])
        if version is None:
            problems.append(
                f"{cell['id']}: passes SGLang's {keys[0]} but no sglang is installed for {cell['framework']}"
            )
            continue
        for key in keys:
            if adapter.sglang_accepts(key, version):
                continue
            field = key.removeprefix("--sglang-").replace("-", "_")
            what = "the cap" if "max_bs" in field else "that switch"
            problems.append(
                f"{cell['id']}: passes SGLang's {key}, which sglang {version} (installed for {cell['framework']}) "
                f"does not accept; it names {what} {graph_key_in(field, version)} "
                f'(renamed in 0.5.14): set rollout.sglang_versions.{cell["framework"]}: "{version}" in the spec and '
                "plan again"
            )
    return problems
