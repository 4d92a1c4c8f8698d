"""Where a plan is written: re-planning leaves no stale script, --force moves a run aside and never deletes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripts.benchmark.errors import UserError
from scripts.benchmark.plan.folder import write_plan_atomically
from scripts.benchmark.run import build_app
from typer.testing import CliRunner


def _plan(out: Path, *extra: str):
    return CliRunner().invoke(build_app(), ["--preset", "smoke", "--output-dir", str(out), "--dry-run", *extra])


def test_replanning_the_same_spec_replaces_every_script(tmp_path: Path):
    out = tmp_path / "out"
    assert _plan(out, "--backend", "all").exit_code == 0
    assert sorted(p.name for p in (out / "cells").iterdir()) == [
        "miles-fsdp-colocate.sh",
        "miles-megatron-colocate.sh",
    ]
    (out / "data").mkdir()
    (out / "data" / "kept.parquet").write_text("converted data survives a re-plan")
    result = _plan(out, "--backend", "fsdp")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (out / "cells").iterdir()) == ["miles-fsdp-colocate.sh"]
    assert [c["id"] for c in json.loads((out / "plan.json").read_text())["cells"]] == ["miles-fsdp-colocate"]
    assert (out / "data" / "kept.parquet").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left beside it


def test_force_moves_a_run_aside_and_deletes_nothing(tmp_path: Path):
    out = tmp_path / "out"
    assert _plan(out).exit_code == 0
    (out / "manifest.json").write_text('{"a": "run"}')
    refused = _plan(out)
    assert refused.exit_code == 2 and "already holds a run" in refused.output
    moved = _plan(out, "--force")
    assert moved.exit_code == 0, moved.output
    [aside] = [p for p in tmp_path.iterdir() if p.name.startswith("out.replaced-")]
    assert (aside / "manifest.json").read_text() == '{"a": "run"}' and (aside / "plan.json").is_file()
    assert not (out / "manifest.json").exists() and (out / "plan.json").is_file()


def test_a_failing_write_leaves_the_folder_as_it_was(tmp_path: Path):
    out = tmp_path / "out"
    assert _plan(out).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def half_written(tmp: Path) -> list[Path]:
        (tmp / "plan.json").write_text("{}")
        raise PermissionError(13, "Permission denied", str(tmp / "cells"))

    with pytest.raises(UserError, match="cannot write the plan"):
        write_plan_atomically(out, half_written)
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
