"""The lines of a block: how many newlines a span holds, and which lines hold the prefilter's hits.

On a 1 GB log these two loops cost almost as much as the multi-pattern scan when written in Python
(bytes.count goes byte by byte; each hit costs a find, an rfind and a copy). Their C versions
(matching/_lines.c) are built by `pip install` where a C compiler is at hand, and used then; the
Python ones below give the same answers (tests/test_lines.py). DOCTOR_NATIVE=0 uses Python.
"""
from __future__ import annotations

import os


C_VERSION = 1  # what matching/_lines.c says it is: an in-place build left from another version is not used


def python_count(buf, start: int, end: int) -> int:
    """Newlines in buf[start:end] of a bytes or bytearray (the C one takes any buffer)."""
    return buf.count(b"\n", start, end)


def python_hit_lines(buf, end: int, cheap: list[int], other: list[int], max_line: int):
    """The lines of buf[:end] holding the hits (two ascending lists of offsets, each in [0, end)):
    (starts, lines, special). `lines` has each line's bytes, None for one longer than max_line;
    `special` has (index, line end, first hit, has an `other` hit) for the lines that are too long
    or hold a hit of `other`: the only ones left to the caller."""
    end = min(end, len(buf))
    hits = sorted(cheap + other) if other else cheap  # two sorted runs: one linear merge
    starts: list[int] = []
    lines: list[bytes | None] = []
    special: list[tuple[int, int, int, bool]] = []
    line_end, o, n_other = -1, 0, len(other)
    rfind, find = buf.rfind, buf.find
    with memoryview(buf) as view:
        for pos in hits:
            if pos <= line_end:
                continue  # this line is done
            if pos >= end:
                break
            ls = rfind(b"\n", 0, pos) + 1
            line_end = find(b"\n", pos, end)
            if line_end < 0:
                line_end = end
            too_long = line_end - ls > max_line
            has_other = o < n_other and other[o] <= line_end
            while o < n_other and other[o] <= line_end:
                o += 1
            if too_long or has_other:
                special.append((len(lines), line_end, pos, has_other))
            starts.append(ls)
            lines.append(None if too_long else view[ls:line_end].tobytes())
    return starts, lines, special


def _native():
    if os.environ.get("DOCTOR_NATIVE") == "0":
        return None
    try:
        from matching import _lines
    except ImportError:  # not built here (no compiler at install, or a checkout never installed)
        return None
    return _lines if getattr(_lines, "VERSION", None) == C_VERSION else None


native = _native()
count = native.count if native else python_count
hit_lines = native.hit_lines if native else python_hit_lines
