"""One vocabulary (knowledge/vocabulary.toml): the checks, the rule catalog, the colours and every
JSON schema in knowledge/schemas/ use its categories, statuses, verdicts and phases, and no module
keeps a list of its own."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import click

from checks import model
from doctor import render
from doctor.commands import explain
from knowledge import vocabulary as v
from matching import catalog
from tests.conftest import ROOT

SCHEMAS = sorted((ROOT / "knowledge" / "schemas").glob("*.schema.json"))
PACKAGES = ("checks", "doctor", "launch", "matching", "probes", "supervisor", "trainer")


def enums(node, key=None):
    """(property name, enum list) for every enum in a JSON schema."""
    if isinstance(node, dict):
        if "enum" in node:
            yield key, node["enum"]
        for k, child in node.items():
            yield from enums(child, k if k not in ("properties", "items", "oneOf", "anyOf") else key)
    elif isinstance(node, list):
        for child in node:
            yield from enums(child, key)


def test_the_checks_and_the_catalog_use_the_vocabulary():
    assert model.CATEGORIES is v.CATEGORIES and catalog.CATEGORIES is v.CATEGORIES
    assert model.STATUSES is v.STATUSES
    assert catalog.PHASES is v.PHASES and catalog.PLATFORMS is v.PLATFORMS
    assert v.CATEGORIES[-1] == "other" and len(set(v.CATEGORIES)) == len(v.CATEGORIES) == 9
    assert set(v.VERDICTS) <= set(v.STATUSES)


def test_every_schema_enum_is_the_vocabulary():
    seen = set()
    for path in SCHEMAS:
        doc = json.loads(path.read_text())
        for key, values in enums(doc):
            if key == "category":  # the supervisor also records "unknown": nothing matched
                assert [c for c in values if c != "unknown"] == list(v.CATEGORIES), path.name
            elif key == "status" and not path.name.startswith("doctor.train"):
                assert set(values) <= set(v.STATUSES), (path.name, values)
            elif key in ("phase", "peak_phase"):
                assert set(values) - {None} <= set(v.PHASES), (path.name, values)
            else:
                continue
            seen.add((path.name, key))
    check = json.loads((ROOT / "knowledge" / "schemas" / "doctor.check.schema.json").read_text())
    assert check["properties"]["status"]["enum"] == list(v.VERDICTS)
    finding = check["properties"]["findings"]["items"]["properties"]
    assert finding["status"]["enum"] == list(v.STATUSES)
    assert {("doctor.check.schema.json", "category"), ("doctor.explain.schema.json", "category"),
            ("doctor.train.schema.json", "category"), ("doctor.explain.schema.json", "phase")} <= seen


def test_every_status_and_category_has_a_colour_the_terminal_knows():
    assert set(render.MARKS) == set(v.STATUSES)
    assert all(colour in render.ANSI for _, colour in render.MARKS.values())
    assert set(explain.CATEGORY_COLOURS) == set(v.CATEGORIES)
    for colour in explain.CATEGORY_COLOURS.values():
        click.style("x", fg=colour)  # raises on a colour click does not know


def test_no_module_keeps_its_own_category_list():
    own = []
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                    words = {e.value for e in node.elts if isinstance(e, ast.Constant)}
                    if len(words & set(v.CATEGORIES)) >= 6:
                        own.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not own, own
