"""Golden files of the emitted commands, one per preset x backend x layout (Miles's tests/snapshots idea): a diff
here is the review artifact for any change to a preset or a launch builder.

Regenerate: MILES_BENCH_UPDATE_GOLDEN=1 python -m pytest -q tests/benchmark/test_golden_commands.py
"""

import os
from pathlib import Path

import pytest

from scripts.benchmark.frameworks.miles import MilesPaths, build_miles_launch
from scripts.benchmark.launch import FrameworkLaunch, render_argv
from scripts.benchmark.spec import BACKENDS, LAYOUTS, load_preset, preset_names, with_overrides

GOLDEN_DIR = Path(__file__).parent / "golden"
PATHS = MilesPaths(miles_root="<MILES_ROOT>", megatron_root="<MEGATRON_ROOT>")
UPDATE = os.environ.get("MILES_BENCH_UPDATE_GOLDEN") == "1"


def render_launch(launch: FrameworkLaunch) -> str:
    lines = [f"# {launch.cell_id}", "## env"] + [f"{k}={v}" for k, v in sorted(launch.env.items())]
    if launch.ray_head_argv:
        lines += ["## ray head"] + render_argv(launch.ray_head_argv)
    lines += ["## launch_argv"] + render_argv(launch.launch_argv)
    return "\n".join(lines) + "\n"


def launches(preset: str, backend: str, layout: str) -> list[FrameworkLaunch]:
    spec = with_overrides(load_preset(preset), layout=layout)
    return [build_miles_launch(spec, backend, layout, PATHS)]


@pytest.mark.parametrize("preset", preset_names())
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_emitted_commands_match_golden(preset, backend, layout):
    for launch in launches(preset, backend, layout):
        path = GOLDEN_DIR / preset / f"{launch.cell_id}.txt"
        text = render_launch(launch)
        if UPDATE:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert path.is_file(), f"missing golden {path}; regenerate with MILES_BENCH_UPDATE_GOLDEN=1"
        assert text == path.read_text(), f"{path} differs; review the diff, then regenerate"


def test_no_stale_golden_files():
    expected = {
        f"{preset}/{launch.cell_id}.txt"
        for preset in preset_names()
        for backend in BACKENDS
        for layout in LAYOUTS
        for launch in launches(preset, backend, layout)
    }
    found = {str(p.relative_to(GOLDEN_DIR)) for p in GOLDEN_DIR.rglob("*.txt")}
    assert found == expected
