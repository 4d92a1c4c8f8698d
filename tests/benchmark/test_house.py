"""The shape of the code: the pipeline's stages are packages, imports point down the pipeline (module-level and
function-local alike) without cycles, no module outside a framework's own folder names a framework, and modules and
functions stay small enough to read (CLI option declarations do not count against a function)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from scripts.benchmark.frameworks import registry

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = REPO_ROOT / "scripts" / "benchmark"
SOURCES = sorted([*BENCHMARK.rglob("*.py"), *(REPO_ROOT / "miles" / "utils").glob("bench_*.py")])
MAX_TOP_LEVEL_MODULES = 8
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

MAY_IMPORT: dict[str, set[str]] = {
    "schema": set(),
    "common": {"schema"},
    "spec": {"common", "schema"},
    "contracts": {"spec", "common", "schema"},
    "frameworks": {"contracts", "spec", "common", "schema"},
    "plan": {"frameworks", "calibration", "contracts", "spec", "common", "schema"},
    "runner": {"frameworks", "contracts", "spec", "common", "schema"},
    "analysis": {"frameworks.registry", "calibration", "contracts", "spec", "common", "schema"},
    "report": {"contracts", "spec", "common", "schema"},
    "history": {"analysis", "contracts", "spec", "common", "schema"},
    "calibration": {"contracts", "spec", "common", "schema"},
    "commands": {"plan", "runner", "analysis", "report", "history", "calibration", "frameworks", "contracts", "spec"}
    | {"common", "schema"},
    "entry": {"commands", "calibration", "spec", "common", "schema"},
}
"""Which stage may import which, lowest first (docs/benchmark.md, "Layout", draws the same table). `schema` is
miles/utils/bench_*.py; top-level errors.py counts as common, model_config.py as spec, run.py and calibrate.py as
entry points. `frameworks.registry` is the one module of frameworks/ the analysis may read (side labels); the
analysis reads measured ceilings from calibration/ (MFU against the measured peak, the roofline), the plan its
rooflines (the cost estimate, plan/cost.py)."""

TOP_LEVEL_STAGE = {"errors": "common", "model_config": "spec", "run": "entry", "calibrate": "entry"}
NAMES_ALLOWED: dict[str, set[str]] = {
    "scripts/benchmark/frameworks/registry.py": {"*"},
    "scripts/benchmark/spec/pins.py": {"miles", "verl"},
    "miles/utils/bench_flops.py": {"miles", "verl"},
    "scripts/benchmark/contracts/parity.py": {"miles", "verl"},
    "scripts/benchmark/commands/plan.py": {"miles", "verl"},
    "scripts/benchmark/commands/execute.py": {"miles", "verl"},
}
"""Files outside frameworks/<name>/ that may name a framework, and which: the registry entries, and the spec's
default SGLang pins (data keyed by adapter name), the FLOPs model's cross-checks against each framework's own formula
(and Miles's device table, which answers first inside a Miles checkout), the parity contract's reading of its
version-1 field names, and the two commands whose historical options name a framework (--compare-verl, --miles-root,
--miles-version, --miles-python, ...): byte-identical CLI, each value mapped onto sides and frameworks by one call
into the registry (option_pair, option_runtimes, settings)."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage(module: str) -> str:
    parts = module.split(".")
    if parts[:2] == ["miles", "utils"]:
        return "schema"
    if len(parts) == 2:
        return "entry"
    if len(parts) == 3:
        return TOP_LEVEL_STAGE.get(parts[2], parts[2])
    return parts[2]


def _imports(path: Path, known: set[str]) -> dict[str, int]:
    """Modules of ours this file imports, anywhere in it (module level or inside functions), with the first line."""
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            candidates = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        for candidate in candidates:
            if candidate in known:
                found.setdefault(candidate, node.lineno)
    return found


def _import_graph() -> dict[str, dict[str, int]]:
    names = {_module_name(p): p for p in SOURCES}
    return {
        name: {m: line for m, line in _imports(path, set(names)).items() if m != name} for name, path in names.items()
    }


def _allowed(importer: str, imported: str) -> bool:
    source, target = _stage(importer), _stage(imported)
    if source == target:
        return True
    allowed = MAY_IMPORT[source]
    return target in allowed or ".".join(imported.split(".")[2:4]) in allowed


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


def _package_cycle(graph: dict[str, dict[str, int]]) -> list[str] | None:
    """A cycle between stage packages (a finer module-level cycle is found by `_cycle`)."""
    stages: dict[str, set[str]] = {}
    for importer, imported in graph.items():
        stages.setdefault(_stage(importer), set()).update(_stage(m) for m in imported if _stage(m) != _stage(importer))
    for targets in list(stages.values()):
        for target in targets:
            stages.setdefault(target, set())
    return _cycle(stages)


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


def _docstring_nodes(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for index, statement in enumerate(body):
                is_text = isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                if is_text and isinstance(statement.value.value, str) and (index == 0 or _follows_assign(body, index)):
                    ids.add(id(statement.value))
    return ids


def _follows_assign(body: list[ast.stmt], index: int) -> bool:
    """An attribute docstring: a string statement right after an assignment."""
    return isinstance(body[index - 1], (ast.Assign, ast.AnnAssign))


def _words(identifier: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", identifier).replace("_", " ")
    return [word.lower() for word in spaced.split()]


def _key_words(text: str) -> list[str]:
    """The words of a string used as a key or a value (no white space: "verl-file-logger", "miles_cell"); prose
    (messages that explain a framework's behaviour) is not a dispatch and is left alone, as are module paths."""
    if re.search(r"\s", text):
        return []
    text = re.sub(r"\bmiles\.utils\b|\bmiles-bench\b", "", text)  # module paths and this project's name
    return [w.lower() for w in re.findall(r"[A-Za-z]+", text)]


def framework_names_in(source: str, words: tuple[str, ...] | None = None) -> list[tuple[int, str]]:
    """(line, word) for every identifier or string literal (not a docstring, not an import) naming a framework: by
    default, one the registry holds now."""
    words = registry.names() if words is None else words
    tree = ast.parse(source)
    docstrings, hits = _docstring_nodes(tree), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            hits += [(node.lineno, w) for w in _key_words(node.value) if w in words]
        hits += [(node.lineno, w) for name in names for w in _words(name) if w in words]
    return sorted(set(hits))


def _outside_frameworks(path: Path) -> bool:
    relative = path.relative_to(REPO_ROOT).parts
    return not (relative[:3] == ("scripts", "benchmark", "frameworks") and len(relative) > 4)


def test_the_pipeline_stages_are_packages_with_few_modules_beside_them():
    top_level = sorted(p.name for p in BENCHMARK.glob("*.py"))
    assert len(top_level) <= MAX_TOP_LEVEL_MODULES, top_level
    for stage in MAY_IMPORT:
        if stage not in ("schema", "entry"):
            assert (BENCHMARK / stage / "__init__.py").is_file(), f"stage package {stage}/ is missing"
    stages = {_stage(_module_name(p)) for p in SOURCES}
    assert stages <= set(MAY_IMPORT), f"modules outside every stage of the table: {stages - set(MAY_IMPORT)}"


def test_imports_point_down_the_pipeline():
    wrong = [
        f"{importer}:{line} imports {imported} ({_stage(importer)} -> {_stage(imported)})"
        for importer, imported_lines in sorted(_import_graph().items())
        for imported, line in sorted(imported_lines.items())
        if not _allowed(importer, imported)
    ]
    assert not wrong, "\n".join(wrong)


def test_the_entry_point_imports_every_command_where_this_check_sees_it():
    """run.py imports each command module by name (no importlib), so the stage table's entry -> commands row is
    checked like any other import."""
    commands = {
        _module_name(path)
        for path in (BENCHMARK / "commands").glob("*.py")
        if "\ndef register(" in path.read_text(encoding="utf-8")
    }
    assert len(commands) > 5 and commands <= set(_import_graph()["scripts.benchmark.run"])


def test_module_imports_have_no_cycle_function_local_imports_included():
    graph = _import_graph()
    cycle = _cycle({name: set(imported) for name, imported in graph.items()})
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"
    assert _package_cycle(graph) is None, f"stage cycle: {' -> '.join(_package_cycle(graph))}"


def test_no_module_outside_a_framework_folder_names_a_framework():
    found = []
    for path in SOURCES:
        if not _outside_frameworks(path):
            continue
        relative = str(path.relative_to(REPO_ROOT))
        allowed = NAMES_ALLOWED.get(relative, set())
        if "*" in allowed:
            continue
        hits = [
            (line, word) for line, word in framework_names_in(path.read_text(encoding="utf-8")) if word not in allowed
        ]
        found += [f"{relative}:{line} names {word!r}" for line, word in hits]
    assert not found, "\n".join(found)


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


def test_the_checks_themselves_catch_what_they_look_for(tmp_path):
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
    source = "def f(\n    x=1,\n    y=2,\n):\n    '''Doc.'''\n    return x\n"
    assert _counted_lines(ast.parse(source).body[0]) == 1
    function_local = tmp_path / "m.py"
    function_local.write_text("def f():\n    from scripts.benchmark.analysis import stats\n")
    assert _imports(function_local, {"scripts.benchmark.analysis.stats"}) == {"scripts.benchmark.analysis.stats": 2}
    assert not _allowed("scripts.benchmark.report.headline", "scripts.benchmark.analysis.stats")
    assert not _allowed("scripts.benchmark.spec.benchmark", "scripts.benchmark.analysis.verdict")
    assert _allowed("scripts.benchmark.analysis.document", "scripts.benchmark.frameworks.registry")
    assert not _allowed("scripts.benchmark.analysis.document", "scripts.benchmark.frameworks.miles.sink")
    code = '"""Miles and VERL."""\nfrom miles.utils import x\nFOO = "verl-file"\nmiles_root = 1\nMilesPaths.y\n'
    code += 'raise ValueError("VERL pads the batch")\n'
    assert framework_names_in(code) == [(3, "verl"), (4, "miles"), (5, "miles")]
    assert framework_names_in('x = "see miles.utils.bench_metrics"\ny = "miles-bench"\n') == []


LAUNCHER_TEXT = "ray job submit"
"""What Miles's launch-script tests take for a self-executing launcher (tests/fast/launch_scripts/py_harness.py,
iter_self_executing_launchers), as a `run_*.py` name under scripts/ is one of its launchers (iter_py_launch_scripts):
each must have a recorded case there, which a benchmark module is not."""


def test_no_benchmark_module_looks_like_a_miles_launcher():
    named = sorted(p.relative_to(REPO_ROOT).as_posix() for p in BENCHMARK.rglob("run_*.py"))
    texted = sorted(
        p.relative_to(REPO_ROOT).as_posix() for p in BENCHMARK.rglob("*.py") if LAUNCHER_TEXT in p.read_text()
    )
    assert (named, texted) == ([], [])


def test_the_framework_names_looked_for_are_the_registrys():
    from tests.benchmark.toy_framework import ADAPTER as TOY

    assert set(registry.names()) >= {"miles", "verl"}
    assert framework_names_in('SINK = "toy-jsonl"\n') == []
    registry.register(TOY)
    try:
        assert framework_names_in('SINK = "toy-jsonl"\n') == [(1, "toy")]
    finally:
        registry.unregister(TOY.name)
