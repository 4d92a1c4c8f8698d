"""The benchmark's headline per-step series in Miles's metric-history form (tests/ci/metric_history), so Miles's own
gate and dashboards carry the benchmark next to Miles's other CI series.

- `merged_record(series, cells) -> list[dict]`: one `{"metric": key, "series": [[step, value], ...]}` per cell and
  headline field, the merged per-run JSONL that Miles's `parse_merged_record` reads; keys are
  `bench/<preset>/<cell id>/<field>`: cell ids repeat across presets, so the preset keeps their series apart.
- `write_merged_record(run_dir, out)`: every cell of a run folder (its manifest's metrics files) into `out`, under
  its plan's preset (a spec run without one: `spec-<first 12 of its spec hash>`).
- The `register_ci_gate` declarations for these keys are tests/benchmark/miles_ci_gates.py.

Which gate answers what: the benchmark's `check` is the statistical one (repeats, intervals, change points); Miles's
gate is a band around the mean of its trusted history, kept for continuity with Miles's other CI series.
"""

from __future__ import annotations

import json
from pathlib import Path

from miles.utils.bench_metrics import encode_nonfinite, read_records, write_text_atomic

HEADLINE_FIELDS = ("step_time_s", "train_tokens_per_s", "rollout_tokens_per_gpu_s")
"""Step time and the two throughputs: what the nightly's gate declarations name."""


def metric_key(series: str, cell_id: str, field: str) -> str:
    return f"bench/{series}/{cell_id}/{field}"


def merged_record(series: str, cells: dict[str, Path]) -> list[dict]:
    """cell id -> its metrics.jsonl, under the run's series (its preset); steps without a value are left out,
    non-finite values kept as markers."""
    lines = []
    for cell_id, metrics in sorted(cells.items()):
        try:
            records = read_records(metrics)
        except ValueError as exc:  # not UTF-8, not JSON: a half-copied folder
            raise ValueError(
                f"{metrics} is damaged ({str(exc).splitlines()[0]}): was the run folder fully copied? copy it again"
            ) from None
        for field in HEADLINE_FIELDS:
            steps = [[r.step, encode_nonfinite(getattr(r, field))] for r in records if getattr(r, field) is not None]
            if steps:
                lines.append({"metric": metric_key(series, cell_id, field), "series": steps})
    return lines


def run_series(run_dir: Path) -> str:
    """The run's preset from its plan, or `spec-<hash>` for a spec without one; ValueError naming the plan."""
    plan_path = run_dir / "plan.json"
    try:
        plan = json.loads(plan_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {plan_path}: {exc}") from exc
    preset, spec_hash = plan.get("preset"), plan.get("spec_hash")
    if isinstance(preset, str) and preset:
        return preset
    if isinstance(spec_hash, str) and spec_hash:
        return f"spec-{spec_hash[:12]}"
    raise ValueError(f"{plan_path} names neither a preset nor a spec hash: its series cannot be keyed")


def write_merged_record(run_dir: Path, out: Path) -> Path:
    """The run's complete cells (first repeat of each) into Miles's merged record; ValueError naming the manifest
    when it cannot be read."""
    manifest_path = run_dir / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {manifest_path}: {exc}") from exc
    cells: dict[str, Path] = {}
    for cell in manifest.get("cells") or []:
        if cell.get("state") == "complete" and cell.get("id") not in cells:
            cells[cell["id"]] = run_dir / cell["metrics"]
    lines = merged_record(run_series(run_dir), cells)
    write_text_atomic(out, "".join(json.dumps(line, allow_nan=False) + "\n" for line in lines))
    return out
