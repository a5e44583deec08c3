"""The Hyperscan prefilter: its compiled databases are cached, and the one in use is not pushed out by
the many others a test run or a catalog edit writes (compiling the catalog's takes seconds); a
cheap pattern that only repeats another's line mark is left out of the scan."""
from __future__ import annotations

import pytest

from matching import prefilter

pytest.importorskip("hyperscan")


def test_the_database_in_use_outlives_many_others(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    compiled = []
    real = prefilter.HyperscanPrefilter._compile

    def counting(self, exprs, ids, key):
        compiled.append(key)
        return real(self, exprs, ids, key)

    monkeypatch.setattr(prefilter.HyperscanPrefilter, "_compile", counting)
    ours = [r"Traceback \(most recent call last\)", r"\bERROR\b"]
    prefilter.HyperscanPrefilter(ours)
    for i in range(40):  # another catalog's database written, then ours used again
        prefilter.HyperscanPrefilter([rf"other pattern {i}\b"])
        prefilter.HyperscanPrefilter(ours)
    assert len(compiled) == 41  # ours once, each other once
    assert len(list((tmp_path / "verl-doctor").glob("hs-*.db"))) == 32
    cheap, other = prefilter.HyperscanPrefilter(ours, frozenset({1})).candidates(
        memoryview(b"ok\nERROR here\nTraceback (most recent call last):\n"))
    assert cheap == [7] and other == [46]  # the last byte of each match


def test_a_cheap_pattern_that_holds_another_cheap_one_is_not_scanned_for(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    patterns = [r"Traceback \(most recent call last\)", r"Traceback \(most recent call last\):\s*$",
                r"Traceback \(most recent call last\)\s+File",
                # kept: the longer one is an alternation; the shorter one is no plain literal (an octal
                # escape the longer one extends, a brace that becomes a repeat, a group)
                "ERROR", "ERROR|Killed", r"x\0", r"x\012", "a{", "a{2}", r"(?:\bERROR|WARN)", r"(?:\bERROR|WARN)ING"]
    forms = [prefilter._prefilter_form(p) for p in patterns]
    assert prefilter._line_markers(forms, [True] * len(patterns)) == [0, *range(3, len(patterns))]
    # a rule's own pattern (not cheap) is kept whatever it starts with
    assert prefilter._line_markers(forms[:3], [True, False, True]) == [0, 1]
    both = prefilter.HyperscanPrefilter(patterns[:2], frozenset({0, 1}))
    cheap, other = both.candidates(memoryview(b"ok\nTraceback (most recent call last):\nend\n"))
    assert cheap == [35] and other == []  # one hit for the header (two if both were scanned for)
    mixed = prefilter.HyperscanPrefilter(patterns[3:5], frozenset({0, 1}))
    log = b"ok\nKilled\nERROR x\n"
    cheap, _ = mixed.candidates(memoryview(log))
    assert {log.count(b"\n", 0, pos) for pos in cheap} == {1, 2}  # the Killed line is still marked


@pytest.mark.parametrize("pattern, alternation", [
    (r"a|b", True), (r"(?:a|b)c", False), (r"[|]x", False), (r"[]|]x", False), (r"[^]|]x", False),
    (r"\|x", False), (r"(a)|(b)", True), (r"[\]|]|y", True)])
def test_a_top_level_alternation_is_told_from_one_inside_a_group_or_a_class(pattern, alternation):
    assert prefilter._top_level_alternation(pattern) is alternation
