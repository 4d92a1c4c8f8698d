"""The FSDP launches of the Miles release through its own parser: miles-rl 0.0.2's `parse_args()` on the 8 FSDP cells
(4 presets x 2 layouts) planned with the release's spellings, so that with test_miles_parser.py (its 8 Megatron
cells) all 16 of the release's launches meet a real Miles parser.

Two things differ from a real launch, both named here and nothing else:
- `--ci-test` is appended, for parsing only. 0.0.2 refuses `--train-backend fsdp` unless it is set (arguments.py:
  "The FSDP backend has known issues ..."), and reads it nowhere else while parsing (its only other reader is the
  eval metric checker, at run time). The plan never emits it (versions.py: FSDP is not planned for 0.0.2, since
  --ci-test adds per-step checks a benchmark must not time); here the plan is asked with that refusal lifted.
- `ring_flash_attn` is an import stand-in where it cannot be imported (miles_entry_worker.py; in Miles's CPU-CI
  environment it is installed without the flash_attn it needs): 0.0.2 imports it at module level on the FSDP
  parse path (miles.backends.experimental.fsdp_utils) and never calls it while parsing; the stand-in raises if called.
As in every parse of the release here (test_miles_parser.py, parse_worker.py): the device's compute capability is
answered (H100/H200: 9.0) only without a GPU, and triton and torchvision are stood in for only where absent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.miles import versions
from scripts.benchmark.frameworks.miles.parser_check import CAPABILITY_WITHOUT_GPU, RUN_WORKER
from scripts.benchmark.frameworks.miles.parser_check import WORKER as PARSE_WORKER
from scripts.benchmark.frameworks.miles.parser_check import parser_launches
from scripts.benchmark.plan.build import PlanOptions, build_plan
from scripts.benchmark.spec import LAYOUTS, load_preset, preset_names, with_overrides

WORKER = Path(__file__).resolve().parent / "miles_entry_worker.py"
CI_TEST = "--ci-test"
STAND_INS = ["ring_flash_attn"]
CELLS = [(preset, layout) for preset in preset_names() for layout in LAYOUTS]


def release_fsdp_cell(preset: str, layout: str) -> dict:
    """The FSDP cell the plan writes for the release when its FSDP refusal is lifted (and only that)."""
    release = versions.MILES_TARGETS[versions.MILES_RELEASE]
    lifted = {**versions.MILES_TARGETS, versions.MILES_RELEASE: dataclasses.replace(release, fsdp=True)}
    sides = registry.option_pair(compare_verl=False, miles_version=versions.MILES_RELEASE)
    options = PlanOptions(backends=("fsdp",), layout=layout, output_dir=Path("/nonexistent"), sides=sides)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(versions, "MILES_TARGETS", lifted)
        plan = build_plan(with_overrides(load_preset(preset), layout=layout), preset, options)
    assert plan.data["targets"] == {"miles": versions.MILES_RELEASE}
    (cell,) = [cell for cell in plan.data["cells"] if cell["framework"] == "miles"]
    assert "--save-debug-event-data" not in cell["argv"] and CI_TEST not in cell["argv"]
    return cell


def with_flag(argv: list[str], flag: str, value: str | None) -> list[str]:
    argv = list(argv)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
        return argv
    return argv + [flag] + ([value] if value is not None else [])


PLANTED = {
    "a Megatron flag": (
        "--tensor-model-parallel-size",
        "2",
        "error: unrecognized arguments: --tensor-model-parallel-size 2",
    ),
    "context parallelism": ("--context-parallel-size", "2", "Context parallelism is not supported for FSDP backend."),
    "indivisible batch": (
        "--num-steps-per-rollout",
        "3",
        "global_batch_size 16 is not equal to rollout_batch_size 4 * n_samples_per_prompt 4 "
        "// num_steps_per_rollout 3",
    ),
}


def run_release_parser(miles_release: Path, launches: list[dict], tmp: Path) -> list[dict]:
    request, result = tmp / "request.json", tmp / "result.json"
    request.write_text(
        json.dumps(
            {
                "launches": launches,
                "miles_root": None,
                "capability_without_gpu": CAPABILITY_WITHOUT_GPU,
                "stand_ins": STAND_INS,
                "absent_stand_ins": str(PARSE_WORKER),
            }
        )
    )
    env = {**os.environ, "PYTHONPATH": str(miles_release)}
    done = subprocess.run(
        [sys.executable, "-c", RUN_WORKER, str(WORKER), str(request), str(result)],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and result.is_file(), done.stderr[-3000:]
    return json.loads(result.read_text())


@pytest.fixture(scope="module")
def verdicts(miles_release: Path, tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("release-fsdp")
    cases: dict[str, list[str]] = {}
    launches = {}
    for preset, layout in CELLS:
        cell = release_fsdp_cell(preset, layout)
        (launch,) = parser_launches([cell], tmp)
        launches[f"{preset}/{layout}"] = launch
        cases[f"{preset}/{layout}"] = launch["argv"] + [CI_TEST]
    smoke = launches["smoke/colocate"]
    cases["without --ci-test"] = list(smoke["argv"])
    for name, (flag, value, _) in PLANTED.items():
        cases[f"planted/{name}"] = with_flag(smoke["argv"], flag, value) + [CI_TEST]
    requests = [{"argv": argv, "env": smoke["env"], "entry": None} for argv in cases.values()]
    return dict(zip(cases, run_release_parser(miles_release, requests, tmp), strict=True))


@pytest.mark.parametrize("preset,layout", CELLS)
def test_release_accepts_every_fsdp_launch(verdicts, preset, layout):
    assert verdicts[f"{preset}/{layout}"] == {"accepted": True, "stage": None, "error": None}


def test_without_ci_test_the_release_refuses_fsdp_itself(verdicts):
    verdict = verdicts["without --ci-test"]
    assert not verdict["accepted"] and "The FSDP backend has known issues" in verdict["error"]


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_release_rejects_planted_fsdp_mistakes(verdicts, name):
    verdict = verdicts[f"planted/{name}"]
    assert not verdict["accepted"] and verdict["stage"] == "parse"
    assert PLANTED[name][2] in verdict["error"]


def test_ci_test_is_read_nowhere_else_in_the_releases_parsing(miles_release):
    """What makes --ci-test harmless here: in 0.0.2's argument code it gates only the FSDP refusal."""
    readers = []
    for path in sorted((miles_release / "miles" / "utils").glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "args.ci_test" in line:
                readers.append(f"{path.name}:{number}")
    assert readers == ["arguments.py:1797", "metric_checker.py:9"]
