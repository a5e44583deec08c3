"""The cases of test_explain_ahead.py, which runs them in a fresh interpreter (no threads but its own).

doctor explain on a large regular file: a forked helper runs the prefilter for the blocks it claims
while the reader counts newlines (matching/ahead.py). The report must be exactly the one the reader
gives alone, on real logs cut into many small blocks, when the helper dies, and where no helper is
used."""
from __future__ import annotations

import gzip
import os
import signal
import threading
import time

import pytest

import matching.explain as ex
import matching.ahead as ah
from matching.explain import default_matcher, explain_report

from .conftest import ROOT, SHARED

FIX = ROOT / "tests" / "fixtures" / "explain"
CLEAN = SHARED / "research" / "clean-logs"
BLOCK = 4096


def _log(tmp_path, failures: list[str]):
    """Real verl lines (a clean run, or the fixtures' own lines) with real failures between them."""
    clean = CLEAN / "005.log"
    if clean.exists():
        filler = clean.read_bytes()[:60000]
    else:
        filler = (FIX / "ray-actor-died.log").read_bytes() * 60
    log = tmp_path / "run.log"
    with open(log, "wb") as fh:
        for name in failures:
            fh.write(filler)
            fh.write((FIX / name).read_bytes().split(b"\n", 1)[1])
        fh.write(filler[: len(filler) // 3])  # ends inside a line: the last line has no newline
    return log


def _report(paths, monkeypatch, alone: bool) -> dict:
    monkeypatch.setenv("DOCTOR_AHEAD", "0" if alone else "1")
    return explain_report([str(p) for p in paths]).to_dict()


@pytest.fixture
def answered(monkeypatch):
    """The blocks the helper answered (the reader's check passes them through unchanged). The
    reader waits for the helper's answers (it takes no block itself unless the helper has none, or
    is gone): how many blocks each scans is then not up to the scheduler."""
    seen: list[tuple[int, int]] = []
    take = ah.Ahead.take

    def recording(self, k, start, end):
        out = take(self, k, start, end)
        if out is not None:
            seen.append((start, end))
        return out

    monkeypatch.setattr(ah.Ahead, "take", recording)
    monkeypatch.setattr(ah.Ahead, "share", False)
    monkeypatch.setattr(ex, "BLOCK_BYTES", BLOCK)  # many blocks, lines cut at every boundary
    return seen


def test_the_helper_answers_blocks_and_the_report_is_the_readers_own(tmp_path, monkeypatch, answered):
    log = _log(tmp_path, ["memory-oom-log-prob.log", "ray-actor-died.log", "memory-oom-log-prob.log"])
    alone = _report([log], monkeypatch, alone=True)
    assert not answered
    assert _report([log], monkeypatch, alone=False) == alone
    assert alone["findings"][0]["rule"] == "memory-oom-log-prob"
    with open(log, "rb") as fh:  # the helper cut every block the way the reader did
        spans = list(ah.block_spans(fh.fileno(), log.stat().st_size, BLOCK))
    assert answered == spans and len(spans) > 20
    monkeypatch.setattr(ah.Ahead, "share", True)  # both scan, as the scheduler has it
    assert _report([log], monkeypatch, alone=False) == alone


def _slow_helper(monkeypatch, tmp_path, first_delay: float):
    """The helper takes 10 ms a block (`first_delay` for its first) and leaves a mark when it starts;
    the reader's first take waits for that mark, so the two meet however the scheduler runs the
    fork. Returns the spans the reader scanned itself ahead of the helper, and the most blocks it
    held scanned ahead at once."""
    reader, hits, take = os.getpid(), ah._hits, ah.Ahead.take
    started, seen, held = tmp_path / "helper-started", [], [0]

    def helper_hits(prefilter, fd, span, view):
        if os.getpid() == reader:
            seen.append(span)
        else:
            if not started.exists():
                started.write_text("1")
                time.sleep(first_delay)
            time.sleep(0.01)
        return hits(prefilter, fd, span, view)

    def take_after_start(self, k, start, end):
        for _ in range(500):
            if started.exists():
                break
            time.sleep(0.01)
        out = take(self, k, start, end)
        held[0] = max(held[0], len(self.early))
        return out

    monkeypatch.setattr(ah, "_hits", helper_hits)
    monkeypatch.setattr(ah.Ahead, "take", take_after_start)
    monkeypatch.setattr(ah.Ahead, "share", True)
    return seen, held


def test_the_reader_scans_a_later_block_while_the_helper_is_busy(tmp_path, monkeypatch, answered):
    """A slow helper: the reader, finding its next block still being scanned, claims a later one
    and scans it at once instead of waiting; the report is still the one it gives alone."""
    log = _log(tmp_path, ["memory-oom-log-prob.log", "ray-actor-died.log"])
    alone = _report([log], monkeypatch, alone=True)
    ahead_of_helper, _ = _slow_helper(monkeypatch, tmp_path, first_delay=0.0)
    assert _report([log], monkeypatch, alone=False) == alone
    with open(log, "rb") as fh:
        spans = list(ah.block_spans(fh.fileno(), log.stat().st_size, BLOCK))
    assert ahead_of_helper and set(ahead_of_helper) <= set(spans)
    assert set(ahead_of_helper) <= set(answered)  # what it scanned ahead answered its block there
    assert len(answered) > len(ahead_of_helper)   # and the helper answered the others


def test_a_stalled_helper_leaves_the_reader_at_most_a_few_blocks_ahead(tmp_path, monkeypatch, answered):
    """The helper stalls on its first block: the reader scans ahead only AHEAD_LEAD blocks (their
    hits wait in memory), then waits for the helper, and the report is still its own."""
    log = _log(tmp_path, ["memory-oom-log-prob.log", "ray-actor-died.log"])
    alone = _report([log], monkeypatch, alone=True)
    ahead_of_helper, held = _slow_helper(monkeypatch, tmp_path, first_delay=0.5)
    assert _report([log], monkeypatch, alone=False) == alone
    assert ahead_of_helper and 1 <= held[0] <= ah.AHEAD_LEAD


def test_a_log_copied_from_a_web_page_reads_the_same_with_the_helper(tmp_path, monkeypatch, answered):
    """Every space a no-break space: the reader reads a block with spaces and scans it again itself,
    setting the helper's hits for the raw bytes aside; the report is the one it gives alone, and the
    one the log with plain spaces gives."""
    log = _log(tmp_path, ["memory-oom-log-prob.log", "ray-actor-died.log"])
    pasted = tmp_path / "pasted.log"
    pasted.write_bytes(log.read_bytes().replace(b" ", "\u00a0".encode()))
    alone = _report([pasted], monkeypatch, alone=True)
    assert _report([pasted], monkeypatch, alone=False) == alone and answered
    plain = _report([log], monkeypatch, alone=True)
    assert [(f["rule"], [ln["n"] for ln in f["lines"]]) for f in alone["findings"]] == \
           [(f["rule"], [ln["n"] for ln in f["lines"]]) for f in plain["findings"]]


def test_several_logs_and_one_without_a_failure(tmp_path, monkeypatch, answered):
    a = _log(tmp_path, ["ray-actor-died.log"])
    b = tmp_path / "quiet.log"
    b.write_bytes(a.read_bytes().replace(b"Error", b"Notice").replace(b"error", b"notice"))
    for paths in ([a, b], [b]):
        assert _report(paths, monkeypatch, alone=False) == _report(paths, monkeypatch, alone=True)
    assert answered


def test_a_helper_that_dies_leaves_the_reader_alone(tmp_path, monkeypatch, answered):
    log = _log(tmp_path, ["ray-actor-died.log", "memory-oom-log-prob.log"])
    alone = _report([log], monkeypatch, alone=True)
    reader, prefilter = os.getpid(), default_matcher().prefilter
    candidates = prefilter.candidates
    calls = [0]

    def dying(view):
        calls[0] += 1
        if os.getpid() != reader and calls[0] > 3:  # the helper is killed after a few blocks
            os.kill(os.getpid(), signal.SIGKILL)
        return candidates(view)

    monkeypatch.setattr(prefilter, "candidates", dying)
    assert _report([log], monkeypatch, alone=False) == alone
    assert len(answered) == 3


def _cut_under_the_helper(tmp_path, monkeypatch, at_block: int, cut):
    """Run with a helper that, at block `at_block` (once the reader has read it and waits for its
    answer), cuts the file to cut(spans); returns (the report, the file's bytes before the cut,
    its spans, the helper's wait status)."""
    log = _log(tmp_path, ["ray-actor-died.log", "memory-oom-log-prob.log", "ray-actor-died.log"])
    whole = log.read_bytes()
    with open(log, "rb") as fh:
        spans = list(ah.block_spans(fh.fileno(), len(whole), BLOCK))
    reader, prefilter, take, close = os.getpid(), default_matcher().prefilter, ah.Ahead.take, ah.Ahead.close
    candidates, waiting, calls, status = prefilter.candidates, tmp_path / "reader-waits", [0], []

    def marking(self, k, start, end):
        if k == at_block:
            waiting.write_text("1")  # it has read the block and waits for the helper's answer
        return take(self, k, start, end)

    def cutting(view):
        calls[0] += 1
        if os.getpid() != reader and calls[0] == at_block + 1:  # the helper, at that block
            for _ in range(6000):
                if waiting.exists():
                    break
                time.sleep(0.01)
            os.truncate(log, cut(spans))
        return candidates(view)

    def closing(self):
        close(self)
        status.append(self.status)

    monkeypatch.setattr(ah.Ahead, "take", marking)
    monkeypatch.setattr(ah.Ahead, "close", closing)
    monkeypatch.setattr(prefilter, "candidates", cutting)
    got = _report([log], monkeypatch, alone=False)
    monkeypatch.setattr(prefilter, "candidates", candidates)
    return got, whole, spans, status[0]


def _as_read(tmp_path, monkeypatch, got, whole) -> dict:
    """The reader's report alone on the bytes it read."""
    kept = tmp_path / "kept.log"
    kept.write_bytes(whole[:got["stats"]["bytes"]])
    return {**_report([kept], monkeypatch, alone=True), "source": got["source"]}


def test_a_file_cut_short_under_the_helper_leaves_the_reader_alone(tmp_path, monkeypatch, answered):
    """The helper scans the file where the page cache holds it (mapped): a file cut short under it
    faults it (SIGBUS, for real here, even where the host set a handler of its own). The reader,
    which had read its block already, goes on alone and reports on what it read: the log up to
    where its reads stopped, past that block."""
    old = signal.signal(signal.SIGBUS, lambda *a: None)  # Python's handler returns: the fault would repeat
    try:
        got, whole, spans, status = _cut_under_the_helper(tmp_path, monkeypatch, 2, lambda s: s[2][0])
    finally:
        signal.signal(signal.SIGBUS, old)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGBUS
    assert len(answered) == 2  # the helper answered blocks 0 and 1, then died
    assert spans[2][1] <= got["stats"]["bytes"] < len(whole)
    assert got == _as_read(tmp_path, monkeypatch, got, whole)


def test_a_file_cut_inside_a_blocks_last_page_is_no_answer(tmp_path, monkeypatch, answered):
    """Cut inside the last page of the block the helper scans, the mapping reads zeros there and
    does not fault: the helper sees the file shorter than the block and answers nothing; the
    reader, which had the block's bytes, scans it itself."""
    def in_last_page(spans):
        end = spans[3][1]
        return max(spans[3][0] + 1, (end - 1) // 4096 * 4096 + 1)
    got, whole, spans, status = _cut_under_the_helper(tmp_path, monkeypatch, 3, in_last_page)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1
    assert len(answered) == 3
    assert got == _as_read(tmp_path, monkeypatch, got, whole)


def test_no_helper_is_forked_from_a_process_with_other_threads(tmp_path, monkeypatch, answered):
    log = _log(tmp_path, ["memory-oom-log-prob.log"])
    alone = _report([log], monkeypatch, alone=True)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert _report([log], monkeypatch, alone=False) == alone
    finally:
        stop.set()
        other.join()
    assert not answered
    assert _report([log], monkeypatch, alone=False) == alone and answered


def test_gzip_and_small_files_have_no_helper(tmp_path, monkeypatch, answered):
    log = _log(tmp_path, ["memory-oom-log-prob.log"])
    gz = tmp_path / "run.log.gz"
    gz.write_bytes(gzip.compress(log.read_bytes()))
    small = tmp_path / "small.log"
    small.write_bytes(log.read_bytes()[-(ah.AHEAD_MIN_BLOCKS - 1) * BLOCK:])
    started = []
    monkeypatch.setattr(ah, "Ahead", lambda *a: started.append(a))
    for p in (gz, small):
        _report([p], monkeypatch, alone=False)
    assert not started
    assert _report([gz], monkeypatch, alone=False) == {**_report([log], monkeypatch, alone=True),
                                                       "source": str(gz)}
