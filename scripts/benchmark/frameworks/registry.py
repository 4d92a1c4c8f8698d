"""The framework registry: adapter name -> adapter, and how a command line's words become the sides of a plan.

- `register(adapter)` (refused, naming each member, unless it implements the adapter protocol) /
  `unregister(name)`, `get(name)` (ValueError naming the known ones), `names()`, `label_of(name)` (the name itself
  when unknown), `by_sink_format(format)` (ValueError when no adapter reads it).
- `own_checks(cells, stage)`: each framework's own acceptance check of its cells (adapter.own_checks).
- `DEFAULT_PAIR`: the (candidate, reference) frameworks of folders written before sides existed.
- `side_arg(role, text)`: a `NAME[@TARGET]` argument (--candidate / --reference) as a `Side`; `make_pair(candidate,
  reference)` names and labels the two so they differ (Miles against Miles: the reference is `miles-base`, both
  labels carry their target).
- `pair_example(candidate, reference)`, `no_reference_note(candidate)`: the words of parity.md that belong to a pair
  (or to a plan without a reference), never another framework's.
- `option_pair(compare_verl, miles_version)`, `option_runtimes(...)`: the one place the historical options
  (--compare-verl, --miles-version, and the aliases --miles-python, ... of --side-python NAME=PATH, ...) map onto
  sides and frameworks; `default_sides()` is the
  candidate alone; `settings(options)` each adapter's launch settings from the command line.

The two real entries are registered on import; a test registers its own adapter with `register` and takes it away
with `unregister`.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from scripts.benchmark.contracts.sides import Role, Side, SidePair
from scripts.benchmark.errors import declare_extras
from scripts.benchmark.frameworks.adapter import CheckStage, FrameworkAdapter, OwnCheck, protocol_problems
from scripts.benchmark.frameworks.miles import ADAPTER as _MILES
from scripts.benchmark.frameworks.verl import ADAPTER as _VERL

DEFAULT_PAIR: tuple[str, str] = ("miles", "verl")
_PAIR_EXAMPLES = {
    DEFAULT_PAIR: "Example: Miles's `--optimizer adam` is Adam with decoupled weight decay, VERL's default `AdamW`: "
    "both `adamw`.",
}
_ADAPTERS: dict[str, FrameworkAdapter] = {}


def register(adapter: FrameworkAdapter) -> None:
    """Add a framework; TypeError naming every member of the protocol (frameworks/adapter.py) it lacks or has of
    another type, ValueError when its name or a sink format is already taken."""
    if problems := protocol_problems(adapter):
        name = getattr(adapter, "name", type(adapter).__name__)
        raise TypeError(f"framework adapter {name!r} does not implement FrameworkAdapter: " + "; ".join(problems))
    if adapter.name in _ADAPTERS and _ADAPTERS[adapter.name] is not adapter:
        raise ValueError(f"a framework named {adapter.name!r} is already registered")
    clash = [f for a in _ADAPTERS.values() if a is not adapter for f in a.sink_formats if f in adapter.sink_formats]
    if clash:
        raise ValueError(f"sink formats {clash} are already read by another framework")
    _ADAPTERS[adapter.name] = adapter
    declare_extras(dict(adapter.module_extras))


def unregister(name: str) -> None:
    _ADAPTERS.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(_ADAPTERS)


def get(name: str) -> FrameworkAdapter:
    if name not in _ADAPTERS:
        raise ValueError(f"unknown framework {name!r}: one of {', '.join(_ADAPTERS)}")
    return _ADAPTERS[name]


def incomparable_phases(candidate: str, reference: str, layout: str) -> dict[str, str]:
    """Phase -> why the two frameworks' values are different quantities in `layout`; {} for one framework or an
    unregistered one (its phases are taken as comparable)."""
    if candidate == reference:
        return {}
    pairs = [(_ADAPTERS.get(candidate), reference), (_ADAPTERS.get(reference), candidate)]
    return {
        phase: why
        for a, other in pairs
        if a is not None
        for phase, why in a.incomparable_phases(layout, other).items()
    }


def note_flags() -> tuple[str, ...]:
    """Every registered framework's note flags (how a healthy run's values are read, not defects)."""
    return tuple(dict.fromkeys(flag for adapter in _ADAPTERS.values() for flag in adapter.note_flags))


def label_of(name: str) -> str:
    adapter = _ADAPTERS.get(name)
    return adapter.label if adapter is not None else name


def sink_formats() -> tuple[str, ...]:
    return tuple(f for adapter in _ADAPTERS.values() for f in adapter.sink_formats)


def by_sink_format(format: str) -> FrameworkAdapter:
    """The adapter that reads this plan sink format; an unknown format is an error, never a default reader."""
    for adapter in _ADAPTERS.values():
        if format in adapter.sink_formats:
            return adapter
    raise ValueError(f"sink.format {format!r} is not one of {sink_formats()}")


def own_checks(cells: list[dict[str, Any]], stage: CheckStage) -> list[OwnCheck]:
    """Each framework's own check of its cells at that stage, for the frameworks that have one there."""
    checks = []
    for framework in dict.fromkeys(cell["framework"] for cell in cells):
        check = get(framework).own_checks([cell for cell in cells if cell["framework"] == framework], stage)
        if check is not None:
            checks.append(check)
    return checks


def pair_example(candidate: str, reference: str) -> str:
    """The example sentence of parity.md's legend for a pair of frameworks ("" when it has none)."""
    return _PAIR_EXAMPLES.get((candidate, reference), "")


def no_reference_note(candidate: str) -> str:
    """What parity.md says when the plan has no reference side: the default candidate's usual partner, or none."""
    if candidate == DEFAULT_PAIR[0]:
        return "No VERL cells planned (run with --compare-verl): nothing to compare."
    return "No reference side planned (run with --reference NAME): nothing to compare."


def side_arg(role: Role, text: str, root: str | None = None) -> Side:
    """`NAME[@TARGET]` (and a checkout) as a side of that role (target: the adapter's default); ValueError when the
    framework or target is unknown, or the framework runs no checkout of its own."""
    framework, at, target = text.partition("@")
    adapter = get(framework)
    known = adapter.targets()
    if at and not known:
        raise ValueError(
            f"{adapter.label} has no target to choose (it runs the {adapter.label} installed where the cell runs): "
            f"give {framework} alone, not {text!r}"
        )
    if at and not target:
        raise ValueError(
            f"{text!r} names no target after '@': give {framework}@TARGET (one of {', '.join(known)}) or {framework}"
        )
    if target and target not in known:
        raise ValueError(f"unknown {adapter.label} target {target!r}: one of {', '.join(known)}")
    if root is not None and not adapter.runs_checkout:
        raise ValueError(f"--{role}-root: {adapter.label} runs its installed package, not a checkout")
    if root is not None and not root.startswith("/"):
        raise ValueError(f"--{role}-root {root!r} must be an absolute path on the GPU node (e.g. /ci/head)")
    target = target or adapter.default_target()
    return Side(role=role, name=framework, framework=framework, label=adapter.label, target=target, root=root)


def make_pair(candidate: Side, reference: Side | None) -> SidePair:
    """The pair with distinct names: a reference of the candidate's framework is `<name>-base`, and both labels then
    carry their target (the only thing that tells them apart in a report)."""
    if reference is None or reference.framework != candidate.framework:
        return SidePair(candidate=candidate, reference=reference)
    if (candidate.target, candidate.root) == (reference.target, reference.root):
        raise ValueError(
            f"both sides run {candidate.label} {candidate.target}: give the reference another target or checkout"
        )
    by_checkout = candidate.target == reference.target

    def labelled(side: Side) -> str:
        if by_checkout:
            return f"{side.label} {PurePosixPath(side.root).name if side.root else 'default checkout'}"
        return f"{side.label} {side.target}" if side.target else side.label

    return SidePair(
        candidate=candidate.model_copy(update={"label": labelled(candidate)}),
        reference=reference.model_copy(update={"name": f"{reference.name}-base", "label": labelled(reference)}),
    )


def default_sides() -> SidePair:
    """The candidate alone (the registry's default candidate at its default target): a plan that compares nothing."""
    return make_pair(side_arg("candidate", DEFAULT_PAIR[0]), None)


def settings(options: dict[str, Any]) -> dict[str, Any]:
    """Each framework's launch settings from the command line's options, by name; ValueError when one is invalid."""
    return {name: adapter.settings(options) for name, adapter in _ADAPTERS.items()}


def option_runtimes(
    miles_python: str | None, verl_python: str | None, miles_prefix: str | None, verl_prefix: str | None
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """--miles-python/--verl-python and --miles-prefix/--verl-prefix as (interpreters, prefixes) by framework."""
    return (
        {DEFAULT_PAIR[0]: miles_python, DEFAULT_PAIR[1]: verl_python},
        {DEFAULT_PAIR[0]: miles_prefix, DEFAULT_PAIR[1]: verl_prefix},
    )


def option_pair(compare_verl: bool, miles_version: str | None) -> SidePair:
    """--compare-verl / --miles-version: Miles (at that version) as the candidate, VERL as the reference if asked."""
    candidate = side_arg("candidate", f"{DEFAULT_PAIR[0]}@{miles_version}" if miles_version else DEFAULT_PAIR[0])
    return make_pair(candidate, side_arg("reference", DEFAULT_PAIR[1]) if compare_verl else None)


register(_MILES)
register(_VERL)
