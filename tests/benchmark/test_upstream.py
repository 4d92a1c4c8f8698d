"""upstream/ on the Miles snapshot: apply.py is idempotent, each copied test file is registered where Miles's own test
files are, `--series` cuts the same landing into pull requests that apply in order (each under the size limit, with
its purpose as its subject), the docs are in Miles's navigation, the tier table of the docs is the registration
table's, and the project's dependency files agree with the ones the patch series gives Miles's CI job.

Project-only (upstream/registration.py PROJECT_ONLY). Skips without the Miles snapshot, except where
MILES_BENCH_REQUIRE_MILES_OVERLAY=1 (CI).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import tomllib

REPO_ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = Path(os.environ.get("MILES_BENCH_UPSTREAM", REPO_ROOT.parent / "shared" / "upstream"))
SNAPSHOT = UPSTREAM / "miles-31f1ca9.tar.gz"
APPLY = REPO_ROOT / "upstream" / "apply.py"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]

sys.path.insert(0, str(REPO_ROOT / "upstream"))
import registration  # noqa: E402
import series  # noqa: E402


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """The Miles snapshot, committed to git."""
    if not SNAPSHOT.is_file():
        if os.environ.get("MILES_BENCH_REQUIRE_MILES_OVERLAY") == "1":
            pytest.fail(f"no Miles snapshot {SNAPSHOT} (MILES_BENCH_REQUIRE_MILES_OVERLAY=1)")
        pytest.skip(f"no Miles snapshot {SNAPSHOT}")
    root = tmp_path_factory.mktemp("pristine")
    with tarfile.open(SNAPSHOT) as archive:
        archive.extractall(root, filter="tar")
    for command in (["git", "init", "-q"], ["git", "add", "-A"], [*GIT, "commit", "-q", "-m", "Miles 31f1ca9"]):
        assert run(command, root / "miles").returncode == 0
    return root / "miles"


def clone(pristine: Path, target: Path) -> Path:
    assert run(["git", "clone", "-q", str(pristine), str(target)], target.parent).returncode == 0
    return target


@pytest.fixture(scope="module")
def applied(pristine, tmp_path_factory) -> dict:
    miles = clone(pristine, tmp_path_factory.mktemp("applied") / "miles")
    first = run([sys.executable, str(APPLY), str(miles)], REPO_ROOT)
    status = run(["git", "status", "--porcelain", "--untracked-files=all"], miles).stdout
    return {"miles": miles, "first": first, "status": status}


def test_apply_twice_says_already_applied_and_changes_nothing(applied):
    assert applied["first"].returncode == 0, applied["first"].stderr
    again = run([sys.executable, str(APPLY), str(applied["miles"])], REPO_ROOT)
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout.strip() == f"already applied: {applied['miles']} holds this landing"
    check = run([sys.executable, str(APPLY), str(applied["miles"]), "--check"], REPO_ROOT)
    assert (check.returncode, check.stdout.strip()) == (0, "already applied")
    assert run(["git", "status", "--porcelain", "--untracked-files=all"], applied["miles"]).stdout == applied["status"]


def test_a_checkout_carrying_part_of_the_series_is_refused_in_a_sentence(pristine, tmp_path):
    miles = clone(pristine, tmp_path / "miles")
    first = sorted((REPO_ROOT / "upstream" / "miles").glob("*.patch"))[0]
    assert run(["git", "apply", str(first)], miles).returncode == 0
    done = run([sys.executable, str(APPLY), str(miles)], REPO_ROOT)
    assert done.returncode == 2 and "carries part of the patch series" in done.stderr
    assert "Traceback" not in done.stderr


def registration_place(text: str) -> tuple[int, int, int, int]:
    """(line of the ci_register import, end of the first import block, line of the first call, last import)."""
    body = ast.parse(text).body
    imports = [node for node in body if isinstance(node, (ast.Import, ast.ImportFrom))]
    block_end = 0
    for node in body[1 if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else 0 :]:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            break
        block_end = node.end_lineno
    importing = next(n for n in imports if isinstance(n, ast.ImportFrom) and n.module == "tests.ci.ci_register")
    calls = [
        n
        for n in body
        if isinstance(n, ast.Expr)
        and isinstance(n.value, ast.Call)
        and getattr(n.value.func, "id", "").startswith("register_")
    ]
    return importing.lineno, block_end, calls[0].lineno, imports[-1].end_lineno


def test_each_test_file_imports_and_calls_its_registration_at_the_top(applied):
    files = sorted((applied["miles"] / "tests" / "benchmark").glob("test_*.py"))
    assert {f.name for f in files} == set(registration.CPU_TESTS)
    for path in files:
        text = path.read_text()
        import_line, block_end, call_line, last_import = registration_place(text)
        assert import_line <= block_end, f"{path.name}: the ci_register import is not in the first import block"
        lines = text.splitlines()
        assert call_line == last_import + 2 and lines[last_import] == "", f"{path.name}: not after the imports"
        assert "noqa" not in lines[import_line - 1] and "noqa" not in lines[call_line - 1]
        assert "Miles CI registration (upstream/registration.py)" not in text


@pytest.fixture(scope="module")
def landing(pristine, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("series")
    done = run([sys.executable, str(APPLY), str(pristine), "--series", str(out)], REPO_ROOT)
    assert done.returncode == 0, done.stderr
    return {"out": out, "patches": sorted(out.glob("*.patch")), "listing": (out / "series.txt").read_text()}


def test_the_series_applies_part_by_part_and_ends_where_apply_does(pristine, landing, applied, tmp_path):
    miles = clone(pristine, tmp_path / "miles")
    assert [p.name for p in landing["patches"]] == [f"{i:02d}-{p.slug}.patch" for i, p in enumerate(series.PARTS, 1)]
    for patch, part in zip(landing["patches"], series.PARTS, strict=True):
        done = run([*GIT, "am", "-q", str(patch)], miles)
        assert done.returncode == 0, f"{patch.name}: {done.stderr}"
        subject = run(["git", "log", "-1", "--format=%s"], miles).stdout.strip()
        assert subject == part.purpose
        added = sum(
            int(n)
            for n, *_ in (
                line.split("\t") for line in run(["git", "diff", "--numstat", "HEAD~1"], miles).stdout.splitlines()
            )
            if n.isdigit()
        )
        assert 0 < added <= series.MAX_ADDED_LINES, f"{patch.name}: {added} added lines"
        assert f"{patch.name} {added}\n" in landing["listing"]
    for path in ("tests", "scripts", "docs", "miles", ".github"):
        diff = run(["git", "diff", "--no-index", "--stat", str(applied["miles"] / path), str(miles / path)], tmp_path)
        assert diff.stdout == "", f"the series and apply.py differ under {path}:\n{diff.stdout[-3000:]}"


def test_no_file_of_the_series_lands_before_a_file_it_imports():
    """Each part's own tests import and read only what that part and the ones before it carry: a test that imports
    another test file lands with it, however far the size limit moved that one; one that reads the docs or the golden
    launches lands with them."""
    from apply import product_files

    parts = series.assign(product_files())
    assert series.landing_too_early(parts) == []
    moved = [p for p in parts if p.tests_only and any(f.endswith("test_miles_reader.py") for f in p.files)]
    assert moved, "the size limit no longer moves test_miles_reader.py: pick another test file that it moves"
    where = {rel: i for i, part in enumerate(parts) for rel in part.files}
    assert where["tests/benchmark/test_miles_stdout_defects.py"] >= where["tests/benchmark/test_miles_reader.py"]
    slugs = [part.slug for part in parts]
    assert slugs[where["tests/benchmark/test_golden_commands.py"]] == "goldens"  # reads tests/benchmark/golden/
    assert slugs[where["tests/benchmark/test_knobs.py"]] == "docs"  # reads docs/benchmark/adding-a-framework.md


def test_every_manual_page_is_in_the_docs_navigation(applied):
    docs = applied["miles"] / "docs"
    pages = {p.relative_to(docs).with_suffix("").as_posix() for p in docs.glob("benchmark*.md")}
    pages |= {p.relative_to(docs).with_suffix("").as_posix() for p in (docs / "benchmark").glob("*.md")}

    def listed(node) -> set[str]:
        if isinstance(node, str):
            return {node}
        if isinstance(node, list):
            return set().union(*(listed(item) for item in node)) if node else set()
        if isinstance(node, dict):
            return set().union(*(listed(v) for k, v in node.items() if k in ("tabs", "groups", "pages")))
        return set()

    navigation = listed(json.loads((docs / "docs.json").read_text())["navigation"])
    assert pages - navigation == set() and len(pages) == 14


def test_the_tier_table_of_the_docs_is_the_registration_tables():
    text = (REPO_ROOT / "docs" / "benchmark" / "landing-in-miles.md").read_text()
    block = re.search(r"<!-- tiers:start -->\n(.*?)\n<!-- tiers:end -->", text, re.S)
    assert (
        block and block.group(1) == registration.tier_table()
    ), "regenerate: python upstream/registration.py --markdown"


def patch_file(patch: str, path: str) -> str:
    """A file the patch creates, as it creates it."""
    text = (REPO_ROOT / "upstream" / "miles" / patch).read_text()
    hunk = text.split(f"+++ b/{path}\n", 1)[1].split("\ndiff --git", 1)[0]
    return "".join(line[1:] + "\n" for line in hunk.splitlines() if line.startswith("+"))


def names(requirements: str) -> set[str]:
    lines = [line.split("#")[0].strip() for line in requirements.splitlines()]
    return {re.split(r"[\s<>=~!;\[]", line, maxsplit=1)[0].lower().replace("_", "-") for line in lines if line}


def test_the_projects_dependencies_are_the_ones_miles_ci_job_installs(pristine):
    job = "0001-ci-benchmark-cpu-job.patch"
    no_deps = patch_file(job, "tests/ci/requirements-ci-benchmark-no-deps.txt")
    assert names(no_deps) == names((REPO_ROOT / "tests/benchmark/requirements-no-deps.txt").read_text())
    assert (
        no_deps.splitlines()[-1]
        == (REPO_ROOT / "tests/benchmark/requirements-no-deps.txt").read_text().splitlines()[-1]
    )
    installed = names(patch_file(job, "tests/ci/requirements-ci-benchmark.txt"))
    installed |= names((pristine / "requirements.txt").read_text()) | names(
        (pristine / "tests/ci/requirements-ci-cpu.txt").read_text()
    )
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    needed = names("\n".join(project["dependencies"]))
    for extra in ("verl", "analysis", "flops", "recording"):
        needed |= names("\n".join(project["optional-dependencies"][extra]))
    needed |= names((REPO_ROOT / "tests/benchmark/requirements-test.txt").read_text()) - {"torch", "ray"}
    assert needed - installed == set()
    assert "pyyaml" in installed


def test_the_fetch_rule_installs_what_is_absent(tmp_path, monkeypatch):
    """What Miles's job follows for the VERL wheel: absent, it is fetched with pip into the folder, whole."""
    from tests.benchmark.conftest import VERL_CONFIG, fetched

    monkeypatch.setenv("MILES_BENCH_REQUIRE_VERL_CHECKS", "1")
    folder = fetched(tmp_path / "verl-0.9.1", VERL_CONFIG, ["verl==0.9.1"], "MILES_BENCH_REQUIRE_VERL_CHECKS")
    assert (folder / VERL_CONFIG).is_file() and not list(tmp_path.glob(".verl-0.9.1-*"))
