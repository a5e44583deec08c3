"""The import layering is one way: knowledge <- matching <- launch <- probes <- checks <- trainer,
supervisor <- doctor. Every import of every module of these packages is read (with ast, imports inside
functions included, since the lazy ones are exactly where an upward import hides) and none may reach
a layer above its own. The supervisor drives the reference trainer (its engine, its key list, its
atomic writes), so it sits just above it: the trainer never imports the supervisor."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

LAYERS = {"knowledge": 0, "matching": 1, "launch": 2, "probes": 3, "checks": 4, "trainer": 5,
          "supervisor": 6, "doctor": 7}


def imported(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, top-level package) of every import in the module, relative ones resolved."""
    package = path.relative_to(root).parts[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name.split(".")[0]) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x / from ..pkg import y
                base = package[: len(package) - node.level + 1]
                top = base[0] if base else (node.module or "").split(".")[0]
            else:
                top = (node.module or "").split(".")[0]
            out.append((node.lineno, top))
    return out


def upward_imports(root: Path = ROOT) -> list[str]:
    bad = []
    for layer, rank in LAYERS.items():
        for path in sorted((root / layer).rglob("*.py")):
            for line, top in imported(path, root):
                if top in LAYERS and top != layer and LAYERS[top] >= rank:
                    bad.append(f"{path.relative_to(root)}:{line} imports {top} ({layer} is below it)")
    return bad


def test_no_module_imports_a_layer_above_its_own():
    assert not upward_imports(), "\n".join(upward_imports())


def test_the_reader_sees_lazy_and_relative_imports(tmp_path):
    # the reader itself, on a tree with the imports it must catch: one inside a function, one relative
    (tmp_path / "probes").mkdir()
    (tmp_path / "knowledge").mkdir()
    (tmp_path / "probes" / "node.py").write_text("def f():\n    from checks.context import CheckContext\n")
    (tmp_path / "knowledge" / "x.py").write_text("from ..matching import catalog\nimport os\n")
    found = upward_imports(tmp_path)
    assert found == ["knowledge/x.py:1 imports matching (knowledge is below it)",
                     "probes/node.py:2 imports checks (probes is below it)"]
