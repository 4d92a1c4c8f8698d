"""The benchmark's Miles cell as Miles's own launcher starts it: `scripts/run_mcore_fsdp.py --mode benchmark` (its
`execute_benchmark` entrypoint, patch 0003) takes the train argv the benchmark plans for a preset from here and
hands it to Miles's `execute_train`, as every Miles launcher does.

Why this way round (the launcher asks the planner; the runner does not execute cells through `execute_train`):
`execute_train` first stops every SGLang, Ray, Miles and Redis process of the node by name (`pkill -9`) and starts
its own Ray head; the runner stops only the processes it started (pid and start time) on its private Ray head. A
Miles user gets the benchmark's exact command from Miles's launcher; the runner keeps its own launch of it.

- `launcher_train(preset, backend, colocate, miles_root, megatron_root, output_dir) -> LauncherTrain`: what
  `execute_train` needs. The train args are the plan's argv after the entry script, quoted for the shell line
  `execute_train` builds. For Megatron, `execute_train` puts Miles's model args for `megatron_model_type` in front
  of them; the plan's argv sets every one of those flags again, to the same value (the last flag wins), which the
  launcher test proves per preset.
- The tracking backend's folder is `<output_dir>/sink/miles-tracking` (BENCH_TRACKING_DIR), read back with
  `run.py ingest`; execute_train's own runtime environment supplies the rest of what the plan's carries.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from scripts.benchmark.frameworks.miles.launch import ENTRY_POINTS, MilesPaths, build_miles_launch
from scripts.benchmark.spec import load_preset, with_overrides

from miles.utils.bench_tracking import BENCH_TRACKING_DIR_ENV

MEGATRON_MODEL_TYPES = {
    "smoke": "qwen3-0.6B",
    "qwen3-1.7b-base": "qwen3-1.7B",
    "qwen3-4b": "qwen3-4B",
}
"""Preset -> the Miles model script (scripts/models/<type>.py) of its architecture, which execute_train requires
for a Megatron launch. Not qwen3-30b-a3b: Miles's qwen3-30B-A3B script also sets --moe-router-dtype fp32,
--position-embedding-type and --rotary-percent, which the benchmark's launch leaves unset, so the launcher's command
would not be the plan's."""


@dataclass(frozen=True)
class LauncherTrain:
    """The arguments of Miles's `execute_train` for one benchmark cell."""

    train_script: str
    train_args: str
    num_gpus_per_node: int
    megatron_model_type: str | None
    extra_env_vars: dict[str, str]


def launcher_train(
    preset: str, backend: str, colocate: bool, miles_root: str, megatron_root: str, output_dir: str
) -> LauncherTrain:
    """The preset's Miles cell for this backend and layout, as the benchmark plans it for this checkout."""
    if preset not in MEGATRON_MODEL_TYPES:
        raise ValueError(f"benchmark preset {preset!r} is not one of {', '.join(sorted(MEGATRON_MODEL_TYPES))}")
    layout = "colocate" if colocate else "disaggregated"
    spec = with_overrides(load_preset(preset), layout=layout)
    launch = build_miles_launch(spec, backend, layout, MilesPaths(miles_root=miles_root, megatron_root=megatron_root))
    entry = launch.argv.index(f"{miles_root}/{ENTRY_POINTS[layout]}")
    tracking = launch.sink.get("format") == "miles-tracking"
    env = {BENCH_TRACKING_DIR_ENV: str(Path(output_dir) / "sink" / "miles-tracking")} if tracking else {}
    return LauncherTrain(
        train_script=ENTRY_POINTS[layout],
        train_args=shlex.join(launch.argv[entry + 1 :]),
        num_gpus_per_node=spec.gpus_per_node(layout),
        megatron_model_type=MEGATRON_MODEL_TYPES[preset] if backend == "megatron" else None,
        extra_env_vars=env,
    )
