"""Cutting logs: the streaming cut agrees with reading the whole log, across block boundaries."""
from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doctor import report_logs
from doctor.report_logs import cut_log


def expected(lines: list[bytes], evidence: set[int], context: int, tail: int) -> list[int]:
    total = len(lines)
    wanted = {n for e in evidence for n in range(e - context, e + context + 1) if 1 <= n <= total}
    wanted |= set(range(max(1, total - tail + 1), total + 1))
    return sorted(wanted)


@settings(max_examples=40, deadline=None)
@given(lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=120),
       block=st.integers(min_value=1, max_value=64), context=st.integers(0, 4), tail=st.integers(0, 10),
       trailing_newline=st.booleans(), data=st.data())
def test_cut_matches_the_whole_log(lines, block, context, tail, trailing_newline, data):
    raw = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
    if not trailing_newline and lines[-1] == b"":
        lines = lines[:-1]  # "a\n" joined from ["a", ""] is one line
    evidence = set(data.draw(st.lists(st.integers(1, max(1, len(lines))), max_size=4))) if lines else set()
    for total in (None, len(lines)):  # reading to the end, or stopping early and seeking the tail
        cut = cut_log(io.BytesIO(raw), "x.log", evidence, context, tail, block_bytes=block, total_lines=total)
        assert cut.lines == len(lines)
        assert cut.bytes == len(raw)
        assert [n for n, _ in cut.excerpt] == expected(lines, evidence, context, tail)
        for n, text in cut.excerpt:
            assert text == report_logs.display(lines[n - 1], 400)


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
def test_tail_across_blocks(block):
    """Whatever the block size, the last lines are the last lines, numbered right."""
    lines = [f"line {i}".encode() for i in range(1, 301)]
    for total in (None, 300):
        cut = cut_log(io.BytesIO(b"\n".join(lines) + b"\n"), "x", {150}, context=1, tail=3, block_bytes=block,
                      total_lines=total)
        assert cut.excerpt == [(149, "line 149"), (150, "line 150"), (151, "line 151"),
                               (298, "line 298"), (299, "line 299"), (300, "line 300")]


def test_display_cleans_and_caps():
    raw = b"\x1b[31mERROR\x1b[0m boom\x07 " + b"x" * 1000
    text = report_logs.display(raw, 50)
    assert text.startswith("ERROR boom ") and "\x1b" not in text and "\x07" not in text
    assert text.endswith("more characters]") and len(text) < 100


@pytest.mark.parametrize("raw, n", [(b"", 0), (b"a", 1), (b"a\n", 1), (b"a\nb", 2), (b"\n\n", 2)])
def test_line_count(raw, n):
    assert cut_log(io.BytesIO(raw), "x", set()).lines == n


def test_endless_lines_stay_bounded(monkeypatch):
    """Lines far longer than a block: memory stays bounded, each shown line is capped."""
    monkeypatch.setattr(report_logs, "TAIL_KEEP_BYTES", 3 << 20)
    raw = (b"y" * (2 << 20) + b"\n") * 6 + b"z" * (1 << 20)  # no newline at the end
    cut = cut_log(io.BytesIO(raw), "x", {2}, context=0, tail=2, block_bytes=1 << 20)
    assert cut.lines == 7
    assert [n for n, _ in cut.excerpt][0] == 2 and cut.excerpt[-1][0] == 7
    assert all(len(t) < 500 for _, t in cut.excerpt)


@pytest.mark.parametrize("raw", [b"", b"a", b"a\n", b"a\r\nb\r\n", b"\n\n\nx", b"\x00\xff\n\x1b[31mE\x1b[0m\n",
                                 b"Traceback (most recent call last):\nRuntimeError: x\n"])
def test_line_count_agrees_with_the_explain_engine(tmp_path, raw):
    """The report numbers the tail from the explain pass's line count: both must count alike."""
    from matching.explain import explain_report

    log = tmp_path / "x.log"
    log.write_bytes(raw)
    assert explain_report([str(log)]).lines_read == cut_log(io.BytesIO(raw), "x", set()).lines
