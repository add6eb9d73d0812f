"""The package's imports run one way: no module imports, even at call time, one that imports it.

The graph is read from the source with ``ast``, so that imports inside functions count as much as
those at the top (a late import hides a cycle without removing it). Imports under
``if TYPE_CHECKING:`` are left out: they never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "whos_online"


def modules(package: Path) -> dict[str, Path]:
    """Every module of ``package`` by its dotted name (a subpackage by its ``__init__.py``)."""
    found = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(tree: ast.AST, *, type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that can run: anywhere in the tree but a TYPE_CHECKING block
    (those too, with ``type_checking``: what the type checker reads)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
            for branch in node.orelse:
                found += imports_in(ast.Module(body=[branch], type_ignores=[]))
        else:
            found += imports_in(node, type_checking=type_checking)
    return found


def imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The dotted names an import statement loads: ``from a import b`` loads ``a.b`` when that
    is a module, else ``a``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[: len(here) - node.level + 1]
        base = ".".join([*here, base] if base else here)
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def import_graph(package: Path, *, type_checking: bool = False) -> dict[str, set[str]]:
    """Which modules of the package each module loads when it runs.

    Loading ``a.b.c`` also runs the packages ``a`` and ``a.b`` first, unless the importer is
    inside them already (they are then being loaded, which is no new edge).
    """
    found = modules(package)
    graph: dict[str, set[str]] = {}
    for module, path in found.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in imports_in(tree, type_checking=type_checking):
            for name in imported(module, is_package, node):
                parts = name.split(".")
                for end in range(1, len(parts) + 1):
                    target = ".".join(parts[:end])
                    inside = module == target or module.startswith(target + ".")
                    if target in found and not inside:
                        edges.add(target)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first walk meets, one per import that closes a cycle, each as the
    path of modules that leads back to where it started."""
    found: list[list[str]] = []
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = "open"
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == "open":
                found.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


def test_the_package_has_no_import_cycle():
    found = cycles(import_graph(PACKAGE))

    assert found == [], "import cycles: " + "; ".join(" → ".join(cycle) for cycle in found)


def test_not_even_the_type_checker_sees_an_import_cycle():
    found = cycles(import_graph(PACKAGE, type_checking=True))

    assert found == [], "import cycles: " + "; ".join(" → ".join(cycle) for cycle in found)


#: The engine, in the order a visit travels; everything else of the package is its Django face
#: (what a site touches: the middleware, the views, the tags, the API…), which uses the engine.
ENGINE = ("config", "backend", "store", "flushing", "recording", "reading")
#: The face's modules the engine may import: they import nothing of the package.
LEAVES = ("whos_online.signals",)


def test_the_engine_never_imports_the_django_face():
    graph = import_graph(PACKAGE, type_checking=True)
    engine = tuple(f"whos_online.{package}" for package in ENGINE)

    def in_engine(module: str) -> bool:
        return any(module == name or module.startswith(f"{name}.") for name in engine)

    upward = sorted(
        f"{module} → {target}"
        for module, targets in graph.items()
        if in_engine(module)
        for target in targets
        if target != "whos_online" and target not in LEAVES and not in_engine(target)
    )
    assert upward == []


def test_the_signals_module_imports_only_django_dispatch():
    """Users import the signals from ``whos_online.signals`` and the engine sends them from
    there: a module that imported more would drag the engine into the face, or into a cycle."""
    tree = ast.parse((PACKAGE / "signals.py").read_text())
    names = set()
    for node in imports_in(tree, type_checking=True):
        if isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
        else:
            names.update(alias.name for alias in node.names)
    assert names <= {"__future__", "typing", "django.dispatch"}, names


def test_each_part_of_the_engine_imports_only_those_before_it():
    graph = import_graph(PACKAGE, type_checking=True)

    def layer(module: str) -> int | None:
        parts = module.split(".")
        return ENGINE.index(parts[1]) if len(parts) > 1 and parts[1] in ENGINE else None

    upward = sorted(
        f"{module} → {target}"
        for module, targets in graph.items()
        if (here := layer(module)) is not None
        for target in targets
        if (there := layer(target)) is not None and there > here
    )
    assert upward == []


def test_the_graph_sees_imports_at_call_time_and_skips_type_checking_ones(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from pkg.sub import b\n")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from pkg import c\nelse:\n    import os\n"
        "def f():\n    from pkg.sub.b import g\n"
    )
    (package / "sub" / "b.py").write_text(
        "import typing\nif typing.TYPE_CHECKING:\n    from pkg import a\nfrom . import c\n"
    )
    (package / "sub" / "c.py").write_text("def g():\n    from .. import a\n")

    graph = import_graph(package)

    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.sub", "pkg.sub.b"},
        "pkg.sub": {"pkg.sub.b"},
        "pkg.sub.b": {"pkg.sub.c"},
        "pkg.sub.c": {"pkg.a"},
    }
    assert cycles(graph) == [["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.sub.c", "pkg.a"]]
