"""Miles jsonl -> VERL parquet, rows in the order Miles reads them: the plan's `convert-data` step (after downloads).

- `convert_jsonl_to_parquet(...)`: rows [start:end) of the jsonl in file order (what Miles's `path@[start:end]`
  reads without --rollout-shuffle) become VERL rows: data_source, prompt (chat messages), ability,
  reward_model {ground_truth, style}, extra_info {index, split}; plus a small validation parquet (VERL loads
  data.val_files at start-up even when validation never runs).
- `converted_paths(spec, data_dir)`: the file names, which carry the source stem and the slice
  (<stem>.rows-<start>-<end>.parquet), so the parity table can read the slice back from the VERL launch.
- `ConversionReport`: rows written, and how many rows carry a per-row `metadata.rm_type` (Miles would score those
  with another scorer than --rm-type; the report says so).

Caveats:
- A string prompt becomes one user message; a message list is kept. Both frameworks then apply the same tokenizer
  chat template with a generation prompt.
- pyarrow is imported inside the functions (heavy import).
- Atomic: each file is written to <name>.tmp and renamed; when either file fails, neither is left behind.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.benchmark.spec import BenchmarkSpec

SLICE_MARK = ".rows-"
CONVERT_STEP = "convert-data"


@dataclass(frozen=True)
class ConversionReport:
    train_rows: int
    val_rows: int
    rows_with_rm_type: int
    train_file: str
    val_file: str


def converted_paths(spec: BenchmarkSpec, data_dir: str | Path) -> tuple[str, str]:
    stem = Path(spec.data.prompt_data).name.removesuffix(".jsonl")
    base = f"{stem}{SLICE_MARK}{spec.data.start}-{spec.data.end}"
    return str(Path(data_dir) / f"{base}.parquet"), str(Path(data_dir) / f"{base}.val.parquet")


def parse_converted_name(path: str) -> tuple[str, int, int] | None:
    """(source jsonl name, start, end) from a converted parquet name, or None if the name is not ours."""
    name = Path(path).name
    if SLICE_MARK not in name or not name.endswith(".parquet") or name.endswith(".val.parquet"):
        return None
    stem, _, rest = name.rpartition(SLICE_MARK)
    start, _, end = rest.removesuffix(".parquet").partition("-")
    return f"{stem}.jsonl", int(start), int(end)


def _messages(prompt: Any, row: int) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in prompt):
        return [{"role": str(m["role"]), "content": str(m["content"])} for m in prompt]
    raise ValueError(f"row {row}: prompt must be a string or a list of {{role, content}} messages, got {prompt!r:.80}")


def _read_slice(path: Path, start: int, end: int) -> list[dict[str, Any]]:
    rows = []
    with path.open() as f:
        for index, line in enumerate(f):
            if index >= end:
                break
            if index >= start and line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path} line {index + 1}: not JSON ({exc.msg})") from exc
    if len(rows) < end - start:
        raise ValueError(f"{path}: asked for rows [{start}:{end}) but the file has only {start + len(rows)} rows")
    return rows


def _verl_rows(rows, start, input_key, label_key, data_source, split) -> list[dict[str, Any]]:
    out = []
    for offset, row in enumerate(rows):
        index = start + offset
        if input_key not in row or label_key not in row:
            raise ValueError(f"row {index}: missing {input_key!r} or {label_key!r} (keys: {sorted(row)})")
        out.append(
            {
                "data_source": data_source,
                "prompt": _messages(row[input_key], index),
                "ability": "MATH",
                "reward_model": {"ground_truth": str(row[label_key]), "style": "rule"},
                "extra_info": {"index": index, "split": split},
            }
        )
    return out


def _write(rows: list[dict[str, Any]], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
            ("extra_info", pa.struct([("index", pa.int64()), ("split", pa.string())])),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    try:
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _write_both(*outputs: tuple[list[dict[str, Any]], Path]) -> None:
    """Both parquet files or neither: a failure removes what this call already wrote."""
    done: list[Path] = []
    new_folders = sorted({p for _, path in outputs for p in [path.parent, *path.parent.parents] if not p.exists()})
    try:
        for rows, path in outputs:
            _write(rows, path)
            done.append(path)
    except BaseException:
        for path in done:
            path.unlink(missing_ok=True)
        for folder in reversed(new_folders):  # deepest first; only the folders this call made, and only if empty
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise


def convert_jsonl_to_parquet(
    *,
    source: str | Path,
    start: int,
    end: int,
    train_file: str | Path,
    val_file: str | Path,
    val_rows: int,
    input_key: str = "prompt",
    label_key: str = "label",
    data_source: str = "math_dapo",
) -> ConversionReport:
    if start < 0 or end <= start:
        raise ValueError(f"--start {start} --end {end}: the slice [start:end) must hold at least one row")
    if val_rows < 1:
        raise ValueError(f"--val-rows must be >= 1, got {val_rows}")
    rows = _read_slice(Path(source), start, end)
    train = _verl_rows(rows, start, input_key, label_key, data_source, "train")
    val = _verl_rows(rows[:val_rows], start, input_key, label_key, data_source, "val")
    _write_both((val, Path(val_file)), (train, Path(train_file)))
    with_rm_type = sum(1 for row in rows if isinstance(row.get("metadata"), dict) and "rm_type" in row["metadata"])
    return ConversionReport(len(train), len(val), with_rm_type, str(train_file), str(val_file))


def prepare_step(spec: BenchmarkSpec, data_dir: str | Path, run_py: str) -> dict[str, Any]:
    """The plan's `prepare` entry that writes the VERL parquet files (skipped when they already exist)."""
    train_file, val_file = converted_paths(spec, data_dir)
    argv = ["python3", run_py, "convert-data", "--source", spec.data.prompt_data]
    argv += ["--start", str(spec.data.start), "--end", str(spec.data.end), "--train-file", train_file]
    argv += ["--val-file", val_file, "--val-rows", str(spec.data.val_rows), "--input-key", spec.data.input_key]
    argv += ["--label-key", spec.data.label_key, "--data-source", "math_dapo"]
    return {"name": CONVERT_STEP, "argv": argv, "creates": train_file, "skip_if_exists": True}
