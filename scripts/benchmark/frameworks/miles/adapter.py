"""Miles as a `FrameworkAdapter` (frameworks/adapter.py): the one object the registry holds for it.

Everything Miles-specific that the planner, the runner and the readers need: its launch (launch.py) at a target
(versions.py), its flag inventory check (flags.py), its parity knobs (parity_knobs.py, parity_sources.py), its sinks
(sink.py, train_steps.py, learning.py), its own parser (parser_check.py), what a machine needs to run it, and the
differences from any other framework that the parity table declares.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scripts.benchmark.contracts.sides import Side
from scripts.benchmark.errors import UserError
from scripts.benchmark.frameworks.adapter import AdapterDefaults, CheckStage, LaunchContext, OwnCheck
from scripts.benchmark.frameworks.launch import FrameworkLaunch
from scripts.benchmark.frameworks.miles.flags import flag_problems, load_inventory
from scripts.benchmark.frameworks.miles.launch import (
    MilesPaths,
    build_miles_launch,
    miles_cuda_graph_flag,
    recording_template,
)
from scripts.benchmark.frameworks.miles.learning import MILES_LEARNING_KEYS, fill_miles_learning
from scripts.benchmark.frameworks.miles.parity_knobs import parse_miles
from scripts.benchmark.frameworks.miles.parity_sources import launch_words
from scripts.benchmark.frameworks.miles.recording import CODEC as RECORDING_CODEC
from scripts.benchmark.frameworks.miles.sink import (
    COMPLETE_ANCHORS,
    find_refused_flags,
    miles_events,
    normalize_miles_steps,
)
from scripts.benchmark.frameworks.miles.tracking_sink import backend_problems
from scripts.benchmark.frameworks.miles.versions import (
    DEFAULT_MILES_TARGET,
    MILES_TARGETS,
    miles_target,
    schedule_problems,
    target_problems,
)
from scripts.benchmark.frameworks.native_events import NoStepsError, SinkIssue, merge_native_events
from scripts.benchmark.spec import BenchmarkSpec

from miles.utils.bench_flops import ModelArch, miles_native_train_flops
from miles.utils.bench_metrics import RunContext, StepRecord

_CUDA_GRAPH_FLAGS = ("--sglang-cuda-graph-max-bs", "--sglang-cuda-graph-max-bs-decode")
_ALWAYS = {
    "sampling_seed": "none on cost per token; response lengths vary run to run on both sides (compare medians)",
    "rollout_engine_version": "each framework pins its own SGLang release (scheduler, kernels and defaults differ): "
    "a rollout-time gap includes the engine version",
}
_AGAINST_VERL = {
    "metric_sink": "none: a Miles with the benchmark tracking backend (the in-tree target) writes one JSON line per "
    "log call to its own file (BENCH_TRACKING_DIR), a released Miles prints its perf lines to stdout whatever the "
    "harness does (plan.json's sink.format says which); VERL's FileLogger appends one JSON line per step from the "
    "driver (milliseconds)",
    "prefill_cuda_graphs": "colocated, both prefill without graphs (Miles turns them off under --colocate against "
    "NVLS memory, the VERL cell passes SGLang's switch). Disaggregated, each SGLang captures its default: Miles's "
    "0.5.16 breakable graphs (segmented capture, no torch.compile), VERL's 0.5.12 piecewise graphs (torch.compile "
    "pieces split at attention); the prefill cost of the two is not measured here and lands in rollout time",
}
"""Notes that describe VERL's side too: true of a Miles/VERL pair only."""
TRACKING_SINK_WORDS = "benchmark tracking backend (BENCH_TRACKING_DIR)"
"""The metric_sink row of a cell whose sink is the tracking backend's folder."""
_FSDP = {
    "training_seed": "none: weights come from the checkpoint and no dropout is active",
    "cuda_allocator": "memory only (fragmentation, OOM margin); Miles's stock FSDP setting is kept",
}
_MEGATRON_COLOCATE = {
    "weight_cpu_backup": "Miles's colocated Megatron actor copies weights to CPU every step: extra time in the "
    "Miles step (train_wait)",
}


class MilesAdapter(AdapterDefaults):
    name = "miles"
    label = "Miles"
    sink_formats = ("miles-stdout", "miles-event-log", "miles-tracking")
    learning_keys = MILES_LEARNING_KEYS
    incomplete_flags = ("miles_shift:no_next_step",)
    note_flags = ("miles_shift:no_next_step", "miles_shift:post_train_untimed")
    packages = {"miles": "miles"}
    recording_codec = RECORDING_CODEC
    runs_checkout = True

    def default_target(self) -> str | None:
        return DEFAULT_MILES_TARGET

    def settings(self, options: Mapping[str, Any]) -> MilesPaths:
        """--miles-root / --megatron-root (absolute: the cells run in their own folders), else $MILES_ROOT /
        defaults; ValueError naming the option that is not absolute."""
        for option in ("miles_root", "megatron_root"):
            value = options.get(option)
            if value is not None and not value.startswith("/"):
                flag = "--" + option.replace("_", "-")
                raise ValueError(f"{flag} must be an absolute path on the GPU node, got {value!r}")
        paths = MilesPaths.from_env()
        return MilesPaths(
            miles_root=options.get("miles_root") or paths.miles_root,
            megatron_root=options.get("megatron_root") or paths.megatron_root,
        )

    def native_train_flops(self, arch: ModelArch, seq_lens: list[int]) -> float | None:
        return miles_native_train_flops(arch, seq_lens)

    def targets(self) -> tuple[str, ...]:
        return tuple(MILES_TARGETS)

    def cannot_plan(self, backend: str, side: Side) -> list[str]:
        return target_problems(miles_target(side.target or DEFAULT_MILES_TARGET), backend)

    def build_launch(self, spec: BenchmarkSpec, backend: str, layout: str, ctx: LaunchContext) -> FrameworkLaunch:
        target = miles_target(ctx.side.target or DEFAULT_MILES_TARGET)
        if layout == "disaggregated" and (problems := schedule_problems(target, spec.placement.async_loop.schedule)):
            raise UserError(problems[0])
        paths = ctx.own_settings(self.name) or MilesPaths()
        if ctx.side.root is not None:
            paths = dataclasses.replace(paths, miles_root=ctx.side.root)
        return build_miles_launch(spec, backend, layout, paths, target, ctx.side.name, ctx.recording)

    def checkout(self, side: Side, settings: Mapping[str, Any]) -> str | None:
        return side.root or (settings.get(self.name) or MilesPaths()).miles_root

    def recording_path(self, spec: BenchmarkSpec, backend: str, layout: str, root: str) -> str | None:
        return f"{root}/miles"

    def recording_done(self, spec: BenchmarkSpec, backend: str, layout: str, root: str) -> str | None:
        return recording_template(root).format(rollout_id=spec.run.num_steps - 1)

    def launch_problems(self, launch: FrameworkLaunch) -> list[str]:
        return flag_problems(launch.argv, launch.backend, load_inventory())

    def parity_knobs(
        self, argv: list[str], backend: str, prepare_argv: list[str] | None, target: str | None = None
    ) -> dict[str, Any]:
        bundled = miles_target(target).sglang_version if target in MILES_TARGETS else None
        return parse_miles(argv, backend, load_inventory(), bundled_sglang=bundled)

    def metric_sink(self, sink_format: str) -> str | None:
        """The tracking backend is switched on by the environment (BENCH_TRACKING_DIR), not by a flag."""
        return TRACKING_SINK_WORDS if sink_format == "miles-tracking" else None

    def launch_words(self, knob: str, argv: list[str]) -> str | None:
        return launch_words(knob, argv)

    def inherent_differences(self, backend: str, layout: str, other: str) -> dict[str, str]:
        by_backend = _FSDP if backend == "fsdp" else (_MEGATRON_COLOCATE if layout == "colocate" else {})
        return {**_ALWAYS, **by_backend, **(_AGAINST_VERL if other == "verl" else {})}

    def read_sink(self, paths: list[Path], ctx: RunContext) -> list[StepRecord]:
        issues: list[SinkIssue] = []
        events = miles_events(paths, issues)
        if not events:
            raise NoStepsError(f"no miles step metrics found in {', '.join(str(p) for p in paths)}")
        steps = merge_native_events(events, issues, complete_anchors=COMPLETE_ANCHORS)
        return fill_miles_learning(normalize_miles_steps(steps, ctx), paths, ctx)

    def refused(self, launch_argv: list[str]) -> list[str]:
        return find_refused_flags(launch_argv)

    def preflight(self, cells: list[dict[str, Any]]) -> list[str]:
        missing = []
        train_py = next((word for word in cells[0].get("argv") or [] if word.endswith(".py")), "train.py")
        if not Path(train_py).is_file():
            missing.append(f"Miles train.py not found at {train_py} (set MILES_ROOT or --miles-root)")
        if shutil.which("ray") is None:
            missing.append("ray not found on PATH (Miles cells run as Ray job submissions)")
        return missing + _tracking_backend_problems(cells)

    def own_checks(self, cells: list[dict[str, Any]], stage: CheckStage) -> OwnCheck | None:
        """The installed Miles's own parse_args on every cell (`installed` stage only)."""
        if stage != "installed":
            return None
        from scripts.benchmark.frameworks.miles.parser_check import MilesParserUnavailable

        title, failure = "Miles's own parser", "the installed Miles's own parser rejects the plan"
        try:
            problems = parser_rejections(cells)
        except MilesParserUnavailable as exc:
            return OwnCheck(title, failure, None, unavailable=str(exc))
        return OwnCheck(title, failure, problems)

    def sglang_keys(self, argv: list[str]) -> list[str]:
        return [token for token in argv if token in _CUDA_GRAPH_FLAGS]

    def sglang_accepts(self, key: str, version: str) -> bool:
        return key == "--sglang-cuda-graph-max-bs" or key == miles_cuda_graph_flag(version)


def _tracking_backend_problems(cells: list[dict[str, Any]]) -> list[str]:
    """Each checkout whose cells read the tracking sink must have the backend (refused here, not after the run)."""
    roots = []
    for cell in cells:
        entry = next((word for word in cell.get("argv") or [] if word.endswith(".py")), None)
        if (cell.get("sink") or {}).get("format") == "miles-tracking" and entry and Path(entry).is_file():
            roots += [Path(entry).parent] if Path(entry).parent not in roots else []
    return [problem for root in roots for problem in backend_problems(root)]


def parser_rejections(cells: list[dict[str, Any]], python: str | None = None) -> dict[str, list[str]]:
    """Miles's own verdict on the cells, before any GPU time: --hf-checkpoint points at a folder holding only the
    preset's config.json (the model may not be downloaded yet); Miles is where the cells' job finds it.
    Raises MilesParserUnavailable when that Miles cannot be imported by `python` (default: python3 on PATH)."""
    from scripts.benchmark.frameworks.miles.parser_check import (
        MilesParserUnavailable,
        parser_launches,
        run_miles_parser,
    )

    if not cells:
        return {}
    python = python or shutil.which("python3")
    if python is None:
        raise MilesParserUnavailable("python3 not found on PATH to run Miles's parser")
    miles_path = _miles_path(cells[0])
    if miles_path and not Path(miles_path[0]).is_dir():
        raise MilesParserUnavailable(
            f"the Miles checkout {miles_path[0]} (--miles-root) is not a folder on this machine"
        )
    with tempfile.TemporaryDirectory(prefix="miles-preflight-") as tmp:
        launches = parser_launches(cells, Path(tmp))
        verdicts = run_miles_parser(launches, miles_path, python)
    return {
        cell["id"]: [] if verdict["accepted"] else [verdict["error"]]
        for cell, verdict in zip(cells, verdicts, strict=True)
    }


def _miles_path(cell: dict[str, Any]) -> list[str]:
    """The PYTHONPATH of the cell's Ray job submission (--runtime-env-json) (the Miles and Megatron checkouts)."""
    argv = cell["launch_argv"]
    runtime_env = json.loads(argv[argv.index("--runtime-env-json") + 1])
    return [path for path in runtime_env["env_vars"].get("PYTHONPATH", "").split(os.pathsep) if path]


ADAPTER = MilesAdapter()
