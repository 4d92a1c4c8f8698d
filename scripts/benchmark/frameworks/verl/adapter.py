"""VERL as a `FrameworkAdapter` (frameworks/adapter.py): the one object the registry holds for it.

Everything VERL-specific that the planner, the runner and the readers need: its data conversion step (data.py), its
launch (launch.py), its parity knobs (parity_knobs.py, parity_sources.py), its FileLogger sink (sink.py,
learning.py), its strict Hydra composition (config.py), what a machine needs to run it, and the differences from any
other framework that the parity table declares.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from scripts.benchmark.frameworks.adapter import AdapterDefaults, CheckStage, LaunchContext, OwnCheck
from scripts.benchmark.frameworks.launch import FrameworkLaunch
from scripts.benchmark.frameworks.native_events import NoStepsError, SinkIssue, merge_native_events
from scripts.benchmark.frameworks.sglang_version import graph_key_in, version_tuple
from scripts.benchmark.frameworks.verl.data import converted_paths, prepare_step
from scripts.benchmark.frameworks.verl.launch import (
    VerlData,
    build_verl_launch,
    overrides_of,
    parameter_sync_step,
    tq_project_dir,
)
from scripts.benchmark.frameworks.verl.learning import LEARNING_KEYS, fill_verl_learning
from scripts.benchmark.frameworks.verl.parity_knobs import parse_verl
from scripts.benchmark.frameworks.verl.parity_sources import launch_words
from scripts.benchmark.frameworks.verl.recording import CODEC as RECORDING_CODEC
from scripts.benchmark.frameworks.verl.sink import COMPLETE_ANCHORS, verl_events, verl_record
from scripts.benchmark.spec import BenchmarkSpec

from miles.utils.bench_flops import ModelArch, verl_native_train_flops
from miles.utils.bench_metrics import RunContext, StepRecord

FA3_GRAPH_CAPTURE_BROKEN = (0, 5, 12)
"""From this SGLang release VERL's server defaults to flashinfer: FA3 CUDA-graph capture is broken
(sgl-project/sglang#22800)."""
CHECKOUT_ENV = "PYTHONPATH"
"""How a side's own checkout reaches VERL: its folder on the launch's PYTHONPATH (ahead of an installed verl)."""
_SGLANG_KEYS = (
    "cuda_graph_max_bs",
    "cuda_graph_max_bs_decode",
    "disable_piecewise_cuda_graph",
    "disable_prefill_cuda_graph",
)
_ALWAYS = {
    "completion_wait": "VERL's generate phase ends up to 2 s late per step (hard-coded poll_interval=2.0)",
    "cuda_graph_max_bs": "no cap in the launches: each SGLang release sizes its decode CUDA graphs by its own rule, "
    "so the largest decode batch run with a graph may differ (a larger one runs without); rollout.cuda_graph_max_bs "
    "pins both",
}
_DISAGGREGATED = {
    "rollout_memory_saver": "VERL always enables SGLang's memory saver; without colocation it only adds "
    "bookkeeping, no offload",
}
_AGAINST_MILES = {
    "client_concurrency": "small: both servers cap running requests at the same number; VERL queues the rest "
    "in SGLang, Miles in its client",
}
"""Notes that describe Miles's side too (each dict here and below named `..._MILES`): true of a Miles/VERL pair
only."""
_DISAGGREGATED_MILES = {
    "partial_rollout": "cannot be matched: VERL's separate_async always aborts the in-flight requests at the weight "
    "update and re-prefills them (prompt and tokens so far) under the new weights after the radix-cache flush. "
    "Miles's drain loop (train_async.py) has nothing in flight at the update; its continuous loop (--fully-async, "
    "retract) re-prefills its in-flight requests too, inside SGLang (back to the waiting queue) rather than by abort "
    "and resubmission from the client. Same lag bound (1 step; max_policy_lag says on which versions)",
    "loop_shape": "cannot be matched: Miles's drain loop (train_async.py) drains each batch (its rollout GPUs idle "
    "through the long tail and the update) while VERL keeps the pool busy with the next batch. Miles's continuous "
    "loop (--fully-async) keeps its pool busy too, but refills one prompt group at a time up to one batch in flight, "
    "buffers up to two more batches of finished groups (VERL submits a whole batch per step, up to two in flight, "
    "nothing buffered beyond them) and drops groups staler than the bound at each drain, where VERL's sampler waits "
    "for them (nothing dropped): Miles's dropped groups are generation work VERL does not waste",
    "max_policy_lag": "the same bound counted on different versions: VERL's sampler bounds the oldest weights a "
    "trajectory used (its partial rollouts keep the version each segment started under), Miles's continuous loop "
    "the version each sample finished under (SGLang stamps the engine's version at completion; a request retracted "
    "across an update is stamped with the newer one), so Miles can train tokens one version staler than VERL on the "
    "samples that spanned an update; the report's observed lag reads each side's own versions",
    "first_steps_composition": "VERL's first two steps train the fastest then the slowest prompts of two batches "
    "and it generates one batch more than it trains; Miles's drain loop trains the file's batches in order, and the "
    "report cuts those steps from the steady state. Miles's continuous loop trains the first prompt groups to finish "
    "at every step, so that pair trains different prompts at every step, not only the first two: its per-step work "
    "differs by the prompts' lengths, which medians over many steps and the per-token costs "
    "(generate_s_per_1k_response_tokens, train_s_per_1k_tokens) average out and a step-paired comparison does not",
    "weight_cpu_backup": "VERL's decoupled PPO (bypass_mode=False) swaps the training model through CPU to give "
    "every mini-batch the step's first weights for old log-probs (in VERL's old_logprob phase); Miles recomputes "
    "old log-probs once, with no copy. Avoiding it means rollout log-probs on both sides (another algorithm)",
}

ROLLOUT_WEIGHT_COPY_S = {
    "Qwen3-1.7B": (0.12, 0.74),
    "Qwen3-4B": (0.29, 1.79),
    "Qwen3-30B-A3B, TP-4 shard": (0.55, 3.35),
}
"""One save plus one restore of one GPU's bf16 rollout weights, into pinned and into pageable host memory, timed on
an H200 (driver 580.159.04, torch 2.11, 2026-12-05): seconds per step (pinned, pageable)."""
_COLOCATE_MILES = {
    "rollout_memory_release": "VERL launches its hybrid SGLang servers with enable_weights_cpu_backup=True, set after "
    "the cell's engine_kwargs so no override turns it off (async_sglang_server.py launch_server; without it VERL's "
    "naive weight update could not restore the weight buffers): each sleep after generation copies the rollout "
    "weights GPU->CPU (in VERL's generate phase) and each wake copies them back (in its weight_sync phase) before the "
    "update overwrites them; Miles drops them and reallocates. Measured per GPU per step, one save plus one restore "
    "(pinned to pageable host memory): "
    + ", ".join(f"{model} {low:g}-{high:g} s" for model, (low, high) in ROLLOUT_WEIGHT_COPY_S.items())
    + " (which host memory torch_memory_saver uses, and eight GPUs copying at once, not measured)",
}
_COLOCATE_PHASES_MILES = {
    "weight_sync": "VERL's includes restoring its rollout weights from CPU before the update overwrites them "
    "(enable_weights_cpu_backup, always on in its hybrid server: parity row rollout_memory_release); Miles's "
    "reallocates them with no copy",
}

# What VERL's separate_async books in each phase that Miles's train_async.py books elsewhere or never does.
_DISAGGREGATED_PHASES_MILES = {
    "old_logprob": "VERL's includes copying the training model to CPU and back for every mini-batch (decoupled "
    "PPO) and fetching the batch; Miles's is the log-prob forward alone",
    "rollout_wait": "Miles's includes handing the batch over and preprocessing it; VERL's fetch lands in its "
    "old_logprob and train phases",
    "weight_sync": "VERL's includes aborting the in-flight requests and resuming them; Miles's drain loop has nothing "
    "in flight, its continuous loop pauses them inside SGLang (retract)",
}


class VerlAdapter(AdapterDefaults):
    name = "verl"
    label = "VERL"
    runs_checkout = True
    sink_formats = ("verl-file-logger",)
    learning_keys = LEARNING_KEYS
    packages = {"verl": "verl"}
    recording_codec = RECORDING_CODEC
    module_extras = {
        "hydra": "verl",
        "omegaconf": "verl",
        "pyarrow": "verl",
        "orjson": "verl",
        "tensordict": "recording",
    }

    def prepare_steps(self, spec: BenchmarkSpec, ctx: LaunchContext) -> list[dict[str, Any]]:
        """The conversion of the prompt rows to VERL's parquet files (it reads the downloaded dataset)."""
        return [prepare_step(spec, ctx.output_dir / "data", ctx.run_py)]

    def build_launch(self, spec: BenchmarkSpec, backend: str, layout: str, ctx: LaunchContext) -> FrameworkLaunch:
        """A side with its own checkout (a VERL git worktree) runs its `verl` package: the checkout comes first on
        PYTHONPATH, so `python3 -m verl.trainer.main_ppo` and the local Ray it starts import it and its config."""
        train_file, val_file = converted_paths(spec, ctx.output_dir / "data")
        launch = build_verl_launch(spec, backend, layout, VerlData(train_file, val_file), ctx.recording)
        if ctx.side.root is None:
            return launch
        return dataclasses.replace(launch, env={**launch.env, CHECKOUT_ENV: ctx.side.root})

    def recording_path(self, spec: BenchmarkSpec, backend: str, layout: str, root: str) -> str | None:
        return tq_project_dir(spec, backend, layout, root)

    def replay_problems(self, spec: BenchmarkSpec, layout: str) -> list[str]:
        """separate_async samples parameter_sync_step batches per step and replays a step only when every one of its
        inner folders is there; a converted recording holds one batch per step."""
        sync = parameter_sync_step(spec, layout)
        if sync == 1:
            return []
        return [
            f"VERL replays {sync} batches per step here (parameter_sync_step = {sync} optimizer steps per step, "
            f"{layout}), a converted recording holds one per step: plan train-only colocated, or with "
            "batch.samples_per_optimizer_step = the samples per step"
        ]

    def plan_warnings(self, spec: BenchmarkSpec) -> list[str]:
        """VERL's launch_server picks flashinfer, not fa3, on SGLang >= 0.5.12 when the cell names no attention
        backend, because FA3 CUDA-graph capture is broken there (its comment, sgl-project/sglang#22800); the cells
        pass the spec's backend through engine_kwargs, which overrides that choice."""
        version = spec.rollout.sglang_versions.get(self.name, "0")
        if spec.rollout.attention_backend != "fa3" or version_tuple(version) < FA3_GRAPH_CAPTURE_BROKEN:
            return []
        return [
            f"rollout.attention_backend=fa3 on VERL's SGLang {version}: VERL 0.9.1 itself runs flashinfer on SGLang "
            ">= 0.5.12 because FA3 CUDA-graph capture is broken there (async_sglang_server.py, "
            "sgl-project/sglang#22800), "
            "and its cells pass fa3 over that choice; not checked on a GPU here: a VERL engine that fails to start "
            "or capture its graphs points at it (rollout.attention_backend: flashinfer runs both sides on "
            "flashinfer)"
        ]

    def recording_done(self, spec: BenchmarkSpec, backend: str, layout: str, root: str) -> str | None:
        last = f"{spec.run.num_steps}/{parameter_sync_step(spec, layout) - 1}"
        return f"{tq_project_dir(spec, backend, layout, root)}/{last}/meta.json"

    def native_train_flops(self, arch: ModelArch, seq_lens: list[int]) -> float | None:
        return verl_native_train_flops(arch, seq_lens)

    def parity_knobs(
        self, argv: list[str], backend: str, prepare_argv: list[str] | None, target: str | None = None
    ) -> dict[str, Any]:
        return parse_verl(argv, prepare_argv)

    def launch_words(self, knob: str, argv: list[str]) -> str | None:
        return launch_words(knob, argv)

    def inherent_differences(self, backend: str, layout: str, other: str) -> dict[str, str]:
        disaggregated = layout == "disaggregated"
        notes = {**_ALWAYS, **(_DISAGGREGATED if disaggregated else {})}
        if other == "miles":
            notes.update({**_AGAINST_MILES, **(_DISAGGREGATED_MILES if disaggregated else _COLOCATE_MILES)})
        return notes

    def incomparable_phases(self, layout: str, other: str) -> dict[str, str]:
        if other != "miles":
            return {}
        return dict(_DISAGGREGATED_PHASES_MILES if layout == "disaggregated" else _COLOCATE_PHASES_MILES)

    def read_sink(self, paths: list[Path], ctx: RunContext) -> list[StepRecord]:
        issues: list[SinkIssue] = []
        events = verl_events(paths, issues)
        if not events:
            raise NoStepsError(f"no verl step metrics found in {', '.join(str(p) for p in paths)}")
        steps = merge_native_events(events, issues, complete_anchors=COMPLETE_ANCHORS)
        return fill_verl_learning([verl_record(steps[s], ctx) for s in sorted(steps)], ctx)

    def preflight(self, cells: list[dict[str, Any]]) -> list[str]:
        roots = sorted({cell["env"][CHECKOUT_ENV] for cell in cells if (cell.get("env") or {}).get(CHECKOUT_ENV)})
        missing = [f"the VERL checkout {root} has no verl/__init__.py on this machine" for root in roots
                   if not (Path(root) / "verl" / "__init__.py").is_file()]  # fmt: skip
        if roots or _importable():
            return missing
        return ["verl is not importable by python3 (pip install 'verl[sglang]==0.9.1' on the GPU node)"]

    def own_checks(self, cells: list[dict[str, Any]], stage: CheckStage) -> OwnCheck | None:
        """Every cell's overrides composed against VERL 0.9.1's real config in strict mode (`plan` stage)."""
        if stage != "plan":
            return None
        from scripts.benchmark.frameworks.verl.config import find_verl_root

        title, failure = "VERL strict compose", "VERL overrides do not compose against VERL 0.9.1"
        root = find_verl_root()
        if root is None:
            where = os.environ.get("VERL_ISOLATED_DIR") or ".cache/verl-0.9.1 or an installed verl"
            return OwnCheck(title, failure, None, unavailable=f"no VERL 0.9.1 config found in {where}")
        from scripts.benchmark.frameworks.verl.config import verl_override_problems

        problems = {cell["id"]: verl_override_problems(overrides_of(cell["argv"]), root) for cell in cells}
        return OwnCheck(title, failure, problems)

    def sglang_keys(self, argv: list[str]) -> list[str]:
        keys = [t.partition("=")[0].rsplit(".", 1)[-1] for t in argv if ".engine_kwargs.sglang." in t]
        return [key for key in keys if key in _SGLANG_KEYS]

    def sglang_accepts(self, key: str, version: str) -> bool:
        return key == graph_key_in(key, version)


def _importable() -> bool:
    """Probed in a child python3, never imported here (the wheel's top-level `scripts`/`tests` would shadow ours)."""
    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('verl') else 1)"
    python = shutil.which("python3")
    return bool(python) and subprocess.run([python, "-c", probe], capture_output=True, timeout=60).returncode == 0


ADAPTER = VerlAdapter()
