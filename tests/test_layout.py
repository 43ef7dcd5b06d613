"""The package's layering: the core never imports the lab, and no two modules import each other.

Imports are read from the source (module level and inside functions alike), so a lazy import
that closes a cycle counts too.
"""
import ast
from pathlib import Path

import tba_lab

ROOT = Path(tba_lab.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every ``tba_lab`` module ``path`` imports, with the packages on the way (importing
    ``a.b.c`` runs ``a/b/__init__.py``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.startswith("tba_lab."):
                parts = name.split(".")
                out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return out


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}
GRAPH = {m: {i for i in _imports(p) if i in MODULES and i != m} for m, p in MODULES.items()}


def test_core_never_imports_the_lab():
    """The command line (``cli``, ``__main__``) is the application on top of both."""
    app = {"tba_lab.cli", "tba_lab.__main__"}
    core = [m for m in MODULES if not m.startswith("tba_lab.lab") and m not in app]
    assert "tba_lab.trainer" in core and "tba_lab.lab.widgets" in MODULES
    bad = {m: sorted(i for i in GRAPH[m] if i.startswith("tba_lab.lab")) for m in core}
    assert {m: v for m, v in bad.items() if v} == {}


def test_no_import_cycles():
    """Depth-first search for a back edge; the message shows the cycle."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        path.append(m)
        for n in sorted(GRAPH[m]):
            if n.startswith(m + ".") and MODULES[m].name == "__init__.py":
                continue  # a package importing its own submodules is not a cycle
            if state.get(n) == 1:
                cycle = path[path.index(n):] + [n]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if n not in state:
                visit(n)
        path.pop()
        state[m] = 2

    for m in sorted(GRAPH):
        if m not in state:
            visit(m)
