"""A log as users bring it: copied out of a web page or quoted in a reply, not as the program wrote it.

The first test takes every fixture (the lines a rule or a generic class was written from), changes it
the way a paste does (bench/explain_pasted.py's forms), and asks for the same first finding, with
either prefilter engine.
"""
from __future__ import annotations

import pytest

from bench.explain_pasted import FORMS
from matching import explain as ex
from matching.catalog import catalog
from matching.explain import NBSP, Matcher, explain_text, has_nbsp
from tests.test_explain import FIX

_nbsp, _quoted = FORMS["nbsp"], FORMS["quoted"]


def _first(data: bytes, matcher=None):
    found = explain_text(data, matcher=matcher)
    return (found[0].rule, [ln.n for ln in found[0].lines]) if found else None


def _matchers(monkeypatch):
    yield ex.default_matcher()
    monkeypatch.setenv("DOCTOR_PREFILTER", "re2")
    yield Matcher(catalog(), ex.terminal.generic())


@pytest.mark.parametrize("paste", [_nbsp, _quoted], ids=["nbsp", "quoted"])
def test_every_fixture_keeps_its_first_finding_when_pasted(monkeypatch, paste):
    for matcher in _matchers(monkeypatch):
        changed = []
        for path in sorted(FIX.glob("*.log")):
            data = path.read_bytes()
            want = _first(data, matcher)
            if _first(paste(data), matcher) != want:
                changed.append(path.name)
        assert changed == [], (type(matcher.prefilter).__name__, changed[:10])


def test_the_evidence_reads_with_plain_spaces():
    log = "Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n" \
          "ModuleNotFoundError: No module named 'vllm_ascend'\n"
    top = explain_text(_quoted(_nbsp(log.encode())))[0]
    assert top.lines[-1].text == "ModuleNotFoundError: No module named 'vllm_ascend'"


def test_a_quoted_traceback_keeps_its_own_indentation():
    """Only "> " goes: the frames' two spaces and the source lines' four stay, so the traceback parses."""
    log = (b"> Traceback (most recent call last):\n>   File \"/x/main.py\", line 9, in <module>\n"
           b">     main()\n> > KeyError: 'prompt'\n")
    top = explain_text(log)[0]
    assert [ln.text for ln in top.lines] == ['  File "/x/main.py", line 9, in <module>', "KeyError: 'prompt'"]


def test_a_no_break_space_is_found_past_other_latin1_signs_and_in_cjk_text():
    """C2 leads the UTF-8 of U+0080-U+00BF (degree, plus-minus, middle dot); CJK text has A0 bytes
    but no C2. The check looks at each C2, then searches the rest at once."""
    signs = "±°·".encode() * 100          # 300 C2 bytes, none of them a no-break space
    cjk = "训练失败：通信超时".encode() * 100
    assert not has_nbsp(signs + cjk, len(signs + cjk))
    for data in (signs + NBSP, cjk + b"x" + NBSP + b"y", NBSP):
        assert has_nbsp(data, len(data))
    assert not has_nbsp(b"ab" + NBSP, 3)    # only the block's bytes count: C2 A0 ends past them
