"""Golden files of the emitted commands, one per preset x backend x layout (Miles's tests/snapshots idea): the exact
per-cell scripts of the Miles and the VERL cell, with machine paths as placeholders, then the parity.md of the pair.
A diff here is the review artifact for any change to a preset, a launch builder or a parity row.

Regenerate: MILES_BENCH_UPDATE_GOLDEN=1 python -m pytest -q tests/benchmark/test_golden_commands.py
"""

import os
from functools import cache
from pathlib import Path

import pytest

from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.miles.launch import MilesPaths
from scripts.benchmark.plan.build import PlanOptions, build_plan, cell_prepare_steps, render_cell_script
from scripts.benchmark.plan.parity import parity_markdown
from scripts.benchmark.spec import BACKENDS, LAYOUTS, load_preset, preset_names, with_overrides

GOLDEN_DIR = Path(__file__).parent / "golden"
UPDATE = os.environ.get("MILES_BENCH_UPDATE_GOLDEN") == "1"
OUTPUT_DIR = Path("<OUTPUT_DIR>")
CHECKOUT_PARENT = Path(__file__).resolve().parents[3]
"""The folder holding this checkout: a path of this machine that must never reach a golden file."""


@cache
def golden_text(preset: str, backend: str, layout: str) -> str:
    options = PlanOptions(
        backends=(backend,),
        layout=layout,
        output_dir=OUTPUT_DIR,
        sides=registry.option_pair(compare_verl=True, miles_version=None),
        settings={"miles": MilesPaths(miles_root="<MILES_ROOT>", megatron_root="<MEGATRON_ROOT>")},
        run_py="<REPO_ROOT>/scripts/benchmark/run.py",
    )
    plan = build_plan(with_overrides(load_preset(preset), layout=layout), preset, options)
    parts = []
    for cell in plan.data["cells"]:
        prepare = cell_prepare_steps(cell, plan.data["prepare"])
        parts.append(f"### {cell['script']}\n" + render_cell_script(cell, prepare, OUTPUT_DIR))
    parts.append("### parity.md\n" + parity_markdown(plan.parity, plan.title, plan.sides))
    return "\n".join(parts)


def golden_path(preset: str, backend: str, layout: str) -> Path:
    return GOLDEN_DIR / preset / f"{backend}-{layout}.txt"


@pytest.mark.parametrize("preset", preset_names())
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_emitted_commands_match_golden(preset, backend, layout):
    path, text = golden_path(preset, backend, layout), golden_text(preset, backend, layout)
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"missing golden {path}; regenerate with MILES_BENCH_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path} differs; review the diff, then regenerate"


def test_golden_files_carry_no_machine_paths():
    """Placeholders only: no absolute path of the machine that generated them."""
    for path in GOLDEN_DIR.rglob("*.txt"):
        text = path.read_text()
        assert f"{CHECKOUT_PARENT}/" not in text and "/tmp/" not in text and "<OUTPUT_DIR>" in text


def test_no_stale_golden_files():
    expected = {golden_path(p, b, lay) for p in preset_names() for b in BACKENDS for lay in LAYOUTS}
    assert set(GOLDEN_DIR.rglob("*.txt")) == expected
