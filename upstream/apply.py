"""Put the benchmark onto a Miles checkout: the project's files at their Miles paths, the patch series, and each
test file's Miles CI registration. This is how the Miles PR is produced (docs/benchmark/landing-in-miles.md).

    python upstream/apply.py MILES_CHECKOUT            # copy, patch, register
    python upstream/apply.py MILES_CHECKOUT --check    # only `git apply --check` the patch series; change nothing

- Files: `PRODUCT_PATHS` (scripts/benchmark/, miles/utils/bench_*.py, tests/benchmark/, docs/benchmark.md,
  docs/benchmark/, the launch snapshot of run_mcore_fsdp.py's benchmark mode), copied over whatever the checkout
  has there; caches, `__pycache__` and the project-only test files of `registration.PROJECT_ONLY` stay behind.
- Patches: `upstream/miles/*.patch` in name order, each applied with `git apply` after a `git apply --check` of the
  whole series; a patch that does not apply cleanly stops everything before any file is copied.
- Registration: `registration.insert_registrations` appends each copied test file's `register_cpu_ci(...)` /
  `register_cuda_ci(...)` (from the one table in upstream/registration.py); the project's own files carry none,
  since the project has no `tests/ci`.
Prints every path it added or changed (repo-relative), one a line, after "changed:".
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent
PATCH_DIR = HERE / "miles"
sys.path.insert(0, str(HERE))

from registration import PROJECT_ONLY, insert_registrations  # noqa: E402

PRODUCT_PATHS = (
    "scripts/benchmark",
    "miles/utils/bench_*.py",
    "tests/benchmark",
    "docs/benchmark.md",
    "docs/benchmark",
    "tests/snapshots/launch_scripts/py/scripts/run_mcore_fsdp.py/execute_benchmark.txt",
)
"""The design's paths: the same relative path in this project and in Miles (the benchmark mode's launch snapshot
sits beside Miles's own launcher snapshots)."""
SKIPPED_NAMES = {"__pycache__", ".pytest_cache"}


def patches() -> list[Path]:
    return sorted(PATCH_DIR.glob("*.patch"))


def product_files(root: Path = PROJECT_ROOT) -> list[str]:
    """Every file the project puts into Miles, repo-relative, sorted (project-only tests left out)."""
    found: set[str] = set()
    for pattern in PRODUCT_PATHS:
        for match in root.glob(pattern):
            candidates = [match] if match.is_file() else [p for p in match.rglob("*") if p.is_file()]
            for path in candidates:
                rel = path.relative_to(root)
                if SKIPPED_NAMES & set(rel.parts) or path.suffix == ".pyc":
                    continue
                if rel.as_posix() in PROJECT_ONLY:
                    continue
                found.add(rel.as_posix())
    return sorted(found)


def patched_files() -> list[str]:
    """Files the patch series changes in Miles (from the diff headers)."""
    changed = []
    for patch in patches():
        for line in patch.read_text().splitlines():
            if line.startswith("+++ b/"):
                changed.append(line[len("+++ b/") :])
    return changed


def git_apply(miles: Path, patch: Path, check: bool) -> None:
    command = ["git", "apply", "--whitespace=error-all", *(["--check"] if check else []), str(patch)]
    done = subprocess.run(command, cwd=miles, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{patch.name} does not apply cleanly to {miles}:\n{done.stderr.strip()}")


def apply(miles: Path, check_only: bool = False) -> list[str]:
    if not (miles / "tests" / "ci" / "run_suite.py").is_file():
        raise SystemExit(f"{miles} is not a Miles checkout (no tests/ci/run_suite.py)")
    for patch in patches():
        git_apply(miles, patch, check=True)
    if check_only:
        return []
    files = product_files()
    for rel in files:
        target = miles / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_ROOT / rel, target)  # the mode too: the stand-in executables
    for patch in patches():
        git_apply(miles, patch, check=False)
    insert_registrations(miles)
    return sorted(set(files) | set(patched_files()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("miles", type=Path, help="a Miles checkout (31f1ca9 or later)")
    parser.add_argument("--check", action="store_true", help="only check that the patch series applies cleanly")
    args = parser.parse_args(argv)
    changed = apply(args.miles.resolve(), check_only=args.check)
    if args.check:
        print(f"{len(patches())} patch(es) apply cleanly to {args.miles}")
    else:
        print("changed:")
        print("\n".join(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
