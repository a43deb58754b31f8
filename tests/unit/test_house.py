"""The house rules a program can check (HOUSE.md, issue 37): every module under
services/, shared/ and gateway/ is under 400 lines and every function under 60,
and no project module imports itself back through others, whether at module
level, from inside a function or for type checkers only (an import in a function
or under ``TYPE_CHECKING`` does not remove a circle, it only hides it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AREAS = ("services", "shared", "gateway")
MODULE_LINES = 400  # a module has fewer
FUNCTION_LINES = 60  # a function has fewer


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the areas."""
    found = {}
    for area in AREAS:
        for path in sorted((ROOT / area).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def function_lengths(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def imported(name: str, path: Path, tree: ast.AST, known) -> set[str]:
    """The project modules ``name`` imports anywhere in its text: at module level, in a
    function, or under ``if TYPE_CHECKING:`` (a module that names another's types
    depends on it as much as one that calls it: ``shared.config``'s parsers and its
    ``Settings`` closed a circle that way, issue 55)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in known else base)  # a submodule, else the module's own name
    return {t for t in targets if t in known and t != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return groups


@pytest.fixture(scope="module")
def parsed():
    return {name: (path, ast.parse(path.read_text(), str(path))) for name, path in modules().items()}


def test_every_module_is_under_400_lines():
    long = {str(p.relative_to(ROOT)): n for p in modules().values()
            if (n := len(p.read_text().splitlines())) >= MODULE_LINES}
    assert long == {}


def test_every_function_is_under_60_lines(parsed):
    long = [f"{path.relative_to(ROOT)}:{line} {fn} ({n})" for path, tree in parsed.values()
            for fn, line, n in function_lengths(tree) if n >= FUNCTION_LINES]
    assert long == []


def test_no_project_module_imports_itself_back(parsed):
    graph = {name: imported(name, path, tree, parsed) for name, (path, tree) in parsed.items()}
    assert cycles(graph) == []


def test_config_areas_import_only_the_shared_parsers(parsed):
    """shared.config: each area's module (fields, parsers, checks) stands on ``parse``
    alone; ``settings`` composes them, and none of them imports it or each other."""
    areas = {name for name in parsed if name.startswith("shared.config.")} - {"shared.config.settings"}
    leaning = {name: sorted(imported(name, *parsed[name], parsed) - {"shared.config.parse"}) for name in areas}
    assert {name: deps for name, deps in leaning.items() if deps} == {}


def test_the_checks_see_what_they_look_for():
    """The checkers themselves: a long function; a circle closed by a function's
    import; another closed by an import only type checkers read."""
    tree = ast.parse("def f():\n" + "    x = 1\n" * 60)
    assert [n for *_, n in function_lengths(tree)] == [61]
    sources = {"p.a": "from p import b\n", "p.b": "def g():\n    from .c import h\n",
               "p.c": "import p.a\nif TYPE_CHECKING:\n    from p.d import y\n", "p.d": "from p.c import x\n"}
    graph = {name: imported(name, Path(name.replace(".", "/") + ".py"), ast.parse(text), sources)
             for name, text in sources.items()}
    assert cycles(graph) == [["p.a", "p.b", "p.c", "p.d"]]
