"""Every generated Miles launch through a real Miles release's own parser: `miles.utils.arguments.parse_args()` of
miles-rl 0.0.2 (the backend parser, hf_validate_args against the preset's config.json, miles_validate_args,
Megatron's validate_args, sglang_validate_args), exactly as train.py and train_async.py call it, in one child process
whose sys.path holds the isolated release and not this repository.

For Megatron launches it then builds the TransformerConfig from the parsed args, as Miles's model provider does:
Megatron checks attention heads, query groups and experts against TP/EP there, not in validate_args. Without
TransformerEngine that step stops at TE's rope-fusion check (TE_ABSENT), after those parallelism checks.

What the child leaves out, and why (parse_worker.py): no GPU here, so Megatron's compute-capability questions (TP/CP
> 1, grouped GEMM) are answered with 9.0, the value of the H100/H200 the presets target; triton is SGLang's own stub
and torchvision a placeholder that raises when called (neither has a build that loads beside CPU torch; parsing
calls neither).

FSDP is not parsed by the release: miles-rl 0.0.2 refuses --train-backend fsdp outside its CI tests, and the plan
refuses to target it (versions.py); the FSDP cells of the default target are checked by the flag inventory only.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.miles.launch import MilesPaths
from scripts.benchmark.frameworks.miles.parser_check import entry_flags, job_env, parser_launches, run_miles_parser
from scripts.benchmark.frameworks.miles.versions import DEFAULT_MILES_TARGET, MILES_RELEASE
from scripts.benchmark.plan.build import PlanError, PlanOptions, build_plan
from scripts.benchmark.run import build_app
from scripts.benchmark.spec import LAYOUTS, load_preset, preset_names, with_overrides
from typer.testing import CliRunner

CELLS = [(preset, layout) for preset in preset_names() for layout in LAYOUTS]


def miles_cells(preset: str, layout: str, version: str, backends=("megatron",)) -> list[dict]:
    sides = registry.option_pair(compare_verl=False, miles_version=version)
    options = PlanOptions(backends=backends, layout=layout, output_dir=Path("/nonexistent"), sides=sides)
    plan = build_plan(with_overrides(load_preset(preset), layout=layout), preset, options)
    assert plan.data["targets"] == {"miles": version}
    return [cell for cell in plan.data["cells"] if cell["framework"] == "miles"]


def with_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    """argv with flag set to value (replaced where present, appended otherwise)."""
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
        return argv
    return argv + [flag] + ([value] if value is not None else [])


PLANTED = {
    "unknown flag": (("smoke", "colocate"), [("--no-such-flag", "1")], "unrecognized arguments: --no-such-flag"),
    "indivisible batch": (
        ("smoke", "colocate"),
        [("--num-steps-per-rollout", "3")],
        "global_batch_size 16 is not equal to rollout_batch_size 4 * n_samples_per_prompt 4 "
        "// num_steps_per_rollout 3",
    ),
    "fully-async (no such flag in the release)": (
        ("smoke", "disaggregated"),
        [("--fully-async", None)],
        "unrecognized arguments: --fully-async",
    ),
    "TP not dividing the world size": (
        ("smoke", "colocate"),
        [("--tensor-model-parallel-size", "3")],
        "world size (1) is not divisible by total_model_size (total_model_size=3)",
    ),
}
TP_NOT_DIVIDING_HEADS = [("--tensor-model-parallel-size", "3"), ("--actor-num-gpus-per-node", "6")]
"""qwen3-4b (32 heads) on 6 GPUs with TP 3: the world size divides, the heads do not."""
TE_ABSENT = "ValueError: apply_rope_fusion is not available. Please install TE >= 1.4. (transformer_config.py:1589)"
"""Where building the TransformerConfig stops on a machine without TransformerEngine: after Megatron's parallelism
checks (heads, query groups, experts against TP/EP), so a config that gets this far passed them."""


@pytest.fixture(scope="module")
def verdicts(miles_release: Path, tmp_path_factory) -> dict[str, dict]:
    """One child for all launches: every release-targeted cell, the planted mistakes, the default target's cells."""
    tmp = tmp_path_factory.mktemp("miles-parse")
    cases: dict[str, dict] = {}
    for preset, layout in CELLS:
        for cell in miles_cells(preset, layout, MILES_RELEASE):
            cases[f"{MILES_RELEASE}/{preset}/{cell['id']}"] = cell
        for cell in miles_cells(preset, layout, DEFAULT_MILES_TARGET):
            cases[f"{DEFAULT_MILES_TARGET}/{preset}/{cell['id']}"] = cell
    planted = {
        **{name: planted for name, (*planted, _) in PLANTED.items()},
        "TP not dividing heads": (("qwen3-4b", "colocate"), TP_NOT_DIVIDING_HEADS),
    }
    for name, ((preset, layout), changes) in planted.items():
        cell = dict(miles_cells(preset, layout, MILES_RELEASE)[0])
        for flag, value in changes:
            cell["argv"] = with_flag(cell["argv"], flag, value)
        cases[f"planted/{name}"] = cell
    for preset, layout in CELLS:
        plan = train_only_plan(preset, layout)
        cases[f"train-only/{preset}/{layout}/replay"] = plan["cells"][0]
        cases[f"train-only/{preset}/{layout}/record"] = plan["recording"]["record_cell"]
    launches = parser_launches(list(cases.values()), tmp)
    results = run_miles_parser(launches, [str(miles_release)], sys.executable, transformer_config=True)
    return dict(zip(cases, results, strict=True))


def train_only_plan(preset: str, layout: str) -> dict:
    """The release's train-only plan: its Megatron replay cell and its recording pass."""
    sides = registry.option_pair(compare_verl=False, miles_version=MILES_RELEASE)
    options = PlanOptions(backends=("megatron",), layout=layout, output_dir=Path("/nonexistent"), sides=sides)
    return build_plan(with_overrides(load_preset(preset), layout=layout, train_only=True), preset, options).data


@pytest.mark.parametrize("preset,layout", CELLS)
def test_release_accepts_every_train_only_launch(verdicts, preset, layout):
    """The replay launch (--load-debug-rollout-data) and the recording pass (--save-debug-rollout-data)."""
    for role, flag in (("replay", "--load-debug-rollout-data"), ("record", "--save-debug-rollout-data")):
        cell = train_only_plan(preset, layout)["cells" if role == "replay" else "recording"]
        argv = cell[0]["argv"] if role == "replay" else cell["record_cell"]["argv"]
        assert argv[argv.index(flag) + 1].endswith("/miles/{rollout_id}.pt")
        verdict = verdicts[f"train-only/{preset}/{layout}/{role}"]
        assert verdict == {"accepted": True, "error": None, "config_error": TE_ABSENT}, (role, verdict)


@pytest.mark.parametrize("preset,layout", CELLS)
def test_release_accepts_every_generated_megatron_launch(verdicts, preset, layout):
    verdict = verdicts[f"{MILES_RELEASE}/{preset}/miles-megatron-{layout}"]
    assert verdict == {"accepted": True, "error": None, "config_error": TE_ABSENT}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_release_rejects_planted_mistakes(verdicts, name):
    verdict = verdicts[f"planted/{name}"]
    assert not verdict["accepted"]
    assert PLANTED[name][2] in verdict["error"]


def test_heads_not_divisible_by_tp_rejected_by_megatrons_config(verdicts):
    """The release's parse_args lets it through; the TransformerConfig Miles builds from the args refuses it."""
    verdict = verdicts["planted/TP not dividing heads"]
    assert verdict["accepted"], verdict["error"]
    assert verdict["config_error"].startswith(
        "ValueError: num_attention_heads (32) must be a multiple of tensor_model_parallel_size (3)."
    )


@pytest.mark.parametrize("preset,layout", CELLS)
def test_release_rejects_only_the_sglang_spelling_of_the_newer_target(verdicts, preset, layout):
    """What versions.py says differs is what the release's parser says: where the newer target spells the CUDA-graph
    cap for the newer SGLang it runs (renamed in 0.5.14), the release's bundled SGLang does not know it; a preset that
    sets no cap is accepted as it is."""
    verdict = verdicts[f"{DEFAULT_MILES_TARGET}/{preset}/miles-megatron-{layout}"]
    if load_preset(preset).rollout.cuda_graph_max_bs is None or not load_preset(preset).rollout.cuda_graphs:
        assert verdict["accepted"], verdict
    else:
        assert not verdict["accepted"]
        assert verdict["error"].startswith(
            "train.py: error: unrecognized arguments: --sglang-cuda-graph-max-bs-decode "
        )


def test_release_target_refuses_fsdp_and_reads_miles_stdout():
    with pytest.raises(PlanError, match="Miles 0.0.2 refuses --train-backend fsdp"):
        miles_cells("smoke", "colocate", MILES_RELEASE, backends=("fsdp", "megatron"))
    (cell,) = miles_cells("qwen3-30b-a3b", "colocate", MILES_RELEASE)
    assert cell["sink"]["format"] == "miles-stdout" and "--save-debug-event-data" not in cell["argv"]
    assert "--sglang-cuda-graph-max-bs" in cell["argv"] and "--sglang-cuda-graph-max-bs-decode" not in cell["argv"]


def test_launcher_prefix_and_job_env_whatever_the_entry_script(tmp_path):
    """The flags start after the entry script the plan names (train.py today, train_async.py for an async cell)."""
    (cell,) = miles_cells("smoke", "colocate", DEFAULT_MILES_TARGET)
    flags = entry_flags(cell["argv"])
    assert flags[0] == "--hf-checkpoint" and cell["argv"][: -len(flags)][-1].endswith("/train.py")
    async_argv = [cell["argv"][0], cell["argv"][1].replace("train.py", "train_async.py"), *flags]
    assert entry_flags(async_argv) == flags
    assert job_env(cell["launch_argv"]) == {
        "BENCH_TRACKING_DIR": "${BENCH_CELL_DIR}/sink/miles-tracking",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
        "MASTER_ADDR": "127.0.0.1",
        "PYTHONUNBUFFERED": "1",
        "no_proxy": "127.0.0.1",
    }
    (launch,) = parser_launches([cell], tmp_path)
    checkpoint = Path(launch["argv"][1])
    assert json.loads((checkpoint / "config.json").read_text()) == json.loads(Path(cell["model_config"]).read_text())
    assert not any("${BENCH_CELL_DIR}" in token for token in launch["argv"])


class TestPreflight:
    """On a GPU node, a real run asks the installed Miles's own parser first. Here the installed Miles is the
    release, named by --miles-root/--megatron-root as on a node; only the GPU/ray/path checks are skipped (no GPU)."""

    def _run(self, tmp_path, monkeypatch, miles_release, *extra):
        from scripts.benchmark.runner import preflight

        monkeypatch.setattr(preflight, "check_can_execute", lambda plan, skip_prepare=False: [])
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        out = tmp_path / "out"
        argv = ["--backend", "megatron", "--preset", "qwen3-30b-a3b", "--output-dir", str(out), *extra]
        argv += ["--miles-root", str(miles_release), "--megatron-root", str(miles_release)]
        return CliRunner().invoke(build_app(), argv), out

    def test_a_flag_the_installed_miles_lacks_stops_the_run_with_exit_2(self, tmp_path, monkeypatch, miles_release):
        result, out = self._run(tmp_path, monkeypatch, miles_release)
        assert result.exit_code == 2, result.output
        assert "the installed Miles's own parser rejects the plan" in result.output
        assert (
            "miles-megatron-colocate: train.py: error: unrecognized arguments: --sglang-cuda-graph-max-bs-decode"
            in (result.output)
        )
        assert not (out / "manifest.json").exists()

    def test_a_miles_that_cannot_be_imported_means_cannot_execute(self, tmp_path, monkeypatch):
        empty = tmp_path / "no-miles-here"
        empty.mkdir()  # a folder that exists but holds no Miles (a missing folder is refused earlier, by name)
        result, out = self._run(tmp_path, monkeypatch, empty)
        assert result.exit_code == 4, result.output
        assert "cannot execute the plan on this machine: Miles's parser could not run" in result.output

    def test_rejections_name_each_cell_and_release_target_passes(self, miles_release):
        """A Miles-vs-Miles plan (default target against the release): the release's own parser rejects only the
        candidate's cell, whose SGLang flag spelling is newer than the release's."""
        from scripts.benchmark.frameworks.miles.adapter import parser_rejections

        paths = MilesPaths(miles_root=str(miles_release), megatron_root=str(miles_release))
        sides = registry.make_pair(
            registry.side_arg("candidate", f"miles@{DEFAULT_MILES_TARGET}"),
            registry.side_arg("reference", f"miles@{MILES_RELEASE}"),
        )
        options = PlanOptions(
            backends=("megatron",),
            layout="colocate",
            output_dir=Path("/nonexistent"),
            sides=sides,
            settings={"miles": paths},
        )
        try:
            cells = build_plan(load_preset("qwen3-30b-a3b"), "qwen3-30b-a3b", options).data["cells"]
        except PlanError as exc:  # the two targets spell the CUDA-graph cap differently: parity may say so
            cells = exc.plan.data["cells"]
        assert [cell["id"] for cell in cells] == ["miles-megatron-colocate", "miles-base-megatron-colocate"]
        verdicts = parser_rejections(cells, python=sys.executable)
        (rejected,) = (f"{cell}: {why[0]}" for cell, why in verdicts.items() if why)
        assert rejected.startswith("miles-megatron-colocate: train.py: error: unrecognized arguments: --sglang-cuda")

    def test_dry_run_check_miles_against_the_release(self, tmp_path, monkeypatch, miles_release):
        """How a maintainer checks a plan against a Miles of their own, here the release: no GPU, nothing run."""
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
        argv = ["--backend", "all", "--preset", "qwen3-30b-a3b", "--output-dir", str(tmp_path), "--dry-run"]
        argv += ["--check-miles", "--miles-root", str(miles_release), "--megatron-root", str(miles_release)]
        result = CliRunner().invoke(build_app(), argv + ["--miles-version", MILES_RELEASE, "--backend", "megatron"])
        assert result.exit_code == 0, result.output
        assert "Miles's own parser: ok for 1 cell(s)" in result.output and "dry run: nothing executed" in result.output
        result = CliRunner().invoke(build_app(), argv + ["--miles-version", MILES_RELEASE])
        assert result.exit_code == 3 and "Miles 0.0.2 refuses --train-backend fsdp" in result.output

    def test_unknown_miles_version_is_bad_input(self, tmp_path):
        result = CliRunner().invoke(
            build_app(), ["--preset", "smoke", "--output-dir", str(tmp_path), "--dry-run", "--miles-version", "9.9"]
        )
        assert result.exit_code == 2 and "--miles-version must be one of 31f1ca9, 0.0.2, got '9.9'" in result.output


def test_the_continuous_schedule_is_not_planned_for_the_release(tmp_path):
    """miles-rl 0.0.2 has no --fully-async (planted above: its parser refuses it), so a continuous-schedule plan
    targeting it stops at planning with exit 2, naming the spec key; the default target plans it."""
    data = with_overrides(load_preset("smoke"), layout="disaggregated").model_dump(mode="json")
    data["placement"]["async_loop"]["schedule"] = "continuous"
    spec = tmp_path / "continuous.yaml"
    spec.write_text(yaml.safe_dump(data))
    argv = ["--backend", "megatron", "--spec", str(spec), "--layout", "disaggregated", "--dry-run"]
    result = CliRunner().invoke(
        build_app(), [*argv, "--output-dir", str(tmp_path / "out"), "--miles-version", "0.0.2"]
    )
    assert result.exit_code == 2, result.output
    assert "placement.async_loop.schedule=continuous: Miles 0.0.2 has no --fully-async" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(build_app(), [*argv, "--output-dir", str(tmp_path / "ok")])
    assert result.exit_code == 0, result.output
    assert "--fully-async" in (tmp_path / "ok" / "cells" / "miles-megatron-disaggregated.sh").read_text()
