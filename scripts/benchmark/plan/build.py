"""Build and write the plan of one benchmark invocation: cells, prepare steps, per-cell scripts and the parity proof.

- `PlanOptions`: backends, layout, output_dir, the `sides` (a candidate and optionally a reference, each a
  registered framework at a target: contracts/sides.py), the per-framework command-line settings (by adapter name,
  e.g. checkout paths) and the run.py path the prepare steps call.
- `build_plan(spec, preset, options, repeats) -> Plan`: plan.json content (shared contract: schema_version, spec,
  spec_hash, preset, sides, targets {side name: target}, prepare, cells, each with its `side` and the launch its side's
  adapter built, `repeats`: what `execute` runs unless told otherwise, and `origin`: the run folder and harness
  folder its paths name, which `execute` moves to its own: runner/relocate.py) and the parity pairs. Every launch is
  checked by its adapter (flags it would refuse); parity rows come from the emitted launches parsed back. A parity,
  flag or target error raises PlanError, but the Plan (with the failing parity rows) is attached so it can still be
  written for review.
- `prepare` (in order): `download-model` and `download-dataset` (`hf download`; only when the spec names
  `model.hf_repo` / `data.hf_repo`), then each side's adapter's own steps (e.g. a data conversion). Each step has
  `creates` + `skip_if_exists` (a present model or dataset is not fetched again) and `needed_by` (the frameworks
  whose cell scripts run it: the downloads for every side, an adapter's step for its framework only).
- `write_plan(plan, output_dir)`: plan.json, cells/<id>.sh (runnable, set -euo pipefail, defines BENCH_CELL_DIR),
  parity.json, parity.md; a train-only plan also recording/record.sh (plan/train_only.py).
- Train-only (spec run.mode train-only, plan/train_only.py): every cell replays one recorded rollout; the recording
  pass and the conversions are prepare steps after the side's own ones, and plan.json's `recording` names it.

Caveats:
- A launch that submits a Ray job carries `ray_head_argv` (the Ray head it needs); the cell script starts it in its
  own session and stops only that process group.
- Secrets never enter a plan: env holds only the fixed values built here.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.benchmark.common.redaction import Redactor, find_plan_secrets
from scripts.benchmark.contracts.parity import ParityFile, ParityPair, parity_text
from scripts.benchmark.contracts.plan import launch_digest, plan_json_text, plan_origin
from scripts.benchmark.contracts.sides import Side, SidePair
from scripts.benchmark.errors import UserError
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.adapter import LaunchContext
from scripts.benchmark.frameworks.launch import (
    FrameworkLaunch,
    RecordingPass,
    quote,
    ray_entrypoint_guard,
    render_argv,
    uses_ray_job_submit,
)
from scripts.benchmark.plan import train_only
from scripts.benchmark.plan.parity import ParityError, ParitySide, build_parity, parity_file, parity_markdown
from scripts.benchmark.spec import Backend, BenchmarkSpec, Layout, spec_hash, spec_json, steady_state_warnings

RUN_PY = Path(__file__).resolve().parents[1] / "run.py"


class PlanError(ValueError):
    def __init__(self, message: str, plan: Plan | None = None):
        super().__init__(message)
        self.plan = plan


@dataclass(frozen=True)
class PlanOptions:
    backends: tuple[Backend, ...]
    layout: Layout
    output_dir: Path
    sides: SidePair = field(default_factory=registry.default_sides)
    settings: Mapping[str, Any] = field(default_factory=dict)
    run_py: str = str(RUN_PY)
    recording: RecordingPass | None = None
    """Train-only plans: the recording every cell replays (set by build_plan)."""

    def context(self, side: Side, recording: RecordingPass | None = None) -> LaunchContext:
        return LaunchContext(
            output_dir=self.output_dir,
            run_py=self.run_py,
            side=side,
            settings=self.settings,
            recording=recording or self.recording,
        )


@dataclass
class Plan:
    data: dict[str, Any]
    parity: ParityFile
    title: str
    sides: SidePair


def _plan_cell(spec: BenchmarkSpec, launch: FrameworkLaunch) -> dict[str, Any]:
    layout = launch.layout
    cell = {
        "id": launch.cell_id,
        "framework": launch.framework,
        "side": launch.side or launch.framework,
        "backend": launch.backend,
        "layout": layout,
        "argv": launch.argv,
        "launch_argv": launch.launch_argv,
        "env": launch.env,
        "sink": launch.sink,
        "gpus": {
            "train": spec.train_gpus(layout),
            "rollout": spec.rollout_gpus(layout),
            "total": spec.total_gpus(layout),
            "per_node": spec.gpus_per_node(layout),
            "nodes": spec.run.nodes,
        },
        "num_steps": spec.run.num_steps,
        "optimizer_steps_per_step": spec.batch.optimizer_steps_per_step,
        "max_response_tokens": spec.lengths.max_response,
        "model_config": spec.model.config_path(),
        "script": f"cells/{launch.cell_id}.sh",
    }
    if launch.ray_head_argv:
        cell["ray_head_argv"] = launch.ray_head_argv
    return cell


def _frameworks(sides: SidePair) -> list[str]:
    return list(dict.fromkeys(side.framework for side in sides.sides()))


def download_steps(spec: BenchmarkSpec, needed_by: list[str]) -> list[dict[str, Any]]:
    """`hf download` of the model and the dataset, skipped when already present."""
    steps = []
    if spec.model.hf_repo:
        argv = ["hf", "download", spec.model.hf_repo, "--local-dir", spec.model.hf_checkpoint]
        creates = str(Path(spec.model.hf_checkpoint) / "config.json")
        steps.append({"name": "download-model", "argv": argv, "creates": creates, "skip_if_exists": True})
    if spec.data.hf_repo:
        local_dir = str(Path(spec.data.prompt_data).parent)
        argv = ["hf", "download", "--repo-type", "dataset", spec.data.hf_repo, "--local-dir", local_dir]
        steps.append(
            {"name": "download-dataset", "argv": argv, "creates": spec.data.prompt_data, "skip_if_exists": True}
        )
    return [{**step, "needed_by": list(needed_by)} for step in steps]


def prepare_steps(spec: BenchmarkSpec, options: PlanOptions) -> list[dict[str, Any]]:
    """In order: model download, dataset download (every side), then each framework's own steps (its side only)."""
    steps = download_steps(spec, _frameworks(options.sides))
    names = {step["name"] for step in steps}
    for side in options.sides.sides():
        for step in registry.get(side.framework).prepare_steps(spec, options.context(side)):
            if step["name"] not in names:
                names.add(step["name"])
                steps.append({**step, "needed_by": [side.framework]})
    return steps


def cell_prepare_steps(cell: dict[str, Any], prepare: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The prepare steps a cell's own script runs: those its framework needs (all of them without `needed_by`)."""
    return [step for step in prepare if cell["framework"] in step.get("needed_by", [cell["framework"]])]


def _own_prepare_argv(side: Side, prepare: list[dict[str, Any]]) -> list[str] | None:
    """The argv of the first prepare step only this side's framework needs (what its parity reader may read)."""
    return next((step["argv"] for step in prepare if step.get("needed_by") == [side.framework]), None)


def _side_launches(spec, backend, options, errors) -> list[FrameworkLaunch] | None:
    """One launch per side for this backend, or None (with the reasons in `errors`) when a side cannot plan it."""
    launches = []
    for side in options.sides.sides():
        adapter = registry.get(side.framework)
        problems = adapter.cannot_plan(backend, side)
        if problems:
            errors += problems
            return None
        built = adapter.build_launch(spec, backend, options.layout, options.context(side))
        launch = dataclasses.replace(built, side=side.name)
        errors += [f"{launch.cell_id}: {p}" for p in adapter.launch_problems(launch)]
        launches.append(launch)
    return launches


def _parity_pair(launches, options: PlanOptions, prepare, errors) -> ParityPair:
    (candidate, reference), sides = launches, options.sides
    parity_sides = [
        ParitySide(
            registry.get(side.framework),
            launch.argv,
            _own_prepare_argv(side, prepare),
            side.target,
            side.root,
            launch.sink.get("format"),
        )
        for side, launch in ((sides.candidate, candidate), (sides.reference, reference))
    ]
    try:
        rows, error = build_parity(*parity_sides, candidate.backend, options.layout), None
    except ParityError as exc:
        rows, error = exc.rows, str(exc)
        errors.append(f"parity {error}")
    return ParityPair(
        backend=candidate.backend,
        layout=options.layout,
        candidate_cell=candidate.cell_id,
        reference_cell=reference.cell_id,
        error=error,
        rows=rows,
    )


def _train_only_parts(spec, options: PlanOptions, prepare, errors) -> tuple[PlanOptions, dict[str, Any] | None]:
    """Train-only: the options whose launches replay the recording, the recording section with its record cell, and
    the recording steps appended to `prepare`; the options unchanged otherwise. A side whose framework cannot record
    or replay is bad input (UserError)."""
    if not train_only.is_train_only(spec):
        return options, None
    problems = train_only.recording_problems(spec, options.sides, options.layout)
    if problems:
        raise UserError("; ".join(problems))
    steps, section = train_only.recording_steps(
        spec, options.sides, options.backends, options.layout, options.output_dir, options.run_py, options.settings
    )
    recorder = options.sides.candidate
    adapter = registry.get(recorder.framework)
    ctx = options.context(recorder, train_only.record(section["root"]))
    built = adapter.build_launch(spec, section["backend"], options.layout, ctx)
    launch = dataclasses.replace(built, side=f"record-{recorder.name}")
    errors += [f"{launch.cell_id}: {p}" for p in adapter.launch_problems(launch)]
    cell = _plan_cell(spec, launch)
    cell["prepare"] = [step["name"] for step in cell_prepare_steps(cell, prepare)]
    cell["script"] = train_only.RECORD_SCRIPT
    section["record_cell"] = cell
    prepare += steps
    return dataclasses.replace(options, recording=train_only.replay(section["root"])), section


def _schedule_problem(spec: BenchmarkSpec, layout: Layout) -> None:
    """The async loop's schedule is a choice of the disaggregated layout only: colocated, both sides generate, train
    and update in turn on the same GPUs (Miles's --fully-async refuses --colocate), so a continuous schedule there
    would run as drain under a hash that says otherwise."""
    if layout == "colocate" and spec.placement.async_loop.schedule == "continuous":
        raise UserError(
            "placement.async_loop.schedule: continuous keeps requests in flight through the weight update, which "
            "only the disaggregated layout does (colocated, generation, training and the update take turns on the "
            "same GPUs): plan it with --layout disaggregated, or leave the schedule at drain"
        )


def build_plan(spec: BenchmarkSpec, preset: str | None, options: PlanOptions, repeats: int = 1) -> Plan:
    _schedule_problem(spec, options.layout)
    prepare = prepare_steps(spec, options)
    launches: list[FrameworkLaunch] = []
    pairs: list[ParityPair] = []
    errors: list[str] = []
    options, recording = _train_only_parts(spec, options, prepare, errors)
    for backend in options.backends:
        built = _side_launches(spec, backend, options, errors)
        if built is None:
            continue
        launches += built
        if options.sides.reference is not None:
            pairs.append(_parity_pair(built, options, prepare, errors))
    if not launches:  # every backend asked for is one a side cannot run: nothing to plan, bad input
        raise UserError(f"--backend {','.join(options.backends)}: no cell can be planned: " + "; ".join(errors))
    digest = spec_hash(spec)
    sides = options.sides.sides()
    data = {
        "schema_version": 1,
        "spec": spec_json(spec),
        "spec_hash": digest,
        "preset": preset,
        "sides": [side.model_dump(mode="json") for side in sides],
        "targets": {side.name: side.target for side in sides if side.target},
        "prepare": prepare,
        "cells": [_plan_cell(spec, launch) | _replay_key(options) for launch in launches],
        "warnings": steady_state_warnings(spec) + _framework_warnings(spec, options.sides),
        "repeats": repeats,
        "origin": plan_origin(options.output_dir),
    }
    if recording is not None:
        data["recording"] = recording
    _assert_no_secrets(data)
    title = f"{preset or spec.name} ({options.layout})"
    plan = Plan(data, parity_file(digest, [_proven(pair, data) for pair in pairs]), title, options.sides)
    if errors:
        raise PlanError("; ".join(errors), plan)
    return plan


def _replay_key(options: PlanOptions) -> dict[str, Any]:
    """A train-only cell says so: its readers then expect no generation and no staleness in its sink."""
    return {"replay": True} if options.recording is not None and options.recording.role == "replay" else {}


def _framework_warnings(spec: BenchmarkSpec, sides: SidePair) -> list[str]:
    """What each side's framework says about the risks of its launches of this spec (printed, never fatal)."""
    frameworks = dict.fromkeys(side.framework for side in sides.sides())
    return [warning for name in frameworks for warning in registry.get(name).plan_warnings(spec)]


def _proven(pair: ParityPair, data: dict[str, Any]) -> ParityPair:
    """The pair with the digest of what each of its cells runs: the proof covers these words and no others."""
    cells = {cell["id"]: cell for cell in data["cells"]}
    digests = {
        f"{role}_digest": launch_digest(cells[getattr(pair, f"{role}_cell")], data["prepare"], data["origin"])
        for role in ("candidate", "reference")
    }
    return pair.model_copy(update=digests)


def _assert_no_secrets(data: dict[str, Any]) -> None:
    """The same rule the runner applies to a plan before executing it (redaction.find_plan_secrets, with the values
    of this environment's secret variables): a dry run never writes a plan that execute would refuse."""
    leaked = find_plan_secrets(data, Redactor.from_environ(os.environ).values)
    if leaked:
        raise UserError(
            "the plan would hold a secret, so nothing was written: "
            + "; ".join(leaked)
            + " (pass secrets through the environment, never in the spec or on the command line)"
        )


def render_cell_script(
    cell: dict[str, Any], prepare: list[dict[str, Any]], output_dir: Path, cell_dir: str | None = None
) -> str:
    cell_dir = cell_dir or f"{output_dir}/cells/{cell['id']}/rep-0"
    lines = ["#!/usr/bin/env bash", f"# {cell['id']}: generated by scripts/benchmark/run.py; regenerate, do not edit."]
    lines += ["set -euo pipefail", f"BENCH_CELL_DEFAULT={quote(cell_dir)}"]
    lines += ['BENCH_CELL_DIR="${BENCH_CELL_DIR:-${BENCH_CELL_DEFAULT}}"', "export BENCH_CELL_DIR"]
    lines += ['mkdir -p "${BENCH_CELL_DIR}/sink"']
    if uses_ray_job_submit(cell["launch_argv"]):
        lines += ray_entrypoint_guard()
    for step in prepare:
        lines += [f"if [ ! -e {quote(step['creates'])} ]; then", "  " + " ".join(quote(t) for t in step["argv"]), "fi"]
    lines += [f"export {key}={quote(value)}" for key, value in sorted(cell["env"].items())]
    if cell.get("ray_head_argv"):
        head = " ".join(quote(t) for t in cell["ray_head_argv"])
        lines += [f'setsid {head} >"${{BENCH_CELL_DIR}}/ray-head.log" 2>&1 &', "RAY_HEAD_PID=$!"]
        lines += ["trap 'kill -TERM -- \"-${RAY_HEAD_PID}\" 2>/dev/null || true' EXIT"]
        lines += [
            "for _ in $(seq 1 90); do ray status --address 127.0.0.1:6379 >/dev/null 2>&1 && break; sleep 2; done"
        ]
    command = render_argv(cell["launch_argv"])
    lines += [" \\\n".join(command)]
    return "\n".join(lines) + "\n"


def write_plan(plan: Plan, output_dir: Path, into: Path | None = None) -> list[Path]:
    """The plan's files for `output_dir` (the paths its scripts name), written into `into` (default: itself)."""
    target = into or output_dir
    target.mkdir(parents=True, exist_ok=True)
    (target / "cells").mkdir(exist_ok=True)
    written = [target / "plan.json", target / "parity.json", target / "parity.md"]
    written[0].write_text(plan_json_text(plan.data))
    written[1].write_text(parity_text(plan.parity))
    written[2].write_text(parity_markdown(plan.parity, plan.title, plan.sides))
    for cell in plan.data["cells"]:
        script = target / cell["script"]
        script.write_text(render_cell_script(cell, cell_prepare_steps(cell, plan.data["prepare"]), output_dir))
        script.chmod(0o755)
        written.append(script)
    recording = plan.data.get("recording")
    if recording is not None:
        written.append(_write_record_script(recording, plan.data["prepare"], output_dir, target))
    return written


def _write_record_script(recording: dict[str, Any], prepare: list[dict[str, Any]], output_dir: Path, into: Path):
    """The recording pass as a cell script whose folder is beside the recording (its log and sink kept with it)."""
    cell = recording["record_cell"]
    own = [step for step in prepare if step["name"] in cell["prepare"]]
    script = into / train_only.RECORD_SCRIPT
    script.parent.mkdir(exist_ok=True)
    script.write_text(render_cell_script(cell, own, output_dir, cell_dir=f"{recording['root']}/run"))
    script.chmod(0o755)
    return script
