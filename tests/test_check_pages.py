"""Every check has a page, like every rule: the four sections of its docstring, rendered by
`doctor rules <check-id>`; the explain rules a page names exist in the catalog."""
from __future__ import annotations

import json

import pytest

from checks.registry import SCOPES, PageError, all_checks, read_page
from doctor.cli import main
from matching.catalog import catalog
from tests.conftest import run_doctor

CHECKS = all_checks(SCOPES)
RULES = {r.id for r in catalog()}


def doctor_in_process(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    out = capsys.readouterr()
    return done.value.code, out.out, out.err


def test_pages_cover_the_cluster_checks_too():
    assert {"node", "cluster"} <= {c.scope for c in CHECKS} <= set(SCOPES)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_every_check_has_a_page_naming_real_rules(check):
    page = check.page()
    assert len(page.what.split()) >= 8, f"{check.id}: 'What it checks' says too little: {page.what!r}"
    for text in (page.fails, page.fix):  # '-' only for a check that records and does not judge
        assert text == "-" or len(text.split()) >= 8, f"{check.id}: a section says too little: {text!r}"
    unknown = [r for r in page.rules if r not in RULES]
    assert not unknown, f"{check.id} names explain rules the catalog lacks: {unknown}"


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.id)
def test_doctor_rules_renders_every_check(check, capsys):
    rc, out, err = doctor_in_process(capsys, "rules", check.id)
    assert rc == 0, err
    assert out.startswith(f"# {check.title} ({check.id})\n")
    for heading in ("## What it checks", "## How the job fails without it", "## How to fix it", "## After the fact"):
        assert heading in out
    for rule in check.page().rules:
        assert f"doctor rules {rule})" in out


def test_doctor_rules_renders_every_rule(capsys):
    failed = []
    for rule in sorted(RULES):
        rc, out, err = doctor_in_process(capsys, "rules", rule)
        if rc != 0 or not out.startswith("# "):
            failed.append((rule, rc, err))
    assert not failed


def test_the_real_command_on_a_cluster_check_and_json():
    r = run_doctor("rules", "cluster.link")
    assert r.returncode == 0, r.stderr
    assert "connectFullMesh failed" in r.stdout and "Scope: cluster." in r.stdout
    doc = json.loads(run_doctor("rules", "--json", "imports.shadowed").stdout)
    assert (doc["id"], doc["scope"], doc["needs"]) == ("imports.shadowed", "node", ["probe"])
    assert "python-shadowed-package-source-tree" in doc["rules"]
    listing = run_doctor("rules")
    assert "imports.shadowed" in listing.stdout and f"{len(CHECKS)} checks" in listing.stdout
    bad = run_doctor("rules", "imports.no_such_check")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


PAGE = """What it checks: a thing that matters.

    How the job fails without it: it fails.

    Fix: do this.

    After the fact: rule-a, rule-b"""


def test_the_page_reader():
    page = read_page("x.y", PAGE)
    assert (page.what, page.fix, page.rules) == ("a thing that matters.", "do this.", ("rule-a", "rule-b"))
    assert read_page("x.y", PAGE.replace("rule-a, rule-b", "-")).rules == ()
    with pytest.raises(PageError, match="no 'Fix:' section"):
        read_page("x.y", PAGE.replace("Fix:", "Remedy:"))
    with pytest.raises(PageError, match="in order"):
        read_page("x.y", "Summary first.\n\n    " + PAGE)
    with pytest.raises(PageError, match="empty"):
        read_page("x.y", PAGE.replace("do this.", ""))
    with pytest.raises(PageError, match="no 'What it checks:'"):
        read_page("x.y", None)
