"""What the planner, the runner and the readers need of a framework, as one small typed protocol.

Every framework folder (`frameworks/<name>/`) exports one object implementing `FrameworkAdapter`; the registry
(frameworks/registry.py) maps names to them. Nothing outside those folders and the registry names a framework: a
plan is two sides (contracts/sides.py), each an adapter plus its target.

- `LaunchContext`: what a launch is built against besides the spec: the plan folder, the run.py the prepare steps
  call, the side (its target), and the per-framework settings of the command line (`settings[adapter.name]`).
- `OwnCheck`: the result of a framework's own acceptance check (problems per cell, or why it could not run here).
- `FrameworkAdapter`: build a cell's launch, read its parity knobs back, read its native sink into step records,
  name its learning signals, run its own checks, preflight a machine, report its versions and targets, read and
  write its rollout dump (`recording_codec`).
- `protocol_problems(adapter)`: the members an object lacks or has of another type than the protocol declares
  (the registry refuses such an adapter when it registers, rather than fail in a command later).

Caveats:
- `read_sink` returns records with their `learning` block set but not derived (frameworks/sinks.py derives TFLOPs,
  MFU and rates for every framework alike).
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, Union, get_args, get_origin, get_type_hints, runtime_checkable

from scripts.benchmark.contracts.sides import Side
from scripts.benchmark.frameworks.launch import FrameworkLaunch, RecordingPass
from scripts.benchmark.frameworks.recorded import RecordingCodec
from scripts.benchmark.spec import BenchmarkSpec

from miles.utils.bench_flops import ModelArch
from miles.utils.bench_metrics import RunContext, StepRecord

CheckStage = Literal["plan", "installed"]
"""`plan`: runs after every plan with what the harness holds (a config tree); `installed`: needs the framework
installed on this machine (--check-miles, the preflight of a real run)."""


@dataclass(frozen=True)
class LaunchContext:
    output_dir: Path
    run_py: str
    side: Side
    settings: Mapping[str, Any] = field(default_factory=dict)
    """The command line's per-framework settings, by adapter name (a checkout path, a prefix)."""
    recording: RecordingPass | None = None
    """Train-only plans: whether this launch records the rollout or replays it, and where it is kept."""

    def own_settings(self, name: str, default: Any = None) -> Any:
        return self.settings.get(name, default)


@dataclass(frozen=True)
class OwnCheck:
    title: str
    """What the check is called where it is reported ("VERL strict compose")."""
    failure: str
    """The sentence that introduces its problems when a cell fails."""
    problems: dict[str, list[str]] | None
    """Problems per cell id ([] when accepted); None when the tool is not available here (see `unavailable`)."""
    unavailable: str = ""


@runtime_checkable
class FrameworkAdapter(Protocol):
    name: str
    """The registry key, the default side name and the prefix of today's cell ids."""
    label: str
    """What reports print for it."""
    sink_formats: tuple[str, ...]
    """The plan sink formats its reader reads."""
    learning_keys: Mapping[str, Sequence[str]]
    """Learning signal -> the native keys it is read from, first present wins."""
    incomplete_flags: tuple[str, ...]
    """Step flags that mean a step is not final while the cell still runs (besides `incomplete:*`)."""
    note_flags: tuple[str, ...]
    """Step flags (or their beginnings) every healthy run of it carries: how a value is read, not a defect."""
    packages: Mapping[str, str]
    """Distribution -> module of what the environment record probes for its version."""
    module_extras: Mapping[str, str]
    """Top-level module -> the pyproject extra that installs it (errors.py names it when missing)."""
    runs_checkout: bool
    """Whether a side may name its own checkout (`Side.root`) for this framework's launch."""
    recording_codec: RecordingCodec | None
    """Reads and writes its rollout dump as a canonical recording (frameworks/recording.py); None: it has none."""

    def default_target(self) -> str | None: ...

    def settings(self, options: Mapping[str, Any]) -> Any:
        """Its launch settings from the command line's options (a checkout path); ValueError when one is invalid."""
        ...

    def native_train_flops(self, arch: ModelArch, seq_lens: list[int]) -> float | None:
        """Train FLOPs of these sequences by the framework's own formula (`run.py flops` compares it with ours)."""
        ...

    def targets(self) -> tuple[str, ...]:
        """The targets a side of this framework may name (empty: none)."""
        ...

    def prepare_steps(self, spec: BenchmarkSpec, ctx: LaunchContext) -> list[dict[str, Any]]:
        """Harness steps its cells need before they start (beyond the shared downloads)."""
        ...

    def checkout(self, side: Side, settings: Mapping[str, Any]) -> str | None:
        """The folder the side's launches run (its checkout, from the side or the command line's settings); None
        when it runs an installed package, which its target names."""
        ...

    def cannot_plan(self, backend: str, side: Side) -> list[str]:
        """Why a cell of this backend cannot be planned for the side's target ([] when it can)."""
        ...

    def recording_path(self, spec: BenchmarkSpec, backend: str, layout: str, root: str) -> str | None:
        """Where its launches of this cell write or read the recording under `root`, in its own format."""
        ...

    def recording_done(self, spec: BenchmarkSpec, backend: str, layout: str, root: str) -> str | None:
        """The file a complete recording of the spec's steps has last written (what the record step creates)."""
        ...

    def replay_problems(self, spec: BenchmarkSpec, layout: str) -> list[str]:
        """Why its cells cannot replay a converted recording of this spec in this layout ([] when they can)."""
        ...

    def plan_warnings(self, spec: BenchmarkSpec) -> list[str]:
        """Risks of its launches of this spec that its own code points at and no CPU check can settle (the plan
        prints them; they do not stop it)."""
        ...

    def build_launch(self, spec: BenchmarkSpec, backend: str, layout: str, ctx: LaunchContext) -> FrameworkLaunch: ...

    def launch_problems(self, launch: FrameworkLaunch) -> list[str]:
        """Problems of a built launch that the framework would refuse (unknown flags)."""
        ...

    def parity_knobs(
        self, argv: list[str], backend: str, prepare_argv: list[str] | None, target: str | None = None
    ) -> dict[str, Any]:
        """The canonical parity knobs read back from a launch's framework argv, for the side's target (what a
        release bundles, such as its engine version, is not in the argv)."""
        ...

    def metric_sink(self, sink_format: str) -> str | None:
        """The parity table's metric_sink value for a launch writing this plan sink; None: read it from the argv."""
        ...

    def launch_words(self, knob: str, argv: list[str]) -> str | None:
        """The literal words of `argv` that set `knob` ("" when none does); None when it has no source table."""
        ...

    def inherent_differences(self, backend: str, layout: str, other: str) -> dict[str, str]:
        """Knob -> note: asymmetries declared when this framework is compared with the framework named `other`; a
        note that describes the other framework's behaviour is returned for that framework only."""
        ...

    def absent_knobs(self, backend: str, layout: str) -> dict[str, str]:
        """Knob -> why its launches cannot have it (its parser leaves it out); any other knob it leaves out while
        the other side reads it is a mismatch."""
        ...

    def incomparable_phases(self, layout: str, other: str) -> dict[str, str]:
        """Phase -> why this framework's phase is not the same quantity as the framework named `other`'s in `layout`
        (the report shows it, marked, and leaves its gap out of the attribution)."""
        ...

    def read_sink(self, paths: list[Path], ctx: RunContext) -> list[StepRecord]:
        """Step records (learning block set, fields not derived) from its sink files; NoStepsError when empty."""
        ...

    def refused(self, launch_argv: list[str]) -> list[str]:
        """Words of a (hand-edited) launch the harness refuses to run."""
        ...

    def preflight(self, cells: list[dict[str, Any]]) -> list[str]:
        """What this machine lacks to run these cells of this framework."""
        ...

    def own_checks(self, cells: list[dict[str, Any]], stage: CheckStage) -> OwnCheck | None:
        """Its own acceptance check of the planned cells at that stage; None when it has none there."""
        ...

    def sglang_keys(self, argv: list[str]) -> list[str]:
        """The version-spelled SGLang CUDA-graph keys the launch passes (decode cap, prefill switch)."""
        ...

    def sglang_accepts(self, key: str, version: str) -> bool: ...


def protocol_problems(adapter: object) -> list[str]:
    """What `adapter` lacks of `FrameworkAdapter`, or has of another type: one line per member, [] when none."""
    problems = []
    for name, hint in get_type_hints(FrameworkAdapter).items():
        if not hasattr(adapter, name):
            problems.append(f"{name} is missing")
        elif not _fits(getattr(adapter, name), hint):
            problems.append(f"{name} is {type(getattr(adapter, name)).__name__}, not {_hint_text(hint)}")
    for name, declared in vars(FrameworkAdapter).items():
        if name.startswith("_") or not inspect.isfunction(declared):
            continue
        method = getattr(adapter, name, None)
        parameters = list(inspect.signature(declared).parameters)[1:]
        if method is None:
            problems.append(f"{name}() is missing")
        elif not callable(method):
            problems.append(f"{name} is {type(method).__name__}, not a method")
        elif not _takes(method, parameters):
            problems.append(f"{name}{inspect.signature(method)} cannot be called with ({', '.join(parameters)})")
    return problems


def _takes(method: Any, parameters: list[str]) -> bool:
    try:
        inspect.signature(method).bind(*parameters)
    except TypeError:
        return False
    return True


def _fits(value: Any, hint: Any) -> bool:
    """Whether `value` is of the annotation `hint`, as far as it can be told at run time (a protocol that is not
    runtime-checkable is taken on trust)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_fits(value, arg) for arg in args)
    if hint is None or hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, tuple) and all(_fits(item, args[0]) for item in value)
    if origin is not None:
        return isinstance(value, origin)
    try:
        return isinstance(value, hint)
    except TypeError:
        return True


def _hint_text(hint: Any) -> str:
    if get_origin(hint) in (Union, types.UnionType):
        return " | ".join(_hint_text(arg) for arg in get_args(hint))
    if hint is type(None):
        return "None"
    return str(hint) if get_origin(hint) else getattr(hint, "__name__", str(hint))


class AdapterDefaults:
    """Neutral answers for the optional parts of the protocol; an adapter overrides what its framework has."""

    learning_keys: Mapping[str, Sequence[str]] = {}
    incomplete_flags: tuple[str, ...] = ()
    note_flags: tuple[str, ...] = ()
    packages: Mapping[str, str] = {}
    module_extras: Mapping[str, str] = {}
    runs_checkout: bool = False
    recording_codec: RecordingCodec | None = None

    def default_target(self) -> str | None:
        return None

    def settings(self, options: Mapping[str, Any]) -> Any:
        return None

    def native_train_flops(self, arch: ModelArch, seq_lens: list[int]) -> float | None:
        return None

    def targets(self) -> tuple[str, ...]:
        return ()

    def prepare_steps(self, spec: BenchmarkSpec, ctx: LaunchContext) -> list[dict[str, Any]]:
        return []

    def checkout(self, side: Side, settings: Mapping[str, Any]) -> str | None:
        return side.root

    def cannot_plan(self, backend: str, side: Side) -> list[str]:
        return []

    def recording_path(self, spec: BenchmarkSpec, backend: str, layout: str, root: str) -> str | None:
        return None

    def recording_done(self, spec: BenchmarkSpec, backend: str, layout: str, root: str) -> str | None:
        return None

    def replay_problems(self, spec: BenchmarkSpec, layout: str) -> list[str]:
        return []

    def plan_warnings(self, spec: BenchmarkSpec) -> list[str]:
        return []

    def launch_problems(self, launch: FrameworkLaunch) -> list[str]:
        return []

    def metric_sink(self, sink_format: str) -> str | None:
        return None

    def launch_words(self, knob: str, argv: list[str]) -> str | None:
        return None

    def inherent_differences(self, backend: str, layout: str, other: str) -> dict[str, str]:
        return {}

    def absent_knobs(self, backend: str, layout: str) -> dict[str, str]:
        return {}

    def incomparable_phases(self, layout: str, other: str) -> dict[str, str]:
        return {}

    def refused(self, launch_argv: list[str]) -> list[str]:
        return []

    def preflight(self, cells: list[dict[str, Any]]) -> list[str]:
        return []

    def own_checks(self, cells: list[dict[str, Any]], stage: CheckStage) -> OwnCheck | None:
        return None

    def sglang_keys(self, argv: list[str]) -> list[str]:
        return []

    def sglang_accepts(self, key: str, version: str) -> bool:
        return True
