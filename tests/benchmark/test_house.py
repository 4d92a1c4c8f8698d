"""The shape of the code: the pipeline's stages are packages, imports flow without cycles, modules and functions stay
small enough to read (CLI option declarations do not count against a function)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = REPO_ROOT / "scripts" / "benchmark"
SOURCES = sorted([*BENCHMARK.rglob("*.py"), *(REPO_ROOT / "miles" / "utils").glob("bench_*.py")])
MAX_TOP_LEVEL_MODULES = 8
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_level_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ours imported at module level (imports inside functions are deferred and cannot cycle at import)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            candidates = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {c for c in candidates if c in known}
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], _ = 1, stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node], _ = 2, stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _counted_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function minus its own and its nested functions' signatures and docstrings."""
    excluded: set[int] = set()
    for node in ast.walk(function):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            excluded |= set(range(node.lineno, node.body[0].lineno))
            first = node.body[0]
            docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            if docstring and isinstance(first.value.value, str):
                excluded |= set(range(first.lineno, first.end_lineno + 1))
    return len(set(range(function.lineno, function.end_lineno + 1)) - excluded)


def test_the_pipeline_stages_are_packages_with_few_modules_beside_them():
    top_level = sorted(p.name for p in BENCHMARK.glob("*.py"))
    assert len(top_level) <= MAX_TOP_LEVEL_MODULES, top_level
    for stage in ("contracts", "plan", "frameworks", "runner", "analysis", "report", "history", "calibration"):
        assert (BENCHMARK / stage / "__init__.py").is_file(), f"stage package {stage}/ is missing"


def test_module_imports_have_no_cycle():
    names = {_module_name(p): p for p in SOURCES}
    graph = {name: _module_level_imports(path, set(names)) - {name} for name, path in names.items()}
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def test_no_module_or_function_is_too_long():
    problems = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_MODULE_LINES:
            problems.append(f"{path.relative_to(REPO_ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _counted_lines(node) > MAX_FUNCTION_LINES:
                where = f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name}"
                problems.append(f"{where}: {_counted_lines(node)} lines")
    assert not problems, "\n".join(problems)


def test_the_checks_themselves_catch_what_they_look_for():
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    source = "def f(\n    x=1,\n    y=2,\n):\n    '''Doc.'''\n    return x\n"
    assert _counted_lines(ast.parse(source).body[0]) == 1
