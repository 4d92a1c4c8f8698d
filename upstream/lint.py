"""Miles's lint (its .pre-commit-config.yaml: the tools at the versions it pins, with its pyproject settings) on the
files the project adds to or changes in a Miles checkout.

    python upstream/lint.py requirements MILES      # pip lines: the pinned tools, from MILES's pre-commit config
    python upstream/lint.py check MILES FILE...     # every hook, check only; exit 1 and the findings when one fails
    python upstream/lint.py fix MILES FILE...       # the same hooks, fixing in place (what pre-commit would do)
    python upstream/lint.py fix-project MILES       # fix the project's own product files the way Miles's lint would

FILE paths are relative to MILES. The hooks, as Miles's pre-commit runs them on those files: check-yaml and
requirements-txt-fixer (pre-commit-hooks), ruff check, autoflake --remove-all-unused-imports, isort --profile=black
--filter-files, black; and the local pygrep bans (mpu.get_, bare Auto*.from_pretrained, huggingface-cli) on Python
files outside their exclusions. Tools run from the folder of this interpreter's `bin` (`--tools DIR` to change),
with MILES as the working directory, so Miles's pyproject settings apply. `fix-project` copies the project's
product files (upstream/apply.py PRODUCT_PATHS) into a scratch copy of the pristine checkout MILES, fixes them there
and copies them back into this project: the one mechanical pass that makes them pass Miles's lint.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# pre-commit repo -> the PyPI package it runs (its rev, minus a leading "v", is the version)
PACKAGES = {
    "https://github.com/pre-commit/pre-commit-hooks": "pre-commit-hooks",
    "https://github.com/astral-sh/ruff-pre-commit": "ruff",
    "https://github.com/PyCQA/autoflake": "autoflake",
    "https://github.com/pycqa/isort": "isort",
    "https://github.com/psf/black": "black",
}


def config(miles: Path) -> dict:
    import yaml

    return yaml.safe_load((miles / ".pre-commit-config.yaml").read_text())


def requirements(miles: Path) -> list[str]:
    lines = []
    for repo in config(miles)["repos"]:
        package = PACKAGES.get(repo["repo"])
        if package is None:
            continue
        lines.append(f"{package}=={repo['rev'].lstrip('v')}")
        for hook in repo.get("hooks", []):
            lines += hook.get("additional_dependencies", [])
    return lines


def pygrep_bans(miles: Path) -> list[dict]:
    bans = []
    for repo in config(miles)["repos"]:
        if repo["repo"] != "local":
            continue
        bans += [hook for hook in repo["hooks"] if hook.get("language") == "pygrep"]
    return bans


def run_hooks(miles: Path, files: list[str], tools: Path, fix: bool) -> list[str]:
    excluded = re.compile(config(miles).get("exclude", "^$"))
    files = [f for f in files if not excluded.search(f)]
    python = [f for f in files if f.endswith(".py")]
    yaml_files = [f for f in files if f.endswith((".yml", ".yaml"))]
    requirement_files = [f for f in files if re.search(r"requirements.*\.txt$", Path(f).name)]
    failures = []

    def hook(name: str, command: list[str], targets: list[str]) -> None:
        if not targets:
            return
        done = subprocess.run([*command, *targets], cwd=miles, capture_output=True, text=True)
        if done.returncode != 0:
            failures.append(f"{name}: exit {done.returncode}\n{(done.stdout + done.stderr).strip()}")

    hook("check-yaml", [str(tools / "check-yaml")], yaml_files)
    hook("requirements-txt-fixer", [str(tools / "requirements-txt-fixer")], requirement_files if fix else [])
    if not fix and requirement_files:  # the fixer has no check mode: run it on copies, and compare
        import shutil
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            copies = []
            for index, rel in enumerate(requirement_files):
                copy = Path(tmp) / f"{index}-requirements.txt"
                shutil.copyfile(miles / rel, copy)
                copies.append((rel, copy))
            subprocess.run([str(tools / "requirements-txt-fixer"), *(str(c) for _, c in copies)], capture_output=True)
            unsorted = [rel for rel, copy in copies if copy.read_text() != (miles / rel).read_text()]
            if unsorted:
                failures.append(f"requirements-txt-fixer: would rewrite {unsorted}")
    hook("ruff-check", [str(tools / "ruff"), "check", *(["--fix"] if fix else [])], python)
    autoflake = [str(tools / "autoflake"), "--remove-all-unused-imports", "--in-place" if fix else "--check"]
    hook("autoflake", autoflake, python)
    hook(
        "isort",
        [str(tools / "isort"), "--profile=black", "--filter-files", *([] if fix else ["--check-only"])],
        python,
    )
    hook("black", [str(tools / "black"), *([] if fix else ["--check"])], python)
    for ban in pygrep_bans(miles):
        if ban.get("types") != ["python"]:
            continue
        exclude = re.compile(ban["exclude"]) if ban.get("exclude") else None
        pattern = re.compile(ban["entry"])
        for rel in python:
            if exclude and exclude.search(rel):
                continue
            for number, line in enumerate((miles / rel).read_text().splitlines(), 1):
                if pattern.search(line):
                    failures.append(f"{ban['id']}: {rel}:{number}: {line.strip()}")
    return failures


def fix_project(miles: Path, tools: Path) -> int:
    import shutil
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from apply import PROJECT_ROOT, product_files

    files = product_files()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp) / "miles"
        shutil.copytree(miles, scratch, symlinks=True, ignore=shutil.ignore_patterns(".git", ".cache"))
        for rel in files:
            (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PROJECT_ROOT / rel, scratch / rel)
        run_hooks(scratch, files, tools, fix=True)
        rewritten = [rel for rel in files if (scratch / rel).read_bytes() != (PROJECT_ROOT / rel).read_bytes()]
        for rel in rewritten:
            shutil.copy2(scratch / rel, PROJECT_ROOT / rel)
        left = run_hooks(scratch, files, tools, fix=False)
    print("\n".join(["rewritten:", *rewritten]))
    if left:
        print("\n\n".join(["still failing (fix by hand):", *left]))
    return 1 if left else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["requirements", "check", "fix", "fix-project"])
    parser.add_argument("miles", type=Path)
    parser.add_argument("files", nargs="*")
    parser.add_argument("--tools", type=Path, default=Path(sys.executable).parent)
    args = parser.parse_args(argv)
    if args.action == "requirements":
        print("\n".join(requirements(args.miles)))
        return 0
    if args.action == "fix-project":
        return fix_project(args.miles.resolve(), args.tools.absolute())
    failures = run_hooks(args.miles.resolve(), args.files, args.tools.absolute(), fix=args.action == "fix")
    print("\n\n".join(failures) if failures else f"Miles's lint: {len(args.files)} file(s) pass")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
