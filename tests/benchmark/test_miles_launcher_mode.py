"""Miles's launcher runs the benchmark's Miles cell: `scripts/run_mcore_fsdp.py --mode benchmark` (its
`execute_benchmark` entrypoint) recorded by Miles's own launch-script harness (tests/fast/launch_scripts: frozen
environment, command recorder, `<REPO_ROOT>` placeholders). Its commands are pinned by a snapshot where Miles keeps
its launchers' (tests/snapshots/launch_scripts/py), and the `ray job submit` line runs exactly the plan's Miles argv
for every preset, backend and layout the plan covers (but qwen3-30b-a3b under Megatron, refused with what it
needs): for FSDP word for word; for Megatron after the Miles model args that execute_train puts first, each of which
the plan's argv sets again to the same value (the last flag wins). Every launcher option is honoured (the checkpoint
and data folders, the GPUs per node, ...) or, when set, refused with a sentence (exit 2).

Runs inside a Miles checkout (the overlay test runs the fast tier there); elsewhere it skips: there is no Miles
launcher to run.
"""

from __future__ import annotations

import dataclasses
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
from scripts.benchmark.frameworks.miles.launcher import (  # noqa: E402
    HONOURED,
    MEGATRON_MODEL_TYPES,
    MEGATRON_NEEDS,
    REFUSED,
)
from scripts.benchmark.spec import BenchmarkSpec, load_preset, preset_names, with_overrides  # noqa: E402

from miles.utils.external_utils.model_args_utils import load_model_args  # noqa: E402


def record(monkeypatch, sandbox: Path, **overrides) -> tuple[list[str], str]:
    """The launcher's `execute_benchmark` under Miles's harness: its shell commands, and the formatted snapshot."""
    py_harness.freeze_environment(monkeypatch)
    recording = py_harness.install_command_recorder(monkeypatch)
    module = py_harness.import_launch_script(LAUNCHER)
    py_harness.call_entrypoint(module, "execute_benchmark", overrides, sandbox=sandbox)
    return recording.commands, py_harness.format_recording(recording, sandbox=sandbox)


def submitted(commands: list[str]) -> tuple[dict, list[str]]:
    """The runtime environment and the argv after `--` of the one job submission."""
    (line,) = [c for c in commands if "ray job submit" in c]
    words = shlex.split(line.split("ray job submit", 1)[1])
    env = next(w for w in words if w.startswith("--runtime-env-json="))
    return json.loads(env.split("=", 1)[1])["env_vars"], words[words.index("--") + 1 :]


def planned_argv(spec: BenchmarkSpec, backend: str, layout: str) -> list[str]:
    paths = MilesPaths(miles_root=str(REPO_ROOT), megatron_root="/root/Megatron-LM")
    return build_miles_launch(spec, backend, layout, paths).argv


def preset_spec(preset: str, layout: str, models: str = "/root/models", data: str = "/root/datasets", gpus=None):
    """The preset as the plan has it, with the launcher's folders (Miles's defaults: the preset's own)."""
    spec = load_preset(preset)
    dump = with_overrides(spec, layout=layout, gpus_per_node=gpus).model_dump()
    dump["model"]["hf_checkpoint"] = f"{models}/{Path(spec.model.hf_checkpoint).name}"
    dump["data"]["prompt_data"] = f"{data}/dapo-math-17k/dapo-math-17k.jsonl"
    return BenchmarkSpec.model_validate(dump)


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


def assert_runs_the_plan(argv: list[str], plan: list[str], backend: str, preset: str) -> None:
    if backend == "fsdp":
        assert argv == plan
        return
    model_args = load_model_args(MEGATRON_MODEL_TYPES[preset]).split()
    assert argv == plan[:2] + model_args + plan[2:]
    planned = flag_values(plan[2:])
    assert all(flag in planned and same_value(planned[flag], value) for flag, value in flag_values(model_args).items())


def test_the_benchmark_mode_matches_its_snapshot(monkeypatch, tmp_path):
    _, text = record(monkeypatch, tmp_path)
    sh_harness.assert_matches_snapshot(SNAPSHOT, text, "scripts/run_mcore_fsdp.py::execute_benchmark")


CELLS = [
    (preset, backend, colocate)
    for preset in preset_names()
    for backend in ("fsdp", "megatron")
    for colocate in (True, False)
    if not (backend == "megatron" and preset in MEGATRON_NEEDS)
]


@pytest.mark.parametrize("preset,backend,colocate", CELLS)
def test_the_launcher_submits_the_plans_miles_argv(monkeypatch, tmp_path, preset, backend, colocate):
    commands, _ = record(
        monkeypatch, tmp_path, benchmark_preset=preset, train_backend=backend, colocate=colocate, output_dir="/o"
    )
    env, argv = submitted(commands)
    layout = "colocate" if colocate else "disaggregated"
    assert env["BENCH_TRACKING_DIR"] == f"/o/{py_harness.FROZEN_RUN_ID}/sink/miles-tracking"
    assert_runs_the_plan(argv, planned_argv(preset_spec(preset, layout), backend, layout), backend, preset)


def test_every_preset_the_plan_covers_is_covered_and_megatron_30b_says_what_it_needs(monkeypatch, tmp_path, capsys):
    assert {preset for preset, _, _ in CELLS} == set(preset_names())
    assert set(MEGATRON_NEEDS) | set(MEGATRON_MODEL_TYPES) == set(preset_names())
    with pytest.raises(SystemExit) as refused:
        record(monkeypatch, tmp_path, benchmark_preset="qwen3-30b-a3b", train_backend="megatron")
    assert refused.value.code == 2
    assert "--moe-router-dtype fp32" in capsys.readouterr().err


def test_the_checkpoint_data_and_gpu_options_are_honoured(monkeypatch, tmp_path):
    overrides = {"model_dir": "/m", "data_dir": "/d", "num_gpus_per_node": 4, "benchmark_preset": "qwen3-1.7b-base"}
    commands, _ = record(monkeypatch, tmp_path, **overrides, train_backend="fsdp")
    _, argv = submitted(commands)
    spec = preset_spec("qwen3-1.7b-base", "colocate", models="/m", data="/d", gpus=4)
    assert argv == planned_argv(spec, "fsdp", "colocate")
    assert "/m/Qwen3-1.7B-Base" in argv and flag_values(argv)["--actor-num-gpus-per-node"] == "4"
    assert any(word.startswith("/d/dapo-math-17k/dapo-math-17k.jsonl@") for word in argv)
    assert " --num-gpus 4 " in next(c for c in commands if "ray start" in c)


def test_every_launcher_option_is_honoured_or_refused(monkeypatch):
    module = py_harness.import_launch_script(LAUNCHER)
    fields = {field.name for field in dataclasses.fields(module.ScriptArgs)}
    assert fields == HONOURED.keys() | REFUSED.keys() and not HONOURED.keys() & REFUSED.keys()


SET = {
    "use_ref": True,
    "model_name": "Qwen3-4B",
    "num_nodes": 2,
    "enable_eval": False,
    "multi_eval": True,
    "true_on_policy": True,
    "dynamic_sampling": True,
    "extra_args": "--use-kl-loss",
}
"""A value other than the default for every refused option."""


@pytest.mark.parametrize("option", sorted(REFUSED))
def test_a_refused_option_exits_2_with_its_sentence_and_submits_nothing(monkeypatch, tmp_path, capsys, option):
    py_harness.freeze_environment(monkeypatch)
    recording = py_harness.install_command_recorder(monkeypatch)
    module = py_harness.import_launch_script(LAUNCHER)
    with pytest.raises(SystemExit) as refused:
        py_harness.call_entrypoint(module, "execute_benchmark", {option: SET[option]}, sandbox=tmp_path)
    assert refused.value.code == 2 and recording.commands == []
    flag = "--" + option.replace("_", "-")
    assert capsys.readouterr().err.strip() == f"error: benchmark mode: {flag}: {REFUSED[option]}"


def test_a_preset_that_does_not_fit_the_node_is_refused(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        record(monkeypatch, tmp_path, hardware="GB300")
    assert refused.value.code == 2
    assert "preset qwen3-4b needs 8 GPUs per node, the node has 4 (--hardware GB300)" in capsys.readouterr().err


def test_the_normal_mode_is_unchanged_by_the_benchmark_mode(monkeypatch, tmp_path):
    """The launcher's own runs keep their command (Miles's snapshot of `execute`)."""
    py_harness.freeze_environment(monkeypatch)
    recording = py_harness.install_command_recorder(monkeypatch)
    module = py_harness.import_launch_script(LAUNCHER)
    py_harness.call_entrypoint(module, "execute", {}, sandbox=tmp_path)
    text = py_harness.format_recording(recording, sandbox=tmp_path)
    assert text == (SNAPSHOT.parent / "execute.txt").read_text()
