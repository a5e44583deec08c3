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
                r"Traceback \(most recent call last\)\s+File", r"(?:\bERROR|WARN)", r"(?:\bERROR|WARN)ING",
                r"\bERROR|FATAL", r"\bERROR|FATAL: disk"]
    both = prefilter.HyperscanPrefilter(patterns, frozenset(range(len(patterns))))
    assert prefilter._line_markers([prefilter._prefilter_form(p) for p in patterns], [True] * 7) == [0, 3, 5, 6]
    # a rule's own pattern (not cheap) is kept whatever it starts with
    assert prefilter._line_markers(patterns[:3], [True, False, True]) == [0, 1]
    log = b"ok\nTraceback (most recent call last):\nWARNING x\nFATAL: disk full\n"
    cheap, other = both.candidates(memoryview(log))
    lines = {log.count(b"\n", 0, pos) for pos in cheap}
    assert lines == {1, 2, 3} and other == []  # every error-like line is still marked


@pytest.mark.parametrize("pattern, alternation", [
    (r"a|b", True), (r"(?:a|b)c", False), (r"[|]x", False), (r"[]|]x", False), (r"[^]|]x", False),
    (r"\|x", False), (r"(a)|(b)", True), (r"[\]|]|y", True)])
def test_a_top_level_alternation_is_told_from_one_inside_a_group_or_a_class(pattern, alternation):
    assert prefilter._top_level_alternation(pattern) is alternation
