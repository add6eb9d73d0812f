"""The package stays a house a newcomer can walk through: a bounded number of modules, none too
long to read at a sitting, and no package ``__init__`` that imports its own submodules as it is
imported (which ties the package to them in a circle, and gives each of their names two paths).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "whos_online"
#: Modules besides the packages' ``__init__.py``; and lines in any one of them.
MAX_MODULES = 55
MAX_LINES = 400


def test_the_package_keeps_to_its_number_of_modules_and_their_length():
    found = [path for path in PACKAGE.rglob("*.py") if path.name != "__init__.py"]
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in found
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }

    assert len(found) <= MAX_MODULES
    assert long == {}


def imported_as_it_loads(tree: ast.Module) -> list[str]:
    """What a module imports as it is imported: its own statements, not a function's (such as
    a PEP 562 ``__getattr__``, run when a name is asked for) nor a ``TYPE_CHECKING`` block's."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return found


def test_no_package_init_imports_its_own_submodules():
    loading = {}
    for init in PACKAGE.rglob("__init__.py"):
        package = ".".join(init.parent.relative_to(PACKAGE.parent).parts)
        tree = ast.parse(init.read_text(encoding="utf-8"))
        own = [name for name in imported_as_it_loads(tree) if name.startswith(f"{package}.")]
        if own:
            loading[package] = own

    assert loading == {}
