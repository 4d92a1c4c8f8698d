"""The landing as an ordered series of Miles pull requests: which product files and patches each part carries, its
purpose in one line, and where each test file goes.

Source files go to the part that names them (`PARTS`, first match wins). A test file (or test helper) goes to the
earliest part after which everything it needs is in the tree: every benchmark module it imports (at any depth,
function-local imports included) and, when it runs the CLI (`run.py`, `calibrate.py`) as a program, the CLI part;
tests of a part too large for one pull request move on to the test parts that follow it. The parts apply in order,
each on the tree the previous ones made, and the last one leaves the tree `apply.py` makes in one go.

    python upstream/series.py       # each part: its purpose, files and added lines (the product, before patches)
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent
MAX_ADDED_LINES = 8000
"""A part larger than this is not one reviewable pull request (Miles's last 80 PRs: 90th percentile 6,892)."""
CLI = ("scripts/benchmark/run.py", "scripts/benchmark/calibrate.py")


@dataclass
class Part:
    slug: str
    purpose: str
    sources: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()
    tests_only: bool = False
    files: list[str] = field(default_factory=list)


PARTS = (
    Part(
        "core",
        "scripts/benchmark: the benchmark spec and presets, one metric schema and FLOPs model (miles/utils/bench_*), "
        "the run-folder contracts, Miles's tracking backend for it, and a benchmark-cpu CI job",
        (
            "miles/utils/bench_*.py",
            "scripts/benchmark/__init__.py",
            "scripts/benchmark/errors.py",
            "scripts/benchmark/common/*",
            "scripts/benchmark/spec/*",
            "scripts/benchmark/presets/*",
            "scripts/benchmark/model_config.py",
            "scripts/benchmark/model_configs/*",
            "scripts/benchmark/contracts/*",
            "tests/benchmark/__init__.py",
            "tests/benchmark/conftest.py",
        ),
        ("0001-ci-benchmark-cpu-job.patch", "0002-tracking-bench-backend.patch"),
    ),
    Part(
        "frameworks",
        "scripts/benchmark: the Miles and VERL adapters: matched launches, their parity, each framework's metric sink",
        ("scripts/benchmark/frameworks/*",),
        ("0004-megatron-weight-backup-timer.patch",),
    ),
    Part(
        "plan",
        "scripts/benchmark: the plan of a benchmark run, its cost, and the GPU calibration it is costed with",
        ("scripts/benchmark/plan/*", "scripts/benchmark/calibration/*.py"),
    ),
    Part(
        "report",
        "scripts/benchmark: steady-state statistics, the Miles-vs-VERL comparison and the report",
        ("scripts/benchmark/analysis/*", "scripts/benchmark/report/*"),
    ),
    Part(
        "calibration-data",
        "scripts/benchmark: the H200 calibration measured by calibrate.py (generated data, collapsed in review)",
        ("scripts/benchmark/calibration/results/*",),
    ),
    Part(
        "runner",
        "scripts/benchmark: the runner (Ray, Slurm, resumable run folders) and the nightly history with its gates",
        ("scripts/benchmark/runner/*", "scripts/benchmark/history/*"),
    ),
    Part(
        "cli",
        "scripts/benchmark: the run.py command line (plan, execute, report, history, ab, bisect, train-only)",
        ("scripts/benchmark/commands/*", "scripts/benchmark/run.py", "scripts/benchmark/calibrate.py"),
    ),
    Part(
        "cli-tests",
        "tests/benchmark: the command line end to end: plan, parity, runner, history, bisect",
        tests_only=True,
    ),
    Part(
        "more-cli-tests",
        "tests/benchmark: the report, train-only runs, run-folder ownership and the history store, through the CLI",
        tests_only=True,
    ),
    Part(
        "launcher",
        "scripts/run_mcore_fsdp.py --mode benchmark: the benchmark's Miles cell from Miles's own launcher",
        ("scripts/benchmark/frameworks/miles/launcher.py", "tests/snapshots/launch_scripts/*"),
        ("0003-launcher-benchmark-mode.patch",),
    ),
    Part("docs", "docs: the benchmark's manual, in the docs navigation", ("docs/*",), ("0005-docs-navigation.patch",)),
)


def _module(rel: str) -> str:
    return rel[: -len(".py")].replace("/", ".").removesuffix(".__init__")


def imports_of(rel: str, modules: dict[str, str]) -> set[str]:
    """Product files `rel` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse((PROJECT_ROOT / rel).read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and modules[name] != rel:
                found.add(modules[name])
    return found


def runs_the_cli(rel: str) -> bool:
    text = (PROJECT_ROOT / rel).read_text(errors="replace")
    return any(Path(cli).name in text for cli in CLI)


def lines_of(rel: str) -> int:
    """Added lines in a patch: a binary file (an image) adds none."""
    data = (PROJECT_ROOT / rel).read_bytes()
    return 0 if b"\0" in data else len(data.decode(errors="replace").splitlines())


def assign(files: list[str]) -> tuple[Part, ...]:
    """Every product file in exactly one part (PARTS, with their `files` filled)."""
    parts = tuple(Part(p.slug, p.purpose, p.sources, p.patches, p.tests_only) for p in PARTS)
    index = {p.slug: i for i, p in enumerate(parts)}
    where: dict[str, int] = {}
    for rel in files:  # a file a part names outright, else the first part whose pattern matches it
        named = [i for i, p in enumerate(parts) if rel in p.sources]
        matched = [i for i, p in enumerate(parts) if any(fnmatch.fnmatch(rel, g) for g in p.sources)]
        if named or matched:
            where[rel] = (named or matched)[0]
    modules = {_module(rel): rel for rel in files if rel.endswith(".py")}
    tests = [rel for rel in files if rel not in where]
    cli = index["cli"]
    pending = {rel: imports_of(rel, modules) if rel.endswith(".py") else set() for rel in tests}
    while pending:  # a test after everything it needs; a helper's needs become its users'
        ready = {r: d for r, d in pending.items() if all(x in where for x in d)}
        if not ready:
            raise SystemExit(f"import cycle among test files: {sorted(pending)[:5]}")
        for rel, needs in ready.items():
            earliest = max([where[x] for x in needs] + [cli if rel.endswith(".py") and runs_the_cli(rel) else 0])
            where[rel] = earliest
            del pending[rel]
    helpers = [r for r in tests if r.endswith(".py") and not Path(r).name.startswith("test_")]
    users = {h: [r for r in tests if r.endswith(".py") and h in imports_of(r, modules)] for h in helpers}
    changed = True
    while changed:  # a test helper lands with its first user, never before what it needs itself
        changed = False
        for helper, its_users in users.items():
            latest = max(where[helper], min((where[u] for u in its_users), default=where[helper]))
            changed |= latest != where[helper]
            where[helper] = latest
    for rel in files:  # test data (golden launches, fixtures, stand-ins): with the first test that names its folder
        if not rel.endswith(".py") and rel.startswith("tests/benchmark/") and rel not in _sourced(parts, rel):
            folder = rel.split("/")[2]
            users = [where[t] for t in tests if t.endswith(".py") and folder in (PROJECT_ROOT / t).read_text()]
            where[rel] = min(users, default=where[rel])
    for rel in files:
        parts[where[rel]].files.append(rel)
    return _spill(parts)


def _sourced(parts, rel: str) -> set[str]:
    return {rel} if any(fnmatch.fnmatch(rel, g) for p in parts for g in p.sources) else set()


def _spill(parts: tuple[Part, ...]) -> tuple[Part, ...]:
    """Tests of a part over the size move on to the next part that takes tests, largest test file last."""
    for i, part in enumerate(parts):
        movable = sorted((f for f in part.files if f.startswith("tests/benchmark/test_")), key=lines_of)
        while sum(lines_of(f) for f in part.files) > MAX_ADDED_LINES * 0.9 and movable:
            later = next((p for p in parts[i + 1 :] if p.tests_only), None)
            if later is None:
                break
            moved = movable.pop()
            part.files.remove(moved)
            later.files.append(moved)
    return parts


def main() -> int:
    sys.path.insert(0, str(HERE))
    from apply import product_files

    for number, part in enumerate(assign(product_files()), 1):
        print(f"{number:02d}-{part.slug}: {len(part.files)} files, {sum(map(lines_of, part.files))} lines")
        print(f"    {part.purpose}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
