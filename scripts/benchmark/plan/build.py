"""Build and write the plan of one benchmark invocation: cells, prepare steps, per-cell scripts and the parity proof.

- `PlanOptions`: backends, layout, compare_verl, output_dir, Miles paths, the run.py path the prepare step calls,
  and the Miles version the launches target (frameworks/miles/versions.py).
- `build_plan(spec, preset, options) -> Plan`: plan.json content (shared contract: schema_version, spec, spec_hash,
  preset, targets {"miles": version}, prepare, cells), the per-cell launches, and the parity pairs. Every Miles
  cell's flags are checked against the inventory; parity rows come from the emitted launches parsed back. A parity,
  flag or target error raises PlanError, but the Plan (with the failing parity rows) is attached so it can still be
  written for review.
- `prepare` (in order): `download-model` and `download-dataset` (`hf download`, as Miles's launchers' prepare(); only
  when the spec names `model.hf_repo` / `data.hf_repo`), then, with --compare-verl, `convert-data`. Each step has
  `creates` + `skip_if_exists` (a present model or dataset is not fetched again) and `needed_by` (the frameworks whose
  cell scripts run it: the downloads for both, the conversion for VERL only).
- `verl_compose_check(plan)`: strict Hydra composition of every VERL cell when VERL 0.9.1's config is found.
- `write_plan(plan, output_dir)`: plan.json, cells/<id>.sh (runnable, set -euo pipefail, defines BENCH_CELL_DIR),
  parity.json, parity.md.

Caveats:
- Miles cells carry an extra key, `ray_head_argv` (the Ray head their `ray job submit` needs); the cell script starts
  it in its own session and stops only that process group.
- Secrets never enter a plan: env holds only the fixed values built here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.benchmark.contracts.plan import plan_json_text
from scripts.benchmark.frameworks.launch import FrameworkLaunch, quote, ray_entrypoint_guard, render_argv
from scripts.benchmark.frameworks.miles.flags import flag_problems, load_inventory
from scripts.benchmark.frameworks.miles.launch import MilesPaths, build_miles_launch
from scripts.benchmark.frameworks.miles.versions import DEFAULT_MILES_TARGET, miles_target, target_problems
from scripts.benchmark.frameworks.verl.data import CONVERT_STEP, converted_paths, prepare_step
from scripts.benchmark.frameworks.verl.launch import VerlData, build_verl_launch, overrides_of
from scripts.benchmark.plan.parity import ParityError, build_parity, parity_json, parity_markdown
from scripts.benchmark.runner.cell_command import uses_ray_job_submit
from scripts.benchmark.runner.redaction import find_plan_secrets
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
    compare_verl: bool
    output_dir: Path
    paths: MilesPaths = field(default_factory=MilesPaths)
    run_py: str = str(RUN_PY)
    miles_version: str = DEFAULT_MILES_TARGET


@dataclass
class Plan:
    data: dict[str, Any]
    launches: list[FrameworkLaunch]
    parity: dict[str, Any]
    title: str


def _plan_cell(spec: BenchmarkSpec, launch: FrameworkLaunch) -> dict[str, Any]:
    layout = launch.layout
    cell = {
        "id": launch.cell_id,
        "framework": launch.framework,
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


def download_steps(spec: BenchmarkSpec) -> list[dict[str, Any]]:
    """`hf download` of the model and the dataset (as Miles's launchers' prepare()), skipped when already present."""
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
    return [{**step, "needed_by": ["miles", "verl"]} for step in steps]


def prepare_steps(spec: BenchmarkSpec, options: PlanOptions) -> list[dict[str, Any]]:
    """In order: model download, dataset download, then (VERL only) the data conversion, which reads the dataset."""
    steps = download_steps(spec)
    if options.compare_verl:
        steps.append({**prepare_step(spec, options.output_dir / "data", options.run_py), "needed_by": ["verl"]})
    return steps


def cell_prepare_steps(cell: dict[str, Any], prepare: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The prepare steps a cell's own script runs: those its framework needs (all of them without `needed_by`)."""
    return [step for step in prepare if cell["framework"] in step.get("needed_by", [cell["framework"]])]


def build_plan(spec: BenchmarkSpec, preset: str | None, options: PlanOptions) -> Plan:
    data_dir = options.output_dir / "data"
    train_file, val_file = converted_paths(spec, data_dir)
    prepare = prepare_steps(spec, options)
    convert_argv = next((step["argv"] for step in prepare if step["name"] == CONVERT_STEP), None)
    inventory, launches, pairs, errors = load_inventory(), [], [], []
    target = miles_target(options.miles_version)
    for backend in options.backends:
        problems = target_problems(target, backend)
        errors += problems
        if problems:
            continue
        miles = build_miles_launch(spec, backend, options.layout, options.paths, target)
        errors += [f"{miles.cell_id}: {p}" for p in flag_problems(miles.argv, backend, inventory)]
        launches.append(miles)
        if not options.compare_verl:
            continue
        verl = build_verl_launch(spec, backend, options.layout, VerlData(train_file, val_file))
        launches.append(verl)
        pair = {"backend": backend, "layout": options.layout, "miles_cell": miles.cell_id, "verl_cell": verl.cell_id}
        try:
            rows, error = (
                build_parity(miles.argv, verl.argv, backend, options.layout, convert_argv, inventory),
                None,
            )
        except ParityError as exc:
            rows, error = exc.rows, str(exc)
            errors.append(f"parity {error}")
        pairs.append({**pair, "rows": rows, "error": error})
    digest = spec_hash(spec)
    data = {
        "schema_version": 1,
        "spec": spec_json(spec),
        "spec_hash": digest,
        "preset": preset,
        "targets": {"miles": target.name},
        "prepare": prepare,
        "cells": [_plan_cell(spec, launch) for launch in launches],
        "warnings": steady_state_warnings(spec),
    }
    _assert_no_secrets(data)
    title = f"{preset or spec.name} ({options.layout})"
    plan = Plan(data=data, launches=launches, parity=parity_json(digest, pairs), title=title)
    if errors:
        raise PlanError("; ".join(errors), plan)
    return plan


def _assert_no_secrets(data: dict[str, Any]) -> None:
    """The same rule the runner applies to a plan before executing it (redaction.find_plan_secrets)."""
    leaked = find_plan_secrets(data)
    assert not leaked, f"literal secrets in the plan: {leaked}"


def verl_compose_check(plan: Plan, root: Path | None) -> dict[str, list[str]] | None:
    """{cell id: problems} for every VERL cell, or None when VERL 0.9.1's config is not available here."""
    if root is None:
        return None
    from scripts.benchmark.frameworks.verl.config import verl_override_problems

    return {
        launch.cell_id: verl_override_problems(overrides_of(launch.argv), root)
        for launch in plan.launches
        if launch.framework == "verl"
    }


def render_cell_script(cell: dict[str, Any], prepare: list[dict[str, Any]], output_dir: Path) -> str:
    cell_dir = f"{output_dir}/cells/{cell['id']}/rep-0"
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
    written[1].write_text(json.dumps(plan.parity, indent=2, default=str) + "\n")
    written[2].write_text(parity_markdown(plan.parity, plan.title))
    for cell in plan.data["cells"]:
        script = target / cell["script"]
        script.write_text(render_cell_script(cell, cell_prepare_steps(cell, plan.data["prepare"]), output_dir))
        script.chmod(0o755)
        written.append(script)
    return written
