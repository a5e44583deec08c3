"""Cut a log of any size down to what a maintainer reads: the lines around the evidence and the tail.

One streaming pass in large blocks: newlines are counted in C (`bytes.count`), and only a block that
holds a wanted line is split into lines, so a 1 GB log costs about one read of it and the memory of
two blocks. Lines are cleaned for display (ANSI colours and control characters out, capped length);
redaction is the caller's job.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO, Iterable

BLOCK_BYTES = 8 << 20
MAX_CARRY = 64 << 10  # an endless "line" keeps only its head
TAIL_KEEP_BYTES = 4 << 20

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
            max_chars: int = 400, block_bytes: int = BLOCK_BYTES) -> LogCut:
    """The lines within `context` of each evidence line, plus the last `tail` lines."""
    cut = LogCut(name, evidence=set(evidence))
    spans = _merge((max(1, n - context), n + context) for n in cut.evidence)
    picked: dict[int, str] = {}
    first = 1          # number of the first line in `carry + block`
    carry = b""
    recent = b""       # the last bytes seen, whole lines, for the tail
    recent_first = 1   # number of the first line in `recent`
    while True:
        block = stream.read(block_bytes)
        if not block:
            break
        cut.bytes += len(block)
        data = carry + block
        end = data.rfind(b"\n")
        if end < 0:
            carry = data if len(data) <= MAX_CARRY else data[:MAX_CARRY]
            continue
        whole, carry = data[: end + 1], data[end + 1:]
        count = whole.count(b"\n")
        last = first + count - 1
        if any(a <= last and b >= first for a, b in spans):
            for i, raw in enumerate(whole.split(b"\n")[:count]):
                n = first + i
                if any(a <= n <= b for a, b in spans):
                    picked[n] = display(raw, max_chars)
        recent, recent_first = _keep_recent(recent, recent_first, whole, tail)
        first = last + 1
    if carry:  # a last line without a newline
        recent, recent_first = _keep_recent(recent, recent_first, carry + b"\n", tail)
        if any(a <= first <= b for a, b in spans):
            picked[first] = display(carry, max_chars)
        first += 1
    cut.lines = first - 1
    tail_lines = recent.split(b"\n")[:-1]
    start = max(recent_first, cut.lines - tail + 1)
    for n in range(start, cut.lines + 1):
        picked[n] = display(tail_lines[n - recent_first], max_chars)
    cut.excerpt = sorted(picked.items())
    return cut


def _keep_recent(recent: bytes, recent_first: int, whole: bytes, tail: int) -> tuple[bytes, int]:
    """Append whole lines to the tail buffer; past the byte budget drop lines from its front, but
    never any of the last `tail` lines."""
    recent += whole
    if len(recent) <= 2 * TAIL_KEEP_BYTES:
        return recent, recent_first
    pos = len(recent) - 1  # the buffer ends with a newline
    for _ in range(tail):
        pos = recent.rfind(b"\n", 0, pos)
        if pos < 0:
            break
    tail_start = pos + 1
    nl = recent.find(b"\n", len(recent) - TAIL_KEEP_BYTES - 1)
    budget_start = nl + 1 if nl >= 0 else len(recent)
    cut = min(tail_start, budget_start)
    return recent[cut:], recent_first + recent.count(b"\n", 0, cut)
