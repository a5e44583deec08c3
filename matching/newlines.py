"""Newlines in a span of a buffer: what every line number doctor explain prints is made of.

The C version (matching/_newlines.c) is built by `pip install` where a C compiler is at hand; it
counts sixteen bytes at a time, where bytes.count goes byte by byte (on a 1 GB log, 0.03 s against
0.3 s: bench/explain_speed.py). Without it the same answers come from bytes.count.
DOCTOR_NATIVE=0 uses bytes.count even where the C version is built.
"""
from __future__ import annotations

import os


def _python_count(buf, start: int, end: int) -> int:
    return buf.count(b"\n", start, end)


def _native():
    if os.environ.get("DOCTOR_NATIVE") == "0":
        return None
    try:
        from matching import _newlines
    except ImportError:  # not built here (no compiler at install, or a checkout never installed)
        return None
    return _newlines.count


native_count = _native()
count = native_count or _python_count
