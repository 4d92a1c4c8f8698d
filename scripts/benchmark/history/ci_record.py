"""The benchmark's headline per-step series in Miles's metric-history form (tests/ci/metric_history), so Miles's own
gate and dashboards carry the benchmark next to Miles's other CI series.

- `merged_record(cells) -> list[dict]`: one `{"metric": key, "series": [[step, value], ...]}` per cell and headline
  field, the merged per-run JSONL that Miles's `parse_merged_record` reads; keys are `bench/<cell id>/<field>`.
- `write_merged_record(run_dir, out)`: every cell of a run folder (its manifest's metrics files) into `out`.
- The `register_ci_gate` declarations for these keys are tests/benchmark/miles_ci_gates.py.

Which gate answers what: the benchmark's `check` is the statistical one (repeats, intervals, change points); Miles's
gate is a band around the mean of its trusted history, kept for continuity with Miles's other CI series.
"""

from __future__ import annotations

import json
from pathlib import Path

from miles.utils.bench_metrics import encode_nonfinite, read_records

HEADLINE_FIELDS = ("step_time_s", "train_tokens_per_s", "rollout_tokens_per_gpu_s")
"""Step time and the two throughputs: what the nightly's gate declarations name."""


def metric_key(cell_id: str, field: str) -> str:
    return f"bench/{cell_id}/{field}"


def merged_record(cells: dict[str, Path]) -> list[dict]:
    """cell id -> its metrics.jsonl; steps without a value are left out, non-finite values kept as markers."""
    lines = []
    for cell_id, metrics in sorted(cells.items()):
        records = read_records(metrics)
        for field in HEADLINE_FIELDS:
            series = [[r.step, encode_nonfinite(getattr(r, field))] for r in records if getattr(r, field) is not None]
            if series:
                lines.append({"metric": metric_key(cell_id, field), "series": series})
    return lines


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
    lines = merged_record(cells)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(line, allow_nan=False) + "\n" for line in lines), encoding="utf-8")
    return out
