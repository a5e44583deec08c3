"""Cut a log of any size down to what a maintainer reads: the lines around the evidence and the tail.

One streaming pass in large blocks: newlines are counted in C (`bytes.count`), and only a block that
holds a wanted line is split into lines, so a 1 GB log costs about one read of it and the memory of
two blocks. Lines are cleaned for display (ANSI colours and control characters out, capped length);
redaction is the caller's job.
"""
from __future__ import annotations

import io
import re
from collections import deque
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable

BLOCK_BYTES = 8 << 20
MAX_CARRY = 64 << 10  # an endless "line" keeps only its head
TAIL_KEEP_BYTES = 64 << 20  # blocks kept for the tail, at most (a few unless lines are huge)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass
class LogCut:
    """Numbered excerpts of one log, merged and in order."""
    name: str
    bytes: int = 0
    lines: int = 0
    excerpt: list[tuple[int, str]] = field(default_factory=list)  # (line number, text)
    evidence: set[int] = field(default_factory=set)

    @property
    def complete(self) -> bool:
        """True when the excerpt is the whole log."""
        return len(self.excerpt) == self.lines

    def windows(self) -> list[list[tuple[int, str]]]:
        """The excerpt split where line numbers jump."""
        out: list[list[tuple[int, str]]] = []
        for n, text in self.excerpt:
            if out and out[-1][-1][0] == n - 1:
                out[-1].append((n, text))
            else:
                out.append([(n, text)])
        return out


def display(raw: bytes, max_chars: int) -> str:
    text = _CONTROL.sub("", _ANSI.sub("", raw.decode("utf-8", "replace").rstrip("\r\n")))
    return text if len(text) <= max_chars else text[:max_chars] + f" ... [{len(text) - max_chars} more characters]"


def _merge(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def cut_log(stream: BinaryIO, name: str, evidence: Iterable[int], context: int = 3, tail: int = 40,
            max_chars: int = 400, block_bytes: int = BLOCK_BYTES, total_lines: int | None = None) -> LogCut:
    """The lines within `context` of each evidence line, plus the last `tail` lines.

    Given `total_lines` (the explain pass counted them) and a seekable file, reading stops after the
    last evidence window and the tail is read from the end of the file."""
    cut = LogCut(name, evidence=set(evidence))
    spans = _merge((max(1, n - context), n + context) for n in cut.evidence)
    stop_after = spans[-1][1] if spans else 0
    seek_tail = total_lines is not None and _seekable(stream)
    picked: dict[int, str] = {}
    line = 1       # number of the line that starts with `carry`
    carry = b""    # the unfinished line before the next block (its head, when endless)
    recent: deque[_Chunk] = deque()  # the last blocks, by reference: the tail is cut from them
    recent_lines = 0
    while True:
        block = stream.read(block_bytes)
        if not block:
            break
        cut.bytes += len(block)
        count = block.count(b"\n")
        if count == 0:
            if len(carry) < MAX_CARRY:
                carry += block[: MAX_CARRY - len(carry)]
            continue
        end = block.rfind(b"\n")
        chunk = _Chunk(carry, block, end, line, count)
        if any(a < line + count and b >= line for a, b in spans):
            for i, raw in enumerate(chunk.lines()):
                if any(a <= line + i <= b for a, b in spans):
                    picked[line + i] = display(raw, max_chars)
        recent.append(chunk)
        recent_lines += count
        while len(recent) > 1 and (recent_lines - recent[0].count >= tail
                                   or sum(len(c.block) for c in recent) > TAIL_KEEP_BYTES):
            recent_lines -= recent.popleft().count
        carry = block[end + 1: end + 1 + MAX_CARRY]
        line += count
        if seek_tail and line > stop_after:
            return _finish_from_end(stream, cut, picked, total_lines, tail, max_chars)
    tail_lines = [(c.first + i, raw) for c in recent for i, raw in enumerate(c.lines())]
    if carry:  # a last line without a newline
        tail_lines.append((line, carry))
        if any(a <= line <= b for a, b in spans):
            picked[line] = display(carry, max_chars)
        line += 1
    cut.lines = line - 1
    for n, raw in tail_lines[max(0, len(tail_lines) - tail):] if tail else []:
        picked[n] = display(raw, max_chars)
    cut.excerpt = sorted(picked.items())
    return cut


def _seekable(stream: BinaryIO) -> bool:
    """A plain file (or bytes in memory): not a pipe, not a decompressing stream."""
    return isinstance(stream, (io.BufferedReader, io.BytesIO)) and stream.seekable()


def _finish_from_end(stream: BinaryIO, cut: LogCut, picked: dict[int, str], total: int, tail: int,
                     max_chars: int) -> LogCut:
    """The last `tail` lines, read backwards from the end; numbered from the known line count."""
    size = stream.seek(0, 2)
    span = 64 << 10
    while True:
        start = max(0, size - span)
        stream.seek(start)
        data = stream.read(size - start)
        if data.count(b"\n") > tail or start == 0 or span >= TAIL_KEEP_BYTES:
            break
        span *= 4
    if start > 0:
        data = data[data.find(b"\n") + 1:]  # begin at a whole line
    lines = (data[:-1] if data.endswith(b"\n") else data).split(b"\n") if data else []
    for i, raw in enumerate(lines[max(0, len(lines) - tail):] if tail else []):
        picked[total - min(tail, len(lines)) + 1 + i] = display(raw, max_chars)
    cut.bytes, cut.lines = size, total
    cut.excerpt = sorted(picked.items())
    return cut


@dataclass
class _Chunk:
    """A block's whole lines, by reference: the head carried in from before, and the block up to
    its last newline."""
    carry: bytes
    block: bytes
    end: int      # index of the block's last newline
    first: int    # number of its first line
    count: int    # how many lines end in it

    def lines(self) -> list[bytes]:
        return (self.carry + self.block[: self.end]).split(b"\n")
