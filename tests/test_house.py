"""House rules the code is held to: small functions, and checks only where the registry finds them."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from checks import registry
from tests.conftest import ROOT

# the packages pyproject.toml ships (tests/ and bench/ are not the product)
PACKAGES = ("checks", "doctor", "knowledge", "launch", "matching", "probes", "supervisor", "trainer")
MAX_LINES = 60


def modules(root: Path = ROOT):
    for pkg in PACKAGES:
        yield from sorted((root / pkg).rglob("*.py"))


def long_functions(root: Path = ROOT) -> list[str]:
    """Functions over MAX_LINES, from `def` to the last line, not counting the docstring (a check's
    docstring is its page)."""
    out = []
    for path in modules(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                first = node.body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                        and isinstance(first.value.value, str):
                    lines -= first.end_lineno - first.lineno + 1
                if lines > MAX_LINES:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return out


def check_definers(root: Path = ROOT) -> list[str]:
    """Modules (relative paths) with a function decorated @check(...) or @<module>.check(...)."""
    out = []
    for path in modules(root):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for deco in node.decorator_list:
                    target = deco.func if isinstance(deco, ast.Call) else deco
                    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
                    if name == "check":
                        out.append(str(path.relative_to(root)))
    return sorted(set(out))


def test_no_function_is_over_60_lines():
    assert not long_functions(), "\n".join(long_functions())


def test_every_module_defining_a_check_is_in_checks_and_discovered():
    definers = check_definers()
    assert "checks/imports.py" in definers  # the reader finds the real ones
    outside = [p for p in definers if not p.startswith("checks/")]
    assert not outside, f"checks outside checks/ are never run: {outside}"
    discovered = {m.replace(".", "/") + ".py" for m in registry.check_modules()}
    assert set(definers) <= discovered, set(definers) - discovered
    # and each of them registered what it defines
    registered = {c.fn.__module__ for c in registry.all_checks(registry.SCOPES)}
    assert {p[:-3].replace("/", ".") for p in definers} == registered


def test_the_readers_see_what_they_look_for(tmp_path):
    (tmp_path / "doctor").mkdir()
    (tmp_path / "checks" / "extra").mkdir(parents=True)
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    paged = "\n".join(f"    y{i} = {i}" for i in range(59))  # 60 lines with its def, plus a docstring
    doc = '    """A page\n\n    of four lines\n    """'
    (tmp_path / "doctor" / "long.py").write_text(f"def long():\n{body}\n\n\ndef paged():\n{doc}\n{paged}\n")
    (tmp_path / "doctor" / "stray.py").write_text(
        "from checks import registry\n@registry.check('other.x', 'other', 'X')\ndef x(ctx):\n    return []\n")
    (tmp_path / "checks" / "extra" / "deep.py").write_text(
        "from checks.registry import check\n@check('other.y', 'other', 'Y')\ndef y(ctx):\n    return []\n")
    assert long_functions(tmp_path) == ["doctor/long.py:1 long (62 lines)"]
    assert check_definers(tmp_path) == ["checks/extra/deep.py", "doctor/stray.py"]


def test_a_check_registered_from_outside_the_checks_package_is_refused():
    with pytest.raises(ValueError, match="outside the checks package"):
        registry.check("other.stray", "other", "Stray")(lambda ctx: [])
    assert "other.stray" not in {c.id for c in registry.all_checks(registry.SCOPES)}
    importlib.import_module("checks.imports")  # the real ones still register
