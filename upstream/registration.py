"""Each benchmark test file's Miles CI registration, in one table, and where it goes in the Miles copy.

Miles's runner (tests/ci/run_suite.py) runs a file under tests/benchmark/ only if the file calls
`register_cpu_ci(...)` / `register_cuda_ci(...)` at top level (tests/ci/ci_register.py reads the call from the
AST); a discovered test file without one stops every suite. The project itself has no tests/ci, so its files carry
no call: `with_registration(name, text)` gives a copied file its registration where Miles's own test files have it,
the import sorted into the import block and the call after the imports (upstream/apply.py).

Tiers, as Miles has them (stage-a fast, stage-b slower, GPU stages; nightly cadence):
- FAST: suite benchmark-cpu, every PR. Unit tests of the harness.
- SLOW: suite benchmark-cpu with nightly=True: statistical validations, real Ray nodes and Slurm, the browser,
  VERL's own checks in their own interpreter. Run on the nightly and weekly cadences (and by this project's CI).
- GPU: register_cuda_ci on an H200 suite with the `benchmark` label (added by the patch series); run by Miles as
  `python3 <file>`, so such a file ends with a `__main__` block running its `gpu`-marked tests under pytest.
est_time: seconds measured on a 2-core machine shared with other work (pytest's junit times, 2026-12-03), rounded
up; test_runner_slurm (skipped there without Slurm) and test_report_browser (without Chromium) are estimates.

    python upstream/registration.py             # the table: tier, suite, est_time per file, and the tier totals
    python upstream/registration.py --markdown  # the tier table of docs/benchmark/landing-in-miles.md
"""

from __future__ import annotations

import json
import sys

SUITE_CPU = "benchmark-cpu"
SUITE_GPU = "stage-b-2-gpu-h200"
GPU_LABELS = ["benchmark"]

FAST = "fast"
SLOW = "slow"

# file (under tests/benchmark/) -> (tier, est_time seconds)
CPU_TESTS: dict[str, tuple[str, int]] = {
    "test_bad_inputs.py": (FAST, 5),
    "test_bench_tracking.py": (FAST, 2),
    "test_bench_metrics.py": (FAST, 1),
    "test_bisect.py": (FAST, 25),
    "test_bisect_git.py": (FAST, 6),
    "test_bisect_rates.py": (SLOW, 40),
    "test_bisect_runs.py": (SLOW, 90),
    "test_calibration.py": (FAST, 53),
    "test_check_statistics.py": (SLOW, 55),
    "test_data_prep.py": (FAST, 2),
    "test_docs.py": (FAST, 1),
    "test_end_to_end.py": (FAST, 11),
    "test_flops_model.py": (FAST, 1),
    "test_golden_commands.py": (FAST, 1),
    "test_history.py": (FAST, 26),
    "test_hostile_names.py": (FAST, 9),
    "test_house.py": (FAST, 2),
    "test_knobs.py": (FAST, 1),
    "test_learning.py": (FAST, 2),
    "test_learning_power.py": (FAST, 25),
    "test_learning_run.py": (FAST, 2),
    "test_learning_validation.py": (SLOW, 80),
    "test_metrics_cli.py": (FAST, 4),
    "test_miles_ci_gate.py": (FAST, 1),
    "test_miles_launch.py": (FAST, 1),
    "test_miles_parser.py": (FAST, 118),
    "test_miles_reader.py": (FAST, 1),
    "test_miles_stdout_defects.py": (FAST, 1),
    "test_miles_tracking_exact.py": (FAST, 10),
    "test_miles_launcher_mode.py": (FAST, 20),
    "test_paired_check.py": (FAST, 8),
    "test_paired_check_rates.py": (SLOW, 40),
    "test_parity.py": (FAST, 2),
    "test_plan_cli.py": (FAST, 11),
    "test_plan_folder.py": (FAST, 1),
    "test_plan_travels.py": (FAST, 12),
    "test_reader_restarts.py": (FAST, 1),
    "test_report.py": (FAST, 3),
    "test_report_browser.py": (SLOW, 30),
    "test_report_headline.py": (FAST, 1),
    "test_report_plots.py": (FAST, 5),
    "test_report_statistics.py": (FAST, 1),
    "test_runner_matrix.py": (FAST, 44),
    "test_runner_ownership.py": (FAST, 27),
    "test_runner_ray.py": (SLOW, 130),
    "test_runner_rounds.py": (FAST, 35),
    "test_runner_slurm.py": (SLOW, 120),
    "test_runner_units.py": (FAST, 6),
    "test_secrets.py": (FAST, 5),
    "test_policy_lag.py": (FAST, 2),
    "test_schedule_parity.py": (FAST, 3),
    "test_second_generator_validation.py": (SLOW, 45),
    "test_sglang_keys.py": (FAST, 1),
    "test_spec.py": (FAST, 1),
    "test_statistics_validation.py": (SLOW, 160),
    "test_verl_launch.py": (FAST, 120),
    "test_verl_own_checks.py": (SLOW, 138),
    "test_verl_reader.py": (FAST, 1),
    "test_verl_writer_code.py": (SLOW, 66),
    "test_verl_staleness_code.py": (SLOW, 60),
    "test_verl_sglang_server.py": (SLOW, 15),
    "test_miles_release_fsdp.py": (FAST, 50),
    "test_metric_registry.py": (FAST, 8),
    "test_miles_vs_miles.py": (FAST, 70),
    "test_report_calibration.py": (FAST, 5),
    "test_third_framework.py": (FAST, 13),
    "test_recording.py": (SLOW, 180),
    "test_train_only.py": (FAST, 30),
}

# file -> why its CPU registration is disabled in Miles (register_cpu_ci(..., disabled=...): run_suite lists it as
# skipped with this reason). Each names an assumption of this project's test venv that a Miles tree breaks; the
# file's owner makes the assertion hold in both, then the row goes.
DISABLED_IN_MILES: dict[str, str] = {
    "test_docs.py": "reads the checkout's README.md as the benchmark's own (its links, the entry-page anchor)",
    "test_miles_launch.py": "asserts Miles is not importable (test_miles_parser_branch_reports_unavailable_here)",
    "test_runner_units.py": "asserts SGLang is not installed in the test interpreter (TestGpuProbes package probe)",
    "test_calibration.py": "the FLOP counter check expects torch 2.13 exactly (torch 2.14.1 counts 1.0000138x)",
}

# file -> est_time on the GPU (its gpu-marked tests only)
GPU_TESTS: dict[str, int] = {
    "test_calibration.py": 900,
}

PROJECT_ONLY = {
    "tests/benchmark/test_readme_run.py": "runs this project's README main command (Miles has its own README)",
    "tests/benchmark/test_workflows.py": "lints this project's workflows with its actionlint wrapper (.ci/)",
    "tests/benchmark/test_miles_overlay.py": "builds a Miles overlay from ../shared/upstream: the project's check "
    "that this very apply works",
    "tests/benchmark/test_upstream.py": "checks upstream/ (apply, the series, the registrations) on the snapshot",
    "tests/benchmark/setup_env.sh": "builds this project's test environments (Miles's CI job installs its own)",
    "tests/benchmark/requirements-test.txt": "this project's test environment",
    "tests/benchmark/requirements-verl-checks.txt": "this project's VERL-check environment",
    "tests/benchmark/requirements-miles-overlay.txt": "this project's copy of Miles's CPU-CI environment",
    "tests/benchmark/requirements-no-deps.txt": "this project's copy of the job's no-deps list (Miles has "
    "tests/ci/requirements-ci-benchmark-no-deps.txt)",
    "scripts/benchmark/frameworks/miles/miles-cli.json": "Miles's flag inventory out of tree; in Miles its parser "
    "answers (frameworks/miles/cli_inventory.py)",
}
"""Files that serve the project around the product, not the product: never copied into Miles."""

REGISTER_MODULE = "tests.ci.ci_register"
FIRST_PARTY = ("miles", "miles_plugins")
"""Miles's isort settings (pyproject.toml): only these are first-party; `scripts.` and `tests.` are third-party."""


def registration_calls(name: str) -> tuple[list[str], list[str]]:
    """The names to import from tests.ci.ci_register, and the calls, of one test file."""
    if name not in CPU_TESTS:
        raise SystemExit(f"{name} has no row in upstream/registration.py: add its tier and est_time")
    tier, est = CPU_TESTS[name]
    arguments = [f"est_time={est}", f'suite="{SUITE_CPU}"'] + (["nightly=True"] if tier == SLOW else [])
    if name in DISABLED_IN_MILES:
        arguments.append(f"disabled={json.dumps(DISABLED_IN_MILES[name])}")
    calls = [call("register_cpu_ci", arguments)]
    if name not in GPU_TESTS:
        return ["register_cpu_ci"], calls
    labels = ", ".join(f'"{label}"' for label in GPU_LABELS)
    calls.append(f'register_cuda_ci(est_time={GPU_TESTS[name]}, suite="{SUITE_GPU}", labels=[{labels}])')
    return ["register_cpu_ci", "register_cuda_ci"], calls


def call(function: str, arguments: list[str]) -> str:
    """One line when it fits in black's 119 columns, else black's exploded form (an argument a line)."""
    line = f"{function}({', '.join(arguments)})"
    if len(line) <= 119:
        return line
    return "\n".join([f"{function}(", *(f"    {argument}," for argument in arguments), ")"])


def _section(node) -> str:
    import ast

    module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
    top = (module or "").split(".")[0]
    if isinstance(node, ast.ImportFrom) and node.module == "__future__":
        return "future"
    if top in sys.stdlib_module_names:
        return "stdlib"
    return "first" if top in FIRST_PARTY else "third"


def with_registration(name: str, text: str) -> str:
    """The file with its registration where Miles puts it: `from tests.ci.ci_register import ...` sorted into the
    first import block as isort sorts it (black profile: plain imports before from-imports in a section), and the
    calls right after the file's last top-level import."""
    import ast

    names, calls = registration_calls(name)
    lines = text.splitlines()
    body = ast.parse(text).body
    imports = [node for node in body if isinstance(node, (ast.Import, ast.ImportFrom))]
    if not imports:
        raise SystemExit(f"{name}: no top-level import to put the Miles CI registration after")
    block = []
    for node in body[1 if isinstance(body[0], ast.Expr) else 0 :]:  # the first block, after the docstring
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            break
        block.append(node)
    importing = f"from {REGISTER_MODULE} import {', '.join(names)}"
    third = [node for node in block if _section(node) == "third"]
    after_us = [
        node
        for node in third
        if isinstance(node, ast.ImportFrom) and (node.module or "").lower() > REGISTER_MODULE.lower()
    ]
    if after_us:
        insert_at, new_lines = after_us[0].lineno - 1, [importing]
    elif third:
        insert_at, new_lines = third[-1].end_lineno, [importing]
    else:  # a new third-party section, between the standard library's and Miles's
        earlier = [node for node in block if _section(node) in ("future", "stdlib")]
        insert_at = earlier[-1].end_lineno if earlier else block[0].lineno - 1
        new_lines = ([""] if earlier else []) + [importing] + ([""] if len(earlier) < len(block) else [])
    last_import = imports[-1].end_lineno
    call_lines = ["", *calls]
    out = lines[:insert_at] + new_lines + lines[insert_at:]
    after = last_import + len(new_lines)  # the first block is never below the last import
    out = out[:after] + call_lines + out[after:]
    return "\n".join(out) + "\n"


def tier_totals() -> dict[str, tuple[int, int]]:
    """tier -> (files enabled in Miles, their est_time in seconds)."""
    totals = {FAST: (0, 0), SLOW: (0, 0)}
    for name, (tier, est) in CPU_TESTS.items():
        if name not in DISABLED_IN_MILES:
            files, seconds = totals[tier]
            totals[tier] = (files + 1, seconds + est)
    return totals


TIER_ROWS = {
    FAST: (
        "fast: the harness's unit tests, and the VERL and Miles release parsers on every generated launch",
        "every PR",
    ),
    SLOW: (
        "slow: statistical validations, real Ray nodes and Slurm, the browser, VERL's own checks",
        "nightly, weekly",
    ),
}


def tier_table() -> str:
    """The tier table of docs/benchmark/landing-in-miles.md (between its `tiers` markers), from this file's table."""
    rows = ["| tier | registration | runs | files enabled in Miles, est. time |", "|---|---|---|---|"]
    for tier, (files, seconds) in tier_totals().items():
        what, runs = TIER_ROWS[tier]
        nightly = ", nightly=True" if tier == SLOW else ""
        registration = f'`register_cpu_ci(est, "{SUITE_CPU}"{nightly})`'
        rows.append(f"| {what} | {registration} | {runs} | {files} files, {seconds} s ({seconds / 60:.1f} min) |")
    gpu = ", ".join(f"`{name}`" for name in GPU_TESTS)
    labels = ", ".join(f'"{label}"' for label in GPU_LABELS)
    rows.append(
        f'| GPU: calibration on the device | `register_cuda_ci(est, "{SUITE_GPU}", labels=[{labels}])` '
        f"| PRs labelled `run-ci-benchmark`, nightly, weekly | {gpu} |"
    )
    return "\n".join(rows)


def main() -> int:
    if sys.argv[1:] == ["--markdown"]:
        print(tier_table())
        return 0
    for name, (tier, est) in sorted(CPU_TESTS.items()):
        gpu = f"  + {SUITE_GPU} {GPU_TESTS[name]}s" if name in GPU_TESTS else ""
        print(f"{name:36} {SUITE_CPU} {tier:4} {est:4}s{gpu}")
    for tier, (files, seconds) in tier_totals().items():
        print(f"{tier}: {files} files enabled in Miles, est. {seconds} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
