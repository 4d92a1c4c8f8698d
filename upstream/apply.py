"""Put the benchmark onto a Miles checkout: the project's files at their Miles paths, the patch series, and each
test file's Miles CI registration. This is how the Miles PR is produced (docs/benchmark/landing-in-miles.md).

    python upstream/apply.py MILES_CHECKOUT                # copy, patch, register ("already applied" when it is)
    python upstream/apply.py MILES_CHECKOUT --check        # only check that the patch series applies; change nothing
    python upstream/apply.py MILES_CHECKOUT --series OUT   # the same landing as an ordered series of pull requests

- Files: `PRODUCT_PATHS` (scripts/benchmark/, miles/utils/bench_*.py, tests/benchmark/, docs/benchmark.md,
  docs/benchmark/, the launch snapshot of run_mcore_fsdp.py's benchmark mode), copied over whatever the checkout
  has there; caches, `__pycache__` and the project-only files of `registration.PROJECT_ONLY` stay behind.
- Patches: `upstream/miles/*.patch` in name order, after a `git apply --check` of the whole series; a patch that
  does not apply stops everything before any file is copied. On a checkout that already carries the whole series
  (every patch reverses cleanly) the patches are left as they are and the files refreshed: a second run changes
  nothing and says "already applied".
- Registration: `registration.with_registration` imports and calls each copied test file's `register_cpu_ci(...)`
  / `register_cuda_ci(...)` at the top of the file (from the one table in upstream/registration.py).
- `--series OUT`: the same result as a series of commits on a scratch clone of the (clean, git) checkout, one per
  part of upstream/series.py, written as OUT/NN-<part>.patch (`git format-patch`; its subject is the part's purpose),
  each applying with `git am` on the previous ones; OUT/series.txt lists them with their added lines.
Prints every path it added or changed (repo-relative), one a line, after "changed:".
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROJECT_ROOT = HERE.parent
PATCH_DIR = HERE / "miles"
sys.path.insert(0, str(HERE))

from registration import PROJECT_ONLY, with_registration  # noqa: E402

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


def fail(message: str) -> None:
    """A checkout or an option this cannot work with: one message, exit 2."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def patches() -> list[Path]:
    return sorted(PATCH_DIR.glob("*.patch"))


def product_files(root: Path = PROJECT_ROOT) -> list[str]:
    """Every file the project puts into Miles, repo-relative, sorted (project-only files left out)."""
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


def patched_files(names: list[Path] | None = None) -> list[str]:
    """Files the patch series (or the named patches) changes in Miles, from the diff headers."""
    changed = []
    for patch in patches() if names is None else names:
        for line in patch.read_text().splitlines():
            if line.startswith("+++ b/"):
                changed.append(line[len("+++ b/") :])
    return changed


def git_apply(miles: Path, patch: Path, *flags: str) -> subprocess.CompletedProcess:
    command = ["git", "apply", "--whitespace=error-all", *flags, str(patch)]
    return subprocess.run(command, cwd=miles, capture_output=True, text=True)


def series_state(miles: Path) -> str:
    """ "fresh" (every patch applies), "applied" (every patch reverses), or exit 2 naming what is neither."""
    if all(git_apply(miles, p, "--check").returncode == 0 for p in patches()):
        return "fresh"
    if all(git_apply(miles, p, "--check", "--reverse").returncode == 0 for p in patches()):
        return "applied"
    for patch in patches():
        done = git_apply(miles, patch, "--check")
        if done.returncode != 0 and git_apply(miles, patch, "--check", "--reverse").returncode != 0:
            fail(f"{patch.name} neither applies to {miles} nor is applied there:\n{done.stderr.strip()}")
    fail(f"{miles} carries part of the patch series: check it out anew, then apply")


def product_text(rel: str) -> bytes:
    """A product file as it lands in Miles: a test file with its registration."""
    data = (PROJECT_ROOT / rel).read_bytes()
    if rel.startswith("tests/benchmark/test_") and rel.endswith(".py"):
        return with_registration(Path(rel).name, data.decode()).encode()
    return data


def copy_files(miles: Path, files: list[str]) -> list[str]:
    """Copy files whose Miles copy differs (mode kept: the stand-in executables); the ones written."""
    written = []
    for rel in files:
        target, data = miles / rel, product_text(rel)
        if target.is_file() and target.read_bytes() == data:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        shutil.copymode(PROJECT_ROOT / rel, target)
        written.append(rel)
    return written


def apply(miles: Path, check_only: bool = False) -> tuple[str, list[str]]:
    """The series' state before ("fresh" or "applied") and the paths changed ([] when it held this landing)."""
    if not (miles / "tests" / "ci" / "run_suite.py").is_file():
        fail(f"{miles} is not a Miles checkout (no tests/ci/run_suite.py)")
    state = series_state(miles)
    if check_only:
        return state, []
    written = copy_files(miles, product_files())
    if state == "fresh":
        for patch in patches():
            done = git_apply(miles, patch)
            if done.returncode != 0:
                fail(f"{patch.name} does not apply cleanly to {miles}:\n{done.stderr.strip()}")
        written += patched_files()
    return state, sorted(set(written))


def git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=miles-bench", "-c", "user.email=miles-bench@localhost"]
    done = subprocess.run(["git", *identity, *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        fail(f"git {' '.join(args)} failed in {repo}:\n{done.stderr.strip()}")
    return done.stdout


def write_series(miles: Path, out: Path) -> list[tuple[str, int]]:
    """The landing as one commit per part on a scratch clone of `miles`, written as OUT/NN-<part>.patch."""
    from series import assign

    if git(miles, "status", "--porcelain", "--untracked-files=all").strip():
        fail(f"{miles} has uncommitted changes: the series is cut from a clean checkout")
    series_state(miles)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "miles"
        git(Path(tmp), "clone", "--quiet", "--no-hardlinks", str(miles), str(scratch))
        for number, part in enumerate(assign(product_files()), 1):
            copy_files(scratch, part.files)
            for name in part.patches:
                done = git_apply(scratch, PATCH_DIR / name)
                if done.returncode != 0:
                    fail(f"{name} does not apply after the parts before it:\n{done.stderr.strip()}")
            git(scratch, "add", "-A")
            git(scratch, "commit", "--quiet", "-m", part.purpose)
            name = f"{number:02d}-{part.slug}.patch"
            patch = git(scratch, "format-patch", "-1", "--stdout", "--binary", "--no-signature", "HEAD")
            (out / name).write_text(patch)
            written.append((name, _added(scratch)))
    (out / "series.txt").write_text("".join(f"{name} {added}\n" for name, added in written))
    return written


def _added(repo: Path) -> int:
    """Lines the last commit adds (binary files add none)."""
    total = 0
    for line in git(repo, "diff", "--numstat", "HEAD~1", "HEAD").splitlines():
        added = line.split("\t", 1)[0]
        total += int(added) if added.isdigit() else 0
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("miles", type=Path, help="a Miles checkout (31f1ca9 or later)")
    parser.add_argument("--check", action="store_true", help="only check that the patch series applies cleanly")
    parser.add_argument("--series", type=Path, metavar="OUT", help="write the landing as a series of patches")
    args = parser.parse_args(argv)
    miles = args.miles.resolve()
    if args.series:
        for name, added in write_series(miles, args.series):
            print(f"{name}: {added} added lines")
        return 0
    state, changed = apply(miles, check_only=args.check)
    if args.check:
        print(f"{len(patches())} patch(es) apply cleanly to {args.miles}" if state == "fresh" else "already applied")
    elif not changed:
        print(f"already applied: {args.miles} holds this landing")
    else:
        print("changed:")
        print("\n".join(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
