"""The benchmark's Miles cell as Miles's own launcher starts it: `scripts/run_mcore_fsdp.py --mode benchmark` (its
`execute_benchmark` entrypoint, patch 0003) takes the train argv the benchmark plans for a preset from here and
hands it to Miles's `execute_train`, as every Miles launcher does.

Why this way round (the launcher asks the planner; the runner does not execute cells through `execute_train`):
`execute_train` first stops every SGLang, Ray, Miles and Redis process of the node by name (`pkill -9`) and starts
its own Ray head; the runner stops only the processes it started (pid and start time) on its private Ray head. A
Miles user gets the benchmark's exact command from Miles's launcher; the runner keeps its own launch of it.

- `launcher_train(args, given, miles_root) -> LauncherTrain`: what `execute_train` needs, from the launcher's
  `ScriptArgs`. Every launcher option is either used (`HONOURED`) or refused when the user set it (`REFUSED`, one
  sentence each, exit 2): `given` names the options set on the command line (click's parameter sources), or None
  where there is no command line (a test calling the entrypoint), in which case an option set to other than its
  default counts as given.
- The train args are the plan's argv after the entry script, quoted for the shell line `execute_train` builds. For
  Megatron, `execute_train` puts Miles's model args for `megatron_model_type` in front of them; the plan's argv sets
  every one of those flags again, to the same value (the last flag wins), which the launcher test proves per preset.
- The tracking backend's folder is `<output_dir>/<run_id>/sink/miles-tracking` (BENCH_TRACKING_DIR), read back with
  `run.py ingest`; execute_train's own runtime environment supplies the rest of what the plan's carries.
"""

from __future__ import annotations

import dataclasses
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from scripts.benchmark.frameworks.miles.launch import ENTRY_POINTS, MilesPaths, build_miles_launch
from scripts.benchmark.spec import BenchmarkSpec, load_preset, preset_names, with_overrides

from miles.utils.bench_tracking import BENCH_TRACKING_DIR_ENV

MEGATRON_MODEL_TYPES = {
    "smoke": "qwen3-0.6B",
    "qwen3-1.7b-base": "qwen3-1.7B",
    "qwen3-4b": "qwen3-4B",
}
"""Preset -> the Miles model script (scripts/models/<type>.py) of its architecture, which execute_train puts in
front of a Megatron launch."""
MEGATRON_NEEDS = {
    "qwen3-30b-a3b": "Miles's qwen3-30B-A3B model script, which execute_train puts in front of every Megatron "
    "launch, also sets --moe-router-dtype fp32, --position-embedding-type rope and --rotary-percent 1.0, which the "
    "benchmark's launch leaves to Megatron's defaults (and VERL's sibling does not set): the launcher would run "
    "another cell than the plan. Under Megatron it runs through run.py (the plan's own launch) until the spec sets "
    "the router dtype on both sides",
}
"""Preset -> why the launcher mode cannot run its Megatron cell, and what that would need."""

HONOURED = {
    "mode": "selects this mode",
    "benchmark_preset": "the preset whose Miles cell runs",
    "train_backend": "the cell's backend",
    "colocate": "the cell's layout (colocate, or disaggregated: train_async.py)",
    "num_gpus_per_node": "the GPUs per node of the plan",
    "hardware": "the GPUs per node when --num-gpus-per-node is not given, as in every mode",
    "model_dir": "where the preset's checkpoint is: <model_dir>/<its folder>",
    "data_dir": "where DAPO-math-17k is: <data_dir>/dapo-math-17k/dapo-math-17k.jsonl",
    "megatron_path": "Megatron-LM on the job's PYTHONPATH",
    "run_id": "the run's folder, <output_dir>/<run_id>",
    "output_dir": "the run's folder, <output_dir>/<run_id>",
    "cuda_core_dump": "execute_train's, as in every mode",
    "extra_env_vars": "execute_train's, as in every mode",
    "megatron_model_type": "the preset's Miles model script; a different one is refused",
}
"""Launcher options the benchmark mode uses, and how."""
REFUSED = {
    "use_ref": "the benchmark's GRPO has no reference model (its KL coefficients are 0, as in VERL's sibling launch); "
    "a reference would add its forward pass to every step",
    "model_name": "the preset fixes the model: choose it with --benchmark-preset",
    "num_nodes": "the launcher mode runs one node; several run through run.py on a Ray cluster or Slurm "
    "(docs/benchmark/multi-node.md)",
    "enable_eval": "the benchmark runs no evaluation: it would be timed work VERL's sibling launch does not do",
    "multi_eval": "the benchmark runs no evaluation: it would be timed work VERL's sibling launch does not do",
    "true_on_policy": "it changes both engines' numerics, which VERL's sibling launch does not",
    "dynamic_sampling": "it changes what a step trains on, which must match VERL's sibling launch",
    "extra_args": "a flag the plan does not set would break the parity the plan proves against VERL; change the spec "
    "instead (run.py --dry-run shows the launch)",
}
"""Launcher options the benchmark mode does not use: refused when set, with why."""


@dataclass(frozen=True)
class LauncherTrain:
    """The arguments of Miles's `execute_train` for one benchmark cell."""

    train_script: str
    train_args: str
    num_gpus_per_node: int
    megatron_model_type: str | None
    extra_env_vars: dict[str, str]


def given_options() -> set[str] | None:
    """The launcher options set on the command line or through their environment variables, from click's context;
    None outside a command line."""
    try:
        import click
        from click.core import ParameterSource
    except ImportError:  # pragma: no cover - typer brings click
        return None
    context = click.get_current_context(silent=True)
    if context is None:
        return None
    defaults = (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)
    return {name for name in context.params if context.get_parameter_source(name) not in defaults}


def _defaults(args) -> dict[str, object]:
    values = {}
    for field in dataclasses.fields(args):
        if field.default is not dataclasses.MISSING:
            values[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            values[field.name] = field.default_factory()
    return values


def _node_gpus(args) -> int:
    """What the launcher takes for the node's GPUs when --num-gpus-per-node is not given."""
    from miles.utils.external_utils.command_utils import NUM_GPUS_OF_HARDWARE

    return NUM_GPUS_OF_HARDWARE[args.hardware]


def option_problems(args, given: set[str] | None, megatron_model_type: str | None) -> list[str]:
    """One sentence per launcher option the user set that the benchmark mode cannot honour."""
    defaults = _defaults(args)
    chosen = given if given is not None else {n for n, v in defaults.items() if getattr(args, n) != v}
    problems = [f"--{name.replace('_', '-')}: {why}" for name, why in REFUSED.items() if name in chosen]
    unknown = sorted({f.name for f in dataclasses.fields(args)} - HONOURED.keys() - REFUSED.keys())
    problems += [f"--{name.replace('_', '-')}: the benchmark mode does not know this option" for name in unknown]
    asked = args.megatron_model_type if given is not None and "megatron_model_type" in given else None
    if asked and asked != megatron_model_type:
        problems.append(f"--megatron-model-type {asked}: the preset's model script is {megatron_model_type}")
    return problems


def _spec(args, given: set[str] | None) -> BenchmarkSpec:
    """The preset with this launcher's checkpoint and data folders, and its GPUs per node when they were asked for
    (else the preset's, which must fit the node's)."""
    layout = "colocate" if args.colocate else "disaggregated"
    spec = load_preset(args.benchmark_preset)
    asked = "num_gpus_per_node" in given if given is not None else args.num_gpus_per_node != _node_gpus(args)
    spec = with_overrides(spec, layout=layout, gpus_per_node=args.num_gpus_per_node if asked else None)
    if spec.gpus_per_node(layout) > args.num_gpus_per_node:
        raise ValueError(
            f"preset {args.benchmark_preset} needs {spec.gpus_per_node(layout)} GPUs per node, the node has "
            f"{args.num_gpus_per_node} (--hardware {args.hardware})"
        )
    data = spec.model_dump()
    data["model"]["hf_checkpoint"] = f"{args.model_dir}/{Path(spec.model.hf_checkpoint).name}"
    prompts = Path(spec.data.prompt_data)
    data["data"]["prompt_data"] = f"{args.data_dir}/{prompts.parent.name}/{prompts.name}"
    return BenchmarkSpec.model_validate(data)


def refuse(problems: list[str]) -> None:
    for problem in problems:
        print(f"error: benchmark mode: {problem}", file=sys.stderr)
    raise SystemExit(2)


def launcher_train(args, given: set[str] | None, miles_root: str) -> LauncherTrain:
    """The preset's Miles cell for this backend and layout, as the benchmark plans it for this checkout; refused
    (exit 2, every reason) when an option asks for what the benchmark mode cannot do."""
    preset, backend = args.benchmark_preset, args.train_backend
    if preset not in preset_names():
        refuse([f"--benchmark-preset {preset}: not one of {', '.join(preset_names())}"])
    if backend == "megatron" and preset in MEGATRON_NEEDS:
        refuse([f"--benchmark-preset {preset} --train-backend megatron: {MEGATRON_NEEDS[preset]}"])
    megatron_model_type = MEGATRON_MODEL_TYPES[preset] if backend == "megatron" else None
    problems = option_problems(args, given, megatron_model_type)
    try:
        spec = _spec(args, given)
    except ValueError as error:  # also pydantic's ValidationError: the GPUs do not fit the preset's layout
        problems.append(f"--num-gpus-per-node {args.num_gpus_per_node}: {error}")
    if problems:
        refuse(problems)
    layout = spec.placement.layout
    paths = MilesPaths(miles_root=miles_root, megatron_root=args.megatron_path)
    launch = build_miles_launch(spec, backend, layout, paths)
    entry = launch.argv.index(f"{miles_root}/{ENTRY_POINTS[layout]}")
    tracking = launch.sink.get("format") == "miles-tracking"
    folder = Path(args.output_dir) / args.run_id / "sink" / "miles-tracking"
    return LauncherTrain(
        train_script=ENTRY_POINTS[layout],
        train_args=shlex.join(launch.argv[entry + 1 :]),
        num_gpus_per_node=spec.gpus_per_node(layout),
        megatron_model_type=megatron_model_type,
        extra_env_vars={BENCH_TRACKING_DIR_ENV: str(folder)} if tracking else {},
    )
