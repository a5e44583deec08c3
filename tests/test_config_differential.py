"""Differential test: generated configs go through verl's own validate_config (one process, looping)
and through doctor's reproduction of it. Every config verl rejects, doctor rejects first with verl's
own words; no config verl accepts is rejected by doctor's start-up rules. Doctor's extra findings
(what verl only finds after launch) are printed."""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections import Counter

import pytest

from checks.config import late_problems, startup_problems
from matching.explain import explain_text
from tests.conftest import ROOT
from tests.config_cases import nested

N_CASES = 500

pytestmark = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="needs verl installed")


@pytest.fixture(scope="module")
def verdicts():
    # ~70 s of CPU on a 2-core machine; pytest-timeout bounds the wall time on a busy one
    proc = subprocess.run([sys.executable, "-m", "tests.config_cases", str(N_CASES), "1"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == N_CASES + 1
    return rows


@pytest.fixture(scope="module")
def cases(verdicts):
    return verdicts[:-1]


def test_the_registry_in_knowledge_matches_verls_default_scorer(verdicts):
    registry = verdicts[-1]["registry"]
    assert registry.pop("verl_doctor/digits") is False
    assert all(registry.values()), [s for s, ok in registry.items() if not ok]


def test_every_verl_rejection_is_doctors_first_reason(cases):
    rejected = [r for r in cases if not r["verl"]["ok"]]
    # the generator must exercise both sides and many of verl's checks
    assert 0.2 * N_CASES < len(rejected) < 0.9 * N_CASES
    assert len({r["verl"]["message"].split("(")[0] for r in rejected}) >= 8
    mismatches = []
    for r in rejected:
        problems = startup_problems(nested(r["view"]))
        first = problems[0].verl_text if problems else None
        if first != r["verl"]["message"]:
            mismatches.append((r["verl"]["message"], first, r["overrides"]))
    assert not mismatches, mismatches[:5]


def test_doctor_accepts_what_verl_accepts(cases):
    accepted = [r for r in cases if r["verl"]["ok"]]
    assert accepted
    wrongly = [(r["overrides"], [p.message for p in startup_problems(nested(r["view"]))])
               for r in accepted if startup_problems(nested(r["view"]))]
    assert not wrongly, wrongly[:5]


def test_extra_findings_are_listed(cases, capsys):
    extra = Counter()
    for r in cases:
        if r["verl"]["ok"]:
            for p in late_problems(nested(r["view"])):
                extra[p.id] += 1
    with capsys.disabled():
        print(f"\ndoctor-only findings on configs verl's validate_config accepts: {dict(extra)}")
    # configs that pass verl's start-up checks still carry failures verl meets later
    assert extra["config.micro_split"] + extra["config.mini_batch_dp"] > 0


def test_every_verl_rejection_explains_as_the_configuration(cases):
    # the log a launch that fails this way leaves: the traceback verl's own validate_config raised, as
    # the interpreter prints it. Whichever rule or class names it, its category is config.
    seen, wrong = set(), []
    for r in cases:
        if r["verl"]["ok"]:
            continue
        key = re.sub(r"\d+", "N", r["verl"]["message"])
        if key in seen:
            continue
        seen.add(key)
        found = explain_text(r["verl"]["traceback"])
        if not found or found[0].category != "config":
            wrong.append((r["verl"]["message"], found[0].rule if found else None))
    assert len(seen) >= 8 and not wrong, wrong
