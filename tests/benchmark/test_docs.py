"""The manual stays navigable and its Layout section stays true to the tree.

- Every relative link in README.md and docs/**/*.md points to a file that exists, and every `#anchor` to a heading
  of the page it names (GitHub's slug rules: lower case, punctuation dropped, spaces to hyphens, `-1`, `-2` for
  repeats). Links inside fenced code blocks and code spans are not links.
- The Layout section of docs/benchmark.md draws the tree of scripts/benchmark/ and miles/utils/bench_*.py, one line
  per file with its role. Every module there (`__init__.py` aside) must have a line, and every file or folder a line
  names must exist; a failure names each missing and each extra path.
- Every page under docs/benchmark/ is linked from the entry page's page map, and every page of the manual opens with
  YAML front matter that parses and gives a title and a description.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
ENTRY_PAGE = "docs/benchmark.md"
PAGES_DIR = "docs/benchmark"
LAYOUT_HEADING = "Layout"
# (folder, glob): the modules the Layout section must list; __init__.py files are left out.
LAYOUT_MODULES = (("scripts/benchmark", "**/*.py"), ("miles/utils", "bench_*.py"))

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)")
_REFERENCE_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
_HTML_LINK = re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)=["']([^"']+)["']""", re.IGNORECASE)
_HTML_ANCHOR = re.compile(r"""<a\b[^>]*?\b(?:id|name)=["']([^"']+)["']""", re.IGNORECASE)
_URL_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|^//")
# A Layout line: indentation of "│   " / "    " per level, a "├── " / "└── " connector, the name, then the role
# after at least two spaces.
_LAYOUT_LINE = re.compile(r"^(?P<indent>(?:│   |    )*)(?P<connector>[├└]── )?(?P<name>\S+)(?:\s{2,}(?P<role>\S.*))?$")


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of the text outside YAML front matter and fenced code blocks."""
    lines = text.splitlines()
    start = 0
    if lines and lines[0].strip() == "---":
        closing = next((i for i in range(1, len(lines)) if lines[i].strip() in ("---", "...")), None)
        start = 0 if closing is None else closing + 1
    fence = None
    for index in range(start, len(lines)):
        line = lines[index]
        marker = _FENCE.match(line)
        if fence is None and marker:
            fence = marker.group(1)
        elif fence is not None and marker and marker.group(1)[0] == fence[0] and len(marker.group(1)) >= len(fence):
            fence = None
        elif fence is None:
            yield index + 1, line


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text (before the `-1`, `-2` of repeats)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def page_anchors(text: str) -> set[str]:
    """Every anchor a page offers: its headings' slugs, repeats numbered as GitHub does, and HTML id/name anchors."""
    occurrences: dict[str, int] = {}
    anchors: set[str] = set()
    for _, line in prose_lines(text):
        anchors.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if not heading:
            continue
        slug = original = github_slug(heading.group(2))
        while slug in occurrences:
            occurrences[original] += 1
            slug = f"{original}-{occurrences[original]}"
        occurrences[slug] = 0
        anchors.add(slug)
    return anchors


def link_targets(text: str) -> Iterator[tuple[int, str]]:
    """(line number, target) of every inline link, image, reference definition and HTML link outside code."""
    for number, line in prose_lines(text):
        definition = _REFERENCE_DEFINITION.match(line)
        if definition:
            yield number, definition.group(1)
            continue
        prose = _CODE_SPAN.sub("code", line)
        for pattern in (_INLINE_LINK, _HTML_LINK):
            for match in pattern.finditer(prose):
                yield number, match.group(1)


def markdown_files(root: Path) -> list[Path]:
    readme = root / "README.md"
    return ([readme] if readme.is_file() else []) + sorted((root / "docs").rglob("*.md"))


def broken_links(root: Path) -> list[str]:
    """One line per relative link whose file or anchor does not exist, as `file:line: ...`."""
    problems: list[str] = []
    anchors_of: dict[Path, set[str]] = {}
    for page in markdown_files(root):
        where = page.relative_to(root).as_posix()
        for number, target in link_targets(page.read_text(encoding="utf-8")):
            if _URL_SCHEME.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            path_part = unquote(path_part)
            if path_part.startswith("/"):
                linked = (root / path_part.lstrip("/")).resolve()
            else:
                linked = (page.parent / path_part).resolve() if path_part else page.resolve()
            if not linked.exists():
                problems.append(f"{where}:{number}: link `{target}` points to a missing file")
                continue
            if not anchor or linked.suffix != ".md" or not linked.is_file():
                continue
            if linked not in anchors_of:
                anchors_of[linked] = page_anchors(linked.read_text(encoding="utf-8"))
            if unquote(anchor) not in anchors_of[linked]:
                named = linked.relative_to(root.resolve()).as_posix()
                problems.append(f"{where}:{number}: link `{target}`: no heading of {named} has the anchor #{anchor}")
    return problems


def layout_block(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the first fenced block under the entry page's `## Layout` heading."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == f"## {LAYOUT_HEADING}"), None)
    if start is None:
        return []
    block: list[tuple[int, str]] = []
    inside = False
    for index in range(start + 1, len(lines)):
        line = lines[index]
        if not inside and re.match(r"^#{1,2}\s", line):
            break
        if _FENCE.match(line):
            if inside:
                return block
            inside = True
        elif inside and line.strip():
            block.append((index + 1, line.rstrip()))
    return block


def layout_entries(text: str) -> tuple[list[tuple[int, str]], list[str]]:
    """The paths the Layout tree names, with their line numbers, and the lines it cannot read."""
    entries: list[tuple[int, str]] = []
    problems: list[str] = []
    folders: list[str] = []
    for number, line in layout_block(text):
        match = _LAYOUT_LINE.match(line)
        if match is None:
            problems.append(f"{ENTRY_PAGE}:{number}: Layout line is not `<tree indent><name>  <role>`: {line!r}")
            continue
        depth = len(match.group("indent")) // 4 + (1 if match.group("connector") else 0)
        name = match.group("name")
        if depth > len(folders) or (depth == 0 and not name.endswith("/")):
            problems.append(f"{ENTRY_PAGE}:{number}: Layout line {name!r} is not inside a folder line above it")
            continue
        path = "".join(folders[:depth]) + name
        if name.endswith("/"):
            folders[depth:] = [name]
        elif not match.group("role"):
            problems.append(f"{ENTRY_PAGE}:{number}: Layout line {path} has no role after it")
        entries.append((number, path))
    if not entries:
        problems.append(f"{ENTRY_PAGE}: no `## {LAYOUT_HEADING}` section with a fenced tree")
    return entries, problems


def expected_layout_files(root: Path) -> set[str]:
    """The modules the Layout section must name."""
    return {
        path.relative_to(root).as_posix()
        for folder, pattern in LAYOUT_MODULES
        for path in (root / folder).glob(pattern)
        if path.is_file() and path.name != "__init__.py" and "__pycache__" not in path.parts
    }


def layout_mismatches(root: Path) -> list[str]:
    """One line per module the Layout section lacks and per path it names that is not on disk."""
    entries, problems = layout_entries((root / ENTRY_PAGE).read_text(encoding="utf-8"))
    named: set[str] = set()
    seen: dict[str, int] = {}
    for number, path in entries:
        if path in seen:
            problems.append(f"{ENTRY_PAGE}:{number}: Layout names {path} twice (first on line {seen[path]})")
        seen.setdefault(path, number)
        if any(char in path for char in "*?["):
            matches = [match.relative_to(root).as_posix() for match in root.glob(path.rstrip("/"))]
            named.update(matches)
            exists = bool(matches)
        else:
            named.add(path.rstrip("/"))
            exists = (root / path).is_dir() if path.endswith("/") else (root / path).is_file()
        if not exists:
            problems.append(f"{ENTRY_PAGE}:{number}: Layout names {path}, which does not exist: remove or fix it")
    for path in sorted(expected_layout_files(root) - named):
        problems.append(f"{ENTRY_PAGE}: Layout lacks {path}: add a line with its role")
    return problems


def unmapped_pages(root: Path) -> list[str]:
    """Pages under docs/benchmark/ that the entry page does not link to."""
    entry = root / ENTRY_PAGE
    linked = {
        (entry.parent / unquote(target.partition("#")[0])).resolve()
        for _, target in link_targets(entry.read_text(encoding="utf-8"))
        if not _URL_SCHEME.match(target) and target.partition("#")[0]
    }
    return [
        f"{ENTRY_PAGE}: the page map does not link {page.relative_to(root).as_posix()}"
        for page in sorted((root / PAGES_DIR).glob("*.md"))
        if page.resolve() not in linked
    ]


def test_every_relative_link_and_anchor_resolves():
    problems = broken_links(REPO_ROOT)
    assert not problems, "broken links:\n" + "\n".join(problems)


def test_layout_names_every_module_and_only_files_that_exist():
    problems = layout_mismatches(REPO_ROOT)
    assert not problems, "the Layout section of docs/benchmark.md is out of date:\n" + "\n".join(problems)


def test_every_stage_page_is_in_the_page_map():
    assert (REPO_ROOT / PAGES_DIR).is_dir()
    problems = unmapped_pages(REPO_ROOT)
    assert not problems, "\n".join(problems)


def test_every_manual_page_has_front_matter_with_title_and_description():
    pages = [REPO_ROOT / ENTRY_PAGE, *sorted((REPO_ROOT / PAGES_DIR).glob("*.md"))]
    problems = []
    for page in pages:
        where = page.relative_to(REPO_ROOT).as_posix()
        parts = page.read_text(encoding="utf-8").split("---\n", 2)
        if parts[0] or len(parts) < 3:
            problems.append(f"{where}: does not open with `---` front matter")
            continue
        try:
            meta = yaml.safe_load(parts[1])
        except yaml.YAMLError as error:
            problems.append(f"{where}: front matter is not YAML: {error}")
            continue
        missing = [key for key in ("title", "description") if not isinstance(meta, dict) or not meta.get(key)]
        if missing:
            problems.append(f"{where}: front matter lacks {', '.join(missing)}")
    assert not problems, "\n".join(problems)


def test_readme_keeps_the_entry_page_anchor_it_links():
    """README sends readers to the number index; that heading must stay on the entry page."""
    anchors = page_anchors((REPO_ROOT / ENTRY_PAGE).read_text(encoding="utf-8"))
    assert "what-each-number-means" in anchors
    assert "docs/benchmark.md#what-each-number-means" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("What each number means", "what-each-number-means"),
        ("The check (`run.py check DIR --store URL`)", "the-check-runpy-check-dir---store-url"),
        (
            "Calibration: measured peak, roofline and interconnect",
            "calibration-measured-peak-roofline-and-interconnect",
        ),
        ("A Ray cluster (RAY_ADDRESS)", "a-ray-cluster-ray_address"),
        ("How good is the check? (`run.py simulate-check`)", "how-good-is-the-check-runpy-simulate-check"),
        ("The sections of report.md", "the-sections-of-reportmd"),
        ("See [the spec](spec.md) <em>now</em>", "see-the-spec-now"),
    ],
)
def test_github_slug(heading, slug):
    assert github_slug(heading) == slug


def test_repeated_headings_are_numbered_and_code_blocks_are_not_headings():
    text = '---\ntitle: x\n---\n# Notes\n## Notes\n```bash\n# Notes\n```\n### Notes\n<a id="kept"></a>\n'
    assert page_anchors(text) == {"notes", "notes-1", "notes-2", "kept"}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")


def test_checks_name_each_broken_link_and_layout_mismatch(tmp_path):
    """Planted faults: each comes back as one line naming the file, line and path at fault."""
    layout = (
        "```text\nscripts/benchmark/\n├── run.py           entry point\n├── gone.py          removed module\n"
        "├── stage/\n│   └── *.py         the stage\n└── notes.txt\nmiles/utils/\n```\n"
    )
    _write(
        tmp_path,
        {
            "README.md": "[manual](docs/benchmark.md#layout) [gone](docs/missing.md) `[code](nowhere.md)`\n",
            ENTRY_PAGE: f"# Manual\n\n[spec](benchmark/spec.md#the-spec) [bad](#nothing)\n\n## Layout\n\n{layout}",
            f"{PAGES_DIR}/spec.md": "## The spec\n\n[back](../benchmark.md#manual) [up](../../README.md)\n",
            f"{PAGES_DIR}/orphan.md": "## Orphan\n",
            "scripts/benchmark/run.py": "",
            "scripts/benchmark/__init__.py": "",
            "scripts/benchmark/new_module.py": "",
            "scripts/benchmark/notes.txt": "",
            "miles/utils/bench_metrics.py": "",
            "miles/utils/other.py": "",
        },
    )
    assert broken_links(tmp_path) == [
        "README.md:1: link `docs/missing.md` points to a missing file",
        f"{ENTRY_PAGE}:3: link `#nothing`: no heading of {ENTRY_PAGE} has the anchor #nothing",
    ]
    assert layout_mismatches(tmp_path) == [
        f"{ENTRY_PAGE}:13: Layout line scripts/benchmark/notes.txt has no role after it",
        f"{ENTRY_PAGE}:10: Layout names scripts/benchmark/gone.py, which does not exist: remove or fix it",
        f"{ENTRY_PAGE}:11: Layout names scripts/benchmark/stage/, which does not exist: remove or fix it",
        f"{ENTRY_PAGE}:12: Layout names scripts/benchmark/stage/*.py, which does not exist: remove or fix it",
        f"{ENTRY_PAGE}: Layout lacks miles/utils/bench_metrics.py: add a line with its role",
        f"{ENTRY_PAGE}: Layout lacks scripts/benchmark/new_module.py: add a line with its role",
    ]
    assert unmapped_pages(tmp_path) == [f"{ENTRY_PAGE}: the page map does not link {PAGES_DIR}/orphan.md"]


def stage_table(text: str) -> dict[str, set[str]]:
    """The entry page's "Which stage may import which" table: stage -> the stages (code spans) it may import."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "### Which stage may import which")
    table: dict[str, set[str]] = {}
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) != 2 or set(cells[0]) <= {"-"}:
            continue
        names = [m.group(2) for m in _CODE_SPAN.finditer(cells[0])]
        if names:
            table[names[0]] = {m.group(2) for m in _CODE_SPAN.finditer(cells[1])}
    return table


def test_the_layout_draws_the_stage_table_the_house_test_enforces():
    from tests.benchmark.test_house import MAY_IMPORT

    drawn = stage_table((REPO_ROOT / ENTRY_PAGE).read_text(encoding="utf-8"))
    assert drawn == MAY_IMPORT


def test_the_adding_a_framework_page_names_every_member_of_the_adapter_protocol():
    """The protocol table of docs/benchmark/adding-a-framework.md lists every member a new adapter may answer."""
    import inspect
    from typing import get_type_hints

    from scripts.benchmark.frameworks.adapter import FrameworkAdapter

    members = [*get_type_hints(FrameworkAdapter)]
    members += [
        name for name, v in vars(FrameworkAdapter).items() if not name.startswith("_") and inspect.isfunction(v)
    ]
    text = (REPO_ROOT / PAGES_DIR / "adding-a-framework.md").read_text(encoding="utf-8")
    section = text.split("## The adapter protocol", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in members if not re.search(rf"`{name}[`(]", section)]
    assert not missing, f"adding-a-framework.md's protocol table does not name {missing}"
