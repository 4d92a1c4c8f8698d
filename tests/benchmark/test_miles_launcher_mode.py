"""Miles's launcher runs the benchmark's Miles cell: `scripts/run_mcore_fsdp.py --mode benchmark` (its
`execute_benchmark` entrypoint) recorded by Miles's own launch-script harness (tests/fast/launch_scripts: frozen
environment, command recorder, `<REPO_ROOT>` placeholders). Its commands are pinned by a snapshot where Miles keeps
its launchers' (tests/snapshots/launch_scripts/py), and the `ray job submit` line runs exactly the plan's Miles argv:
for FSDP word for word; for Megatron after the Miles model args that execute_train puts first, each of which the
plan's argv sets again to the same value (the last flag wins).

Runs inside a Miles checkout (the overlay test runs the fast tier there); elsewhere it skips: there is no Miles
launcher to run.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = REPO_ROOT / "scripts" / "run_mcore_fsdp.py"
SNAPSHOT = REPO_ROOT / "tests/snapshots/launch_scripts/py/scripts/run_mcore_fsdp.py/execute_benchmark.txt"

if not (REPO_ROOT / "tests" / "fast" / "launch_scripts" / "py_harness.py").is_file():
    pytest.skip(
        "Miles's launch-script harness is not here: this test runs inside a Miles checkout", allow_module_level=True
    )
py_harness = pytest.importorskip("tests.fast.launch_scripts.py_harness", reason="Miles's launch-script harness")
sh_harness = pytest.importorskip("tests.fast.launch_scripts.sh_harness", reason="Miles's launch-script harness")

from scripts.benchmark.frameworks.miles.launch import MilesPaths, build_miles_launch  # noqa: E402
from scripts.benchmark.frameworks.miles.launcher import MEGATRON_MODEL_TYPES  # noqa: E402
from scripts.benchmark.spec import load_preset, with_overrides  # noqa: E402

from miles.utils.external_utils.model_args_utils import load_model_args  # noqa: E402


def record(monkeypatch, sandbox: Path, **overrides) -> tuple[list[str], str]:
    """The launcher's `execute_benchmark` under Miles's harness: its shell commands, and the formatted snapshot."""
    py_harness.freeze_environment(monkeypatch)
    recording = py_harness.install_command_recorder(monkeypatch)
    module = py_harness.import_launch_script(LAUNCHER)
    py_harness.call_entrypoint(module, "execute_benchmark", overrides, sandbox=sandbox)
    return recording.commands, py_harness.format_recording(recording, sandbox=sandbox)


def submitted(commands: list[str]) -> tuple[dict, list[str]]:
    """The runtime environment and the argv after `--` of the one `ray job submit` command."""
    (line,) = [c for c in commands if "ray job submit" in c]
    words = shlex.split(line.split("ray job submit", 1)[1])
    env = next(w for w in words if w.startswith("--runtime-env-json="))
    return json.loads(env.split("=", 1)[1])["env_vars"], words[words.index("--") + 1 :]


def planned_argv(preset: str, backend: str, colocate: bool) -> list[str]:
    layout = "colocate" if colocate else "disaggregated"
    spec = with_overrides(load_preset(preset), layout=layout)
    paths = MilesPaths(miles_root=str(REPO_ROOT), megatron_root="/root/Megatron-LM")
    return build_miles_launch(spec, backend, layout, paths).argv


def flag_values(words: list[str]) -> dict[str, str | None]:
    """Flag -> its value (None for a switch), the last one winning, as Miles's parser reads them."""
    values: dict[str, str | None] = {}
    for index, word in enumerate(words):
        if word.startswith("--"):
            following = words[index + 1] if index + 1 < len(words) else None
            values[word] = None if following is None or following.startswith("--") else following
    return values


def same_value(a: str | None, b: str | None) -> bool:
    try:
        return a == b or float(a) == float(b)
    except (TypeError, ValueError):
        return False


def test_the_benchmark_mode_matches_its_snapshot(monkeypatch, tmp_path):
    _, text = record(monkeypatch, tmp_path)
    sh_harness.assert_matches_snapshot(SNAPSHOT, text, "scripts/run_mcore_fsdp.py::execute_benchmark")


@pytest.mark.parametrize("preset", sorted(MEGATRON_MODEL_TYPES))
@pytest.mark.parametrize(
    "backend,colocate", [("fsdp", True), ("fsdp", False), ("megatron", True), ("megatron", False)]
)
def test_the_launcher_submits_the_plans_miles_argv(monkeypatch, tmp_path, preset, backend, colocate):
    commands, _ = record(
        monkeypatch, tmp_path, benchmark_preset=preset, train_backend=backend, colocate=colocate, output_dir="/o"
    )
    env, argv = submitted(commands)
    plan = planned_argv(preset, backend, colocate)
    assert env["BENCH_TRACKING_DIR"] == f"/o/{py_harness.FROZEN_RUN_ID}/sink/miles-tracking"
    if backend == "fsdp":
        assert argv == plan
        return
    model_args = load_model_args(MEGATRON_MODEL_TYPES[preset]).split()
    assert argv == plan[:2] + model_args + plan[2:]
    planned = flag_values(plan[2:])
    assert all(flag in planned and same_value(planned[flag], value) for flag, value in flag_values(model_args).items())


def test_the_normal_mode_is_unchanged_by_the_benchmark_mode(monkeypatch, tmp_path):
    """The launcher's own runs keep their command (Miles's snapshot of `execute`)."""
    py_harness.freeze_environment(monkeypatch)
    recording = py_harness.install_command_recorder(monkeypatch)
    module = py_harness.import_launch_script(LAUNCHER)
    py_harness.call_entrypoint(module, "execute", {}, sandbox=tmp_path)
    text = py_harness.format_recording(recording, sandbox=tmp_path)
    assert text == (SNAPSHOT.parent / "execute.txt").read_text()
