"""A train-only run (plan/train_only.py): both sides trained on one recorded rollout, so their training steps are
compared on identical tokens. The report's train-only section, decided here:

- Ratios: the run's own candidate/reference comparisons (compare.py: the same statistics and intervals as every
  report), of the training phases (old log-prob, reference, actor update) and of training tokens/s, TFLOP/s and MFU
  only. Beside each, the same ratio of a full-loop run of the spec when its folder is given (`full_loop`), so a
  maintainer sees how much of the full-loop gap is the training step.
- Left out: step time, generate, weight sync and the rest of the step: in replay the sides do different things
  besides training (the parity table's `rollout_replay` row says what), so they are never compared here.
- First step: the learning signals of the first step both sides logged, on identical data and initial weights, as a
  correctness check of the two trainers. A signal agrees when the difference is within its learning margin
  (LEARNING_SIGNALS: absolute, or relative to the larger magnitude); the reward and response length are fixed by
  the recording, so any difference there means the two did not train on the same batch.
- The recording: its key (plan.json), its digest (manifest.json, written when the recording was digested).
"""

from __future__ import annotations

import math
from pathlib import Path

from scripts.benchmark.analysis.folder_reader import Cell, RunFolder
from scripts.benchmark.analysis.learning import step_means
from scripts.benchmark.contracts.report import (
    AttributionModel,
    ComparisonModel,
    FirstStepModel,
    Practical,
    TrainOnlyModel,
    TrainOnlyRowModel,
    validate_report_file,
)
from scripts.benchmark.contracts.sides import SidePair
from scripts.benchmark.spec import full_loop_spec_hash

from miles.utils.bench_metrics import LEARNING_SIGNALS

TRAINING_METRICS = (
    "phases_s.old_logprob",
    "phases_s.ref_logprob",
    "phases_s.train",
    "train_tokens_per_s",
    "train_tflops_per_gpu",
    "train_mfu",
)
FIRST_STEP_SIGNALS = ("policy_loss", "grad_norm", "approx_kl", "clip_fraction", "reward_mean", "response_length_mean")
NOT_COMPARED = (
    "step_time_s, phases_s.generate, phases_s.weight_sync and the rest of the step: in replay each side does "
    "different work besides training (parity row rollout_replay)"
)


def outside_the_training_step(
    comparisons: list[ComparisonModel], attribution: list[AttributionModel]
) -> tuple[list[ComparisonModel], list[AttributionModel]]:
    """A train-only run's comparisons and attribution with every number outside the training step marked not
    compared (its ratio kept for reference): in replay each side does other work besides training."""
    marked = [
        (
            c
            if c.metric in TRAINING_METRICS
            else c.model_copy(update={"verdict": Practical.NOT_COMPARED, "method": f"not compared: {NOT_COMPARED}"})
        )
        for c in comparisons
    ]
    training = {f"phases_s.{p}" for p in ("old_logprob", "ref_logprob", "train")}
    rows = [
        a if a.component in training else a.model_copy(update={"comparable": False, "note": NOT_COMPARED})
        for a in attribution
    ]
    return marked, rows


def full_loop_comparisons(run_dir: Path | None, plan: dict | None) -> tuple[str | None, list[ComparisonModel]]:
    """The comparisons of a full-loop run's report.json (its folder), or none; ValueError when it is unreadable, or
    is not a full-loop run of the train-only run's spec (`plan`, its plan.json) with the same sides: its ratios would
    be of other work."""
    if run_dir is None:
        return None, []
    path = Path(run_dir) / "report.json"
    if not path.is_file():
        raise ValueError(f"--full-loop {run_dir}: no report.json there (run `run.py report {run_dir}` first)")
    document = validate_report_file(path)
    if document.train_only is not None:
        raise ValueError(f"--full-loop {run_dir}: a train-only run, not a full-loop one")
    spec = (plan or {}).get("spec")
    if isinstance(spec, dict):
        expected = full_loop_spec_hash(spec)
        if document.spec_hash != expected:
            raise ValueError(
                f"--full-loop {run_dir}: a run of spec {document.spec_hash}, not of this train-only run's spec "
                f"as a full loop ({expected}): its ratios are of other work"
            )
    planned = (plan or {}).get("sides")
    if planned and document.sides:
        ours = [(s.role, s.framework, s.target, s.root) for s in SidePair.from_list(planned).sides()]
        theirs = [(s.role, s.framework, s.target, s.root) for s in document.side_pair().sides()]
        if ours != theirs:
            raise ValueError(f"--full-loop {run_dir}: its sides (framework, target, checkout) are not this run's")
    return str(run_dir), document.comparisons


def _row(row: ComparisonModel, beside: ComparisonModel | None) -> TrainOnlyRowModel:
    where = {k: getattr(row, k) for k in ("backend", "layout", "candidate_cell", "reference_cell")}
    full = {}
    if beside is not None:
        full = {
            "full_loop_ratio": beside.ratio,
            "full_loop_ci_low": beside.ci_low,
            "full_loop_ci_high": beside.ci_high,
        }
    return TrainOnlyRowModel(
        **where,
        metric=row.metric,
        ratio=row.ratio,
        ci_low=row.ci_low,
        ci_high=row.ci_high,
        verdict=row.verdict,
        **full,
    )


def _agreement(signal: str, candidate: float, reference: float) -> tuple[float, float | None, bool | None]:
    spec = LEARNING_SIGNALS[signal]
    difference = candidate - reference
    if spec.margin is None:
        return difference, None, None
    if spec.margin_kind == "relative":  # a share of the level, measured from where the signal's level starts
        scale = max(abs(spec.level(candidate)), abs(spec.level(reference)))
        difference = difference / scale if scale > 0 else 0.0
    return difference, spec.margin, abs(difference) <= spec.margin


def _first_step(candidate: Cell, reference: Cell, where: dict) -> list[FirstStepModel]:
    rows = []
    for signal in FIRST_STEP_SIGNALS:
        a, b = step_means(candidate, signal, 0), step_means(reference, signal, 0)
        both = sorted(set(a) & set(b))
        if not both:
            empty = {"step": None, "candidate": None, "reference": None, "difference": None, "agrees": None}
            rows.append(FirstStepModel(**where, signal=signal, tolerance=LEARNING_SIGNALS[signal].margin, **empty))
            continue
        step = both[0]
        difference, tolerance, agrees = _agreement(signal, a[step], b[step])
        rows.append(
            FirstStepModel(
                **where,
                signal=signal,
                step=step,
                candidate=a[step],
                reference=b[step],
                difference=difference if math.isfinite(difference) else None,
                tolerance=tolerance,
                agrees=agrees,
            )
        )
    return rows


def train_only_view(
    folder: RunFolder, comparisons: list[ComparisonModel], full_loop: tuple[str | None, list[ComparisonModel]]
) -> TrainOnlyModel | None:
    """The train-only section of a run folder whose plan replayed a recording; None for any other run."""
    recording = (folder.plan or {}).get("recording")
    if not recording:
        return None
    full_run, full_rows = full_loop
    beside = {(c.backend, c.layout, c.metric): c for c in full_rows}
    rows = [_row(c, beside.get((c.backend, c.layout, c.metric))) for c in comparisons if c.metric in TRAINING_METRICS]
    cells = {cell.id: cell for cell in folder.cells}
    first, pairs = [], {(c.candidate_cell, c.reference_cell): c for c in comparisons}
    for (candidate, reference), c in pairs.items():
        if candidate in cells and reference in cells:
            where = {
                "backend": c.backend,
                "layout": c.layout,
                "candidate_cell": candidate,
                "reference_cell": reference,
            }
            first += _first_step(cells[candidate], cells[reference], where)
    noted = folder.manifest.get("recording") or {}
    return TrainOnlyModel(
        recording_key=recording.get("key"),
        digest=noted.get("digest") or recording.get("digest"),
        recorder=recording.get("recorder"),
        full_loop_run=full_run,
        left_out=[NOT_COMPARED],
        rows=rows,
        first_step=first,
    )
