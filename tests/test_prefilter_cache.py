"""The compiled Hyperscan databases are cached; the one in use is not pushed out by the many
others a test run or a catalog edit writes (compiling the catalog's takes seconds)."""
from __future__ import annotations

import pytest

from matching import prefilter

pytest.importorskip("hyperscan")


def test_the_database_in_use_outlives_many_others(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    compiled = []
    real = prefilter.HyperscanPrefilter._compile

    def counting(self, exprs, key):
        compiled.append(key)
        return real(self, exprs, key)

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
