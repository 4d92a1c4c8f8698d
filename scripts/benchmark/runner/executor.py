"""Run a plan: preparation steps once, then cells x repeats interleaved, each watched, recorded and stopped cleanly.

- `execute(plan_path, output_dir, options)` / `execute(None, output_dir, options, resume=True)`: checks everything that
  can be checked before any process starts (plan well formed and free of secrets, executables present, a Ray CLI
  where a private head is needed, with preflight=True the machine: runner/preflight.py; then the output folder
  writable), then writes DIR/plan.json and DIR/manifest.json. A rejected run leaves no folder it created.
- A plan runs only what it was proven for (`check_plan_proof`): its spec still matches its `spec_hash`, and a plan
  that compares two sides has its parity.json beside it, made for the same spec and for the same launch words (each
  compared cell's launch, environment and prepare steps: `contracts/plan.launch_digest`); else exit 2 naming the
  file and the cell.
- A plan planned for another run folder or by another checkout runs with its paths moved to this run folder and this
  checkout (runner/relocate.py); the run folder's plan.json is the moved plan.
- Order: repeat 0 of every cell, then repeat 1, ...; within a repeat the cells of one (backend, layout) run
  candidate then reference, so node drift hits both sides alike.
- Preparation steps run once, before the first cell, with this interpreter for a bare python (they are harness
  work: downloads, data conversion); a step whose `creates` exists is skipped.
- Per cell repeat: command.sh and env.json (redacted), environment.json, an optional private Ray head, the command in
  its own session (working directory: the cell repeat folder, so Hydra's outputs/ lands there) with log.txt, the
  sink followed into metrics.jsonl as steps complete, the watchdog; afterwards everything the harness started is
  stopped (SIGTERM, grace, SIGKILL) and GPU memory is checked.
- SIGINT/SIGTERM to the harness: the running cell is stopped and marked interrupted, the rest stay pending; exit 130.
- `--resume DIR`: complete cells (with all their steps on disk) are skipped; failed, interrupted, running (the
  harness died) and short cells rerun; the earlier attempt's folder is kept as rep-<k>.attempt-<n>. Before any cell
  runs, processes a killed harness left behind are found from the manifest and stopped (runner/leftovers.py).
- The whole execution holds the run folder's lock (runner/folder_lock.py): a second execute or --resume on a live run
  is refused with exit 2 naming its pid and host.
- Returns the exit status: 0 all complete, 1 some cell not complete, 130 interrupted.
- At the end of every run (complete, failed or interrupted) where some cell repeat wrote a step, the report of
  `run.py report DIR` (the `end_report` the command hands over) is written into DIR and its verdict printed; a
  report error (or a signal while it is written) never changes the exit status: it is printed and appended to the
  manifest's `warnings`.

Caveats:
- `RunError` (bad input) is raised before anything is started; everything after that is recorded in the manifest.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from scripts.benchmark.common.redaction import Redactor, find_plan_secrets, find_words_secrets
from scripts.benchmark.contracts.manifest import MANIFEST_NAME, NOT_NEEDED, CellRun, Manifest, new_cell_run
from scripts.benchmark.contracts.parity import read_parity_file
from scripts.benchmark.contracts.plan import RECORD_SCRIPT, Known, launch_digest, read_plan_json
from scripts.benchmark.contracts.sides import SidePair, sides_from_cells
from scripts.benchmark.frameworks import registry
from scripts.benchmark.runner.end_report import EndReport
from scripts.benchmark.runner.folder_lock import (
    RunLock,
    acquire_run_lock,
    refuse_a_live_previous_harness,
    release_run_lock,
)
from scripts.benchmark.runner.leftovers import stop_leftovers
from scripts.benchmark.runner.matrix import MatrixRunner
from scripts.benchmark.runner.options import CannotExecute, ExecuteOptions, RunError
from scripts.benchmark.runner.preflight import check_can_execute, launch_problems, steps_to_prepare  # noqa: F401
from scripts.benchmark.runner.process import become_child_subreaper
from scripts.benchmark.runner.progress import MatrixProgress
from scripts.benchmark.runner.relocate import relocated
from scripts.benchmark.runner.rounds import LooksFor
from scripts.benchmark.runner.write_errors import describe_write_error, write_error_in
from scripts.benchmark.spec import spec_json_hash

from miles.utils.bench_metrics import read_records, write_bytes_atomic


def check_output_dir(output_dir: Path) -> None:
    """Create the run folder and prove it is writable, or raise RunError naming the folder and the cause."""
    if output_dir.exists() and not output_dir.is_dir():
        raise RunError(f"--output-dir {output_dir} is a file, not a folder")
    probe = output_dir / f".write-probe-{os.getpid()}"  # one per harness: several may start at once
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        probe.write_text("ok")
    except OSError as exc:
        raise RunError(f"--output-dir {output_dir} is not writable: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(OSError):  # a full disk creates the file and then fails to write it
            probe.unlink(missing_ok=True)


def load_plan(path: Path) -> dict[str, Any]:
    """plan.json checked against the contract and the registry (its frameworks and sink formats), free of secrets
    and of launch words its frameworks' adapters refuse."""
    known = Known(frameworks=registry.names(), sink_formats=registry.sink_formats())
    try:
        plan = read_plan_json(path, known)
    except OSError as exc:
        raise RunError(f"cannot read plan {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise RunError(str(exc)) from exc
    secrets = [
        f"a literal secret in {where}" for where in find_plan_secrets(plan, Redactor.from_environ(os.environ).values)
    ]
    refused = [
        f"cells[{cell['id']}].launch_argv: {problem}"
        for cell in plan["cells"]
        for problem in registry.get(cell["framework"]).refused(cell["launch_argv"])
    ]
    if secrets or refused:
        raise RunError(f"plan {path} cannot be executed:\n  " + "\n  ".join(secrets + refused))
    return plan


def check_plan_proof(plan: dict[str, Any], path: Path) -> None:
    """A plan runs only what it was proven for: its `spec_hash` is the hash of its `spec`, and a plan whose sides
    compare two launches has the parity table beside it, made for the same spec (plans written before sides existed
    are not checked for it)."""
    problems = []
    if isinstance(plan.get("spec_hash"), str) and spec_json_hash(plan["spec"]) != plan["spec_hash"]:
        problems.append(f"its spec no longer matches its spec_hash {plan['spec_hash']} (was it edited?)")
    if plan.get("sides") and plan_sides(plan).reference is not None:
        problems += _parity_problems(path.parent / "parity.json", plan)
    if problems:
        raise RunError(
            f"plan {path} cannot be executed:\n  " + "\n  ".join(problems) + "\n  plan it again: run.py ... --dry-run"
        )


def _parity_problems(parity: Path, plan: dict[str, Any]) -> list[str]:
    spec_hash = plan.get("spec_hash")
    if not parity.exists():
        return [f"it compares two sides but {parity} is missing (the proof that the launches match)"]
    try:
        proof = read_parity_file(parity)
    except (OSError, ValueError) as exc:
        return [str(exc).strip().splitlines()[0]]
    if proof.spec_hash != spec_hash:
        return [f"{parity} was made for spec {proof.spec_hash}, the plan is for {spec_hash}"]
    cells = {cell["id"]: cell for cell in plan["cells"]}
    problems = []
    for pair in proof.pairs:
        for role in ("candidate", "reference"):
            cell, proven = cells.get(getattr(pair, f"{role}_cell")), getattr(pair, f"{role}_digest")
            if cell is not None and proven is not None:
                if launch_digest(cell, plan.get("prepare") or [], plan.get("origin")) != proven:
                    problems.append(
                        f"cells[{cell['id']}]: its launch words, environment or prepare steps are not those "
                        f"{parity} proved matched (edited after planning?)"
                    )
    return problems


def plan_sides(plan: dict[str, Any]) -> SidePair:
    """The plan's sides; for a plan written before sides existed, one side per framework (the registry's pair)."""
    if plan.get("sides"):
        return SidePair.from_list(plan["sides"])
    labels = {name: registry.label_of(name) for name in registry.names()}
    return sides_from_cells((c["framework"] for c in plan["cells"]), registry.DEFAULT_PAIR, labels)


def interleaved_order(
    cells: list[dict[str, Any]], repeats: int, sides: SidePair | None = None
) -> list[tuple[dict[str, Any], int]]:
    """Repeat by repeat; inside a repeat, per (backend, layout) in plan order, the candidate then the reference in
    even repeats and the reference first in odd ones (ABBA...): a side that always ran first (a warmer or colder
    node, a fresher page cache) would carry that position's bias into the pair's ratio."""
    groups: list[tuple[str, str]] = []
    for cell in cells:
        if (cell["backend"], cell["layout"]) not in groups:
            groups.append((cell["backend"], cell["layout"]))
    sides = sides or plan_sides({"cells": cells})
    rank = {side.name: index for index, side in enumerate(sides.sides())}

    def key(cell: dict[str, Any]) -> tuple[int, int]:
        return groups.index((cell["backend"], cell["layout"])), rank.get(cell.get("side") or cell["framework"], 2)

    def flipped(cell: dict[str, Any]) -> tuple[int, int]:
        group, side = key(cell)
        return group, -side

    ordered, reversed_sides = sorted(cells, key=key), sorted(cells, key=flipped)
    return [(cell, repeat) for repeat in range(repeats) for cell in (reversed_sides if repeat % 2 else ordered)]


def _needs_rerun(cell_run: CellRun, run_dir: Path) -> bool:
    if cell_run.state == NOT_NEEDED:  # the sequential pair decided without it: a resume does not reopen that
        return False
    if cell_run.state != "complete":
        return True
    metrics = run_dir / cell_run.metrics
    if not metrics.exists():
        return True
    steps = len(read_records(metrics))
    return cell_run.num_steps is not None and steps < cell_run.num_steps


def prepare_execution(
    plan_path: Path | None, output_dir: Path, options: ExecuteOptions, *, resume: bool, preflight: bool = False
) -> tuple[dict[str, Any], Manifest, list[CellRun]]:
    """Every check that can fail before anything starts; returns the plan, the manifest and the cells to run.
    A rejected run leaves no folder behind that it created."""
    created = not output_dir.exists()
    try:
        return _prepare(plan_path, output_dir, options, resume=resume, preflight=preflight)
    except RunError:
        if created and output_dir.is_dir() and not any(output_dir.iterdir()):
            output_dir.rmdir()
        raise


def _load_manifest(path: Path) -> Manifest:
    try:
        return Manifest.load(path)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunError(f"{path} cannot be read: {first}") from exc


def _check_here(plan: dict[str, Any], options: ExecuteOptions, output_dir: Path, preflight: bool) -> None:
    """The preflight shared with the main command (the machine, exit 4; skippable), then what the run starts."""
    missing = check_can_execute(plan, skip_prepare=options.skip_prepare) if preflight else []
    if missing:
        raise CannotExecute(
            "cannot execute the plan on this machine (--no-preflight skips this check):\n  - " + "\n  - ".join(missing)
        )
    problems = launch_problems(plan, options, output_dir)
    if problems:
        raise RunError("cannot start the matrix:\n  " + "\n  ".join(problems))


def _prepare(
    plan_path: Path | None, output_dir: Path, options: ExecuteOptions, *, resume: bool, preflight: bool
) -> tuple[dict[str, Any], Manifest, list[CellRun]]:
    manifest_path = output_dir / MANIFEST_NAME
    if resume:
        if not manifest_path.exists():
            raise RunError(f"--resume {output_dir}: no {MANIFEST_NAME} there (was it a run folder?)")
        plan = load_plan(output_dir / "plan.json")
        check_plan_proof(plan, output_dir / "plan.json")
    else:
        if manifest_path.exists():
            raise RunError(
                f"--output-dir {output_dir} already holds a run ({MANIFEST_NAME}); use --resume {output_dir}"
            )
        assert plan_path is not None
        plan = load_plan(plan_path)
        check_plan_proof(plan, plan_path)
    plan = relocated(plan, output_dir)
    if options.repeats < 1:
        raise RunError(f"--repeats must be >= 1, got {options.repeats}")
    if options.ray == "external" and not options.ray_address:
        raise RunError("--ray external needs --ray-address (or RAY_ADDRESS in the environment)")
    if resume and preflight and _nothing_to_rerun(plan, options, output_dir):
        preflight = False  # "nothing to do" needs no GPU: a finished run resumed on a laptop says so
    _check_here(plan, options, output_dir, preflight)
    _check_prefix_secrets(options)
    sides = plan_sides(plan)
    if not resume:
        manifest = Manifest(
            path=manifest_path,
            spec_hash=plan.get("spec_hash"),
            sides=plan.get("sides"),
            cells=[new_cell_run(cell, rep) for cell, rep in interleaved_order(plan["cells"], options.repeats, sides)],
        )
        created: list[Path] = []
        try:
            _copy_plan_files(plan_path, output_dir, plan, created)
            manifest.options = Redactor.from_environ(os.environ).redact_json(asdict(options))
            manifest.save()
        except OSError:
            for path in created:  # a start that failed leaves the folder as it found it, every file whole
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
                    if path.parent != output_dir:
                        path.parent.rmdir()  # recording/, when it held nothing else
            raise
    else:
        manifest = _load_manifest(manifest_path)
        refuse_a_live_previous_harness(output_dir, manifest.harness)
        known = {c.key for c in manifest.cells}
        for cell, rep in interleaved_order(plan["cells"], options.repeats, sides):
            if (cell["id"], rep) not in known:  # --resume --repeats N with a larger N adds repeats
                manifest.cells.append(new_cell_run(cell, rep))
        manifest.options = Redactor.from_environ(os.environ).redact_json(asdict(options))
        manifest.save()
    todo = [c for c in manifest.cells if _needs_rerun(c, output_dir)]
    return plan, manifest, todo


def _nothing_to_rerun(plan: dict[str, Any], options: ExecuteOptions, output_dir: Path) -> bool:
    """Every cell repeat the options ask for is already complete with all its steps."""
    manifest = _load_manifest(output_dir / MANIFEST_NAME)
    runs = {c.key: c for c in manifest.cells}
    wanted = [(cell["id"], rep) for cell, rep in interleaved_order(plan["cells"], options.repeats, plan_sides(plan))]
    return all(key in runs for key in wanted) and not any(_needs_rerun(c, output_dir) for c in manifest.cells)


def _copy_plan_files(plan_path: Path | None, output_dir: Path, plan: dict[str, Any], created: list[Path]) -> None:
    """The plan's files into the run folder, each written whole (tmp file and rename) and replacing a different copy
    (one a failed start left); plan.json as it runs here (relocated), so --resume reads what ran. `created` gets
    each file that was not there before."""
    assert plan_path is not None
    copies = {name: (plan_path.parent / name).read_bytes() for name in ("parity.json", "parity.md", RECORD_SCRIPT)
              if (plan_path.parent / name).is_file()}  # fmt: skip
    text = plan_path.read_text(encoding="utf-8")
    if plan.get("origin") is not None and json.loads(text).get("origin") != plan["origin"]:
        text = json.dumps(plan, indent=2) + "\n"
    copies["plan.json"] = Redactor.from_environ(os.environ).redact_text(text).encode("utf-8")
    for name, data in copies.items():
        copy = output_dir / name
        if copy.is_file() and copy.read_bytes() == data:
            continue  # the plan's own folder, or a copy already whole
        if not copy.exists():
            created.append(copy)
        write_bytes_atomic(copy, data)


def _check_prefix_secrets(options: ExecuteOptions) -> None:
    """A launch prefix is recorded (manifest options, logs): it must not carry a literal secret either."""
    problems = []
    for name, prefix in options.prefixes.items():
        if prefix:
            problems += find_words_secrets(shlex.split(prefix), f"--side-prefix {name}")
    if problems:
        raise RunError(
            "a literal secret in "
            + ", ".join(dict.fromkeys(problems))
            + ": pass it through the environment by name instead (e.g. docker exec -e WANDB_API_KEY)"
        )


def execute(
    plan_path: Path | None,
    output_dir: Path,
    options: ExecuteOptions,
    *,
    resume: bool = False,
    progress: MatrixProgress | None = None,
    preflight: bool = False,
    end_report: EndReport | None = None,
    looks_for: LooksFor | None = None,
) -> int:
    # Absolute, because each cell runs with the cell folder as its working directory and ${BENCH_CELL_DIR} in its
    # sink path: a relative run folder would make the sink land one level down, where the runner never looks.
    output_dir = Path(output_dir).resolve()
    created = not output_dir.exists()
    check_output_dir(output_dir)
    try:
        lock = acquire_run_lock(output_dir)  # refused: the lock is another harness's, never ours to remove
    except RunError:
        _remove_if_made_and_empty(output_dir, created)
        raise
    rejected = False
    try:
        return _execute_locked(
            plan_path, output_dir, options, lock, resume=resume, progress=progress, preflight=preflight,
            end_report=end_report, looks_for=looks_for,
        )  # fmt: skip
    except RunError:
        rejected = True
        raise
    finally:
        # No lock file stays behind; a rejected run leaves no folder it created either.
        release_run_lock(lock)
        if rejected:
            _remove_if_made_and_empty(output_dir, created)


def _remove_if_made_and_empty(output_dir: Path, created: bool) -> None:
    if created and output_dir.is_dir() and not any(output_dir.iterdir()):
        output_dir.rmdir()


def _execute_locked(
    plan_path: Path | None,
    output_dir: Path,
    options: ExecuteOptions,
    lock: RunLock,
    *,
    resume: bool,
    progress: MatrixProgress | None,
    preflight: bool,
    end_report: EndReport | None,
    looks_for: LooksFor | None = None,
) -> int:
    try:
        plan, manifest, todo = prepare_execution(plan_path, output_dir, options, resume=resume, preflight=preflight)
        _record_lock(manifest, lock)
    except OSError as exc:
        if write_error_in(exc) is None:
            raise
        raise RunError(
            f"{describe_write_error(exc)} (nothing was started); free space, then run the same command again"
        ) from exc
    become_child_subreaper()
    if resume:
        stop_leftovers(manifest, options.grace_s)
    progress = progress or MatrixProgress(total_cells=len(todo))
    if not todo:
        progress.message(f"nothing to do: all {len(manifest.cells)} cell repeats in {output_dir} are complete")
        progress.close()
        return 0
    if (line := cost_line(plan, options)) is not None:
        progress.message(line)
    return MatrixRunner(plan, manifest, options, progress, end_report, looks_for).run(todo)


def cost_line(plan: dict[str, Any], options: ExecuteOptions) -> str | None:
    """What the run will cost, from the plan's estimate (plan/cost.py) at the repeats it runs, before it spends
    anything; None for a plan written without one."""
    cost = plan.get("cost") or {}
    cells = cost.get("cells") or {}
    if not cells:
        return None
    launches = [(c["launch_s"]["typical"], c["launch_s"]["upper"], c["gpus"]) for c in cells.values()]
    rounds = options.repeats
    wall = [rounds * sum(launch[i] for launch in launches) / 60 for i in (0, 1)]
    hours = [rounds * sum(launch[i] * launch[2] for launch in launches) / 3600 for i in (0, 1)]
    budget = f"; budget {options.budget_s / 60:g} min" if options.budget_s else ""
    return (
        f"cost of {rounds} repeat(s) (the plan's estimate): node wall time {wall[0]:.0f}-{wall[1]:.0f} min, "
        f"{hours[0]:.1f}-{hours[1]:.1f} GPU-hours, start-ups included{budget}"
    )


def _record_lock(manifest: Manifest, lock: RunLock) -> None:
    manifest.harness = lock.holder
    if lock.taken_over is not None:
        dead = lock.taken_over
        warning = f"took over the stale lock of harness pid {dead.pid} on {dead.host} (started {dead.started_at})"
        manifest.warnings.append(warning)
        print(f"warning: {warning}", file=sys.stderr)  # on the console too, not only in the manifest
    manifest.save()
