"""The lines of a block (matching/lines.py): newline counts and the lines that hold prefilter hits.

Their C versions must give the Python versions' answers for every buffer, span and hit list, and be
the ones in use wherever the install could build them: a silent fallback would only show as a
slower benchmark."""
from __future__ import annotations

import json
import mmap
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matching import lines

from .conftest import ROOT

NATIVE = lines.native
BUILT = "build matching/_lines.c: `pip install -e .`, or `python setup.py build_ext --inplace` in a checkout"


def test_the_c_versions_are_in_use_where_a_compiler_could_build_them():
    if os.environ.get("DOCTOR_NATIVE") == "0":
        assert (lines.count, lines.hit_lines) == (lines.python_count, lines.python_hit_lines)
        return
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None and shutil.which("cc") is None:
        assert lines.count is lines.python_count  # the fallback, and nothing half-built
        return
    assert NATIVE is not None, BUILT
    assert (lines.count, lines.hit_lines) == (NATIVE.count, NATIVE.hit_lines)


# bytes around the 16-byte steps and the 255-step flush of the C count; newline-heavy on purpose
_DATA = st.binary(max_size=9000) | st.lists(st.sampled_from([b"\n", b"a", b"\n\n", b"x" * 15]),
                                            max_size=1200).map(b"".join)
_INDEX = st.integers(min_value=-10_000, max_value=10_000)
native_only = pytest.mark.skipif(NATIVE is None, reason=BUILT)  # and the first test fails then


@native_only
@settings(max_examples=400, deadline=None)
@given(_DATA, _INDEX, _INDEX)
def test_the_c_count_counts_what_bytes_count_counts(data, start, end):
    for buf in (data, bytearray(data), memoryview(data)):
        assert NATIVE.count(buf, start, end) == lines.python_count(data, start, end)


@native_only
def test_the_c_count_counts_a_large_mapped_file(tmp_path):
    # a real file read through mmap, over the size where the count runs without the GIL
    path = tmp_path / "big.log"
    line = b"(TaskRunner pid=4242) step:1 - actor/pg_loss:0.01 - critic/score/mean:0.5\n"
    path.write_bytes(line * 40_000 + b"no newline at the end")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert NATIVE.count(m, 0, len(m)) == 40_000
        assert NATIVE.count(m, len(line) * 10 + 1, len(m)) == 40_000 - 10


@st.composite
def _block(draw):
    """A block of short and long lines, an end inside it, and two ascending hit lists in [-1, end)
    (a match that ends at offset 0 gives -1) that may share offsets and lines."""
    parts = draw(st.lists(st.sampled_from([b"\n", b"ERROR x\n", b"ok", b"y" * 70, b"\r\n"]), max_size=60))
    buf = bytearray(b"".join(parts))
    end = draw(st.integers(min_value=0, max_value=len(buf) + 8))  # past the buffer too: both clip it
    offsets = st.lists(st.integers(min_value=-1, max_value=max(min(end, len(buf)) - 1, -1)), max_size=40)
    return buf, end, sorted(draw(offsets)), sorted(draw(offsets))


@native_only
@settings(max_examples=600, deadline=None)
@given(_block(), st.sampled_from([0, 8, 64, 1 << 16]))
def test_the_c_hit_lines_finds_what_the_python_one_finds(block, max_line):
    buf, end, cheap, other = block
    assert NATIVE.hit_lines(buf, end, cheap, other, max_line) == \
        lines.python_hit_lines(buf, end, cheap, other, max_line)


def test_hit_lines_gives_each_line_once_and_marks_what_is_left_to_the_caller():
    buf = bytearray(b"ab\ncd ERROR x\n\nfoo other ERROR\nlong" + b"z" * 100 + b"\nend")
    for hit_lines in {lines.python_hit_lines, lines.hit_lines}:
        starts, raws, special = hit_lines(buf, len(buf), [6, 25, 31], [21, 40], 50)
        assert starts == [3, 15, 31]
        assert raws == [b"cd ERROR x", b"foo other ERROR", None]  # the long line: the caller clips it
        assert special == [(1, 30, 21, True), (2, 135, 31, True)]


@pytest.mark.parametrize("bad", [("text\n", 0, 5), (b"x", "0", 1)])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(TypeError):
        lines.count(*bad)


class _Offset(int):
    pass


@native_only
@pytest.mark.parametrize("cheap, other", [([1.0], []), ([], ["1"]), ([_Offset(1)], []), ((1,), [])])
def test_the_c_hit_lines_takes_lists_of_plain_ints_only(cheap, other):
    with pytest.raises(TypeError):
        NATIVE.hit_lines(b"a\nERROR\n", 8, cheap, other, 100)


@native_only
def test_explain_gives_the_same_findings_with_and_without_the_c_versions(tmp_path):
    # 36 MB: more blocks than the helper on another core needs to start; the failure near the end
    fixtures = ROOT / "tests" / "fixtures" / "explain"
    log = tmp_path / "run.log"
    noise = b"(WorkerDict pid=77) WARNING: Retrying request, attempt 1 of 3\nINFO step ok\n" * 480_000
    failure = b"".join((fixtures / f).read_bytes() for f in ("memory-oom-log-prob.log", "ray-actor-died.log"))
    log.write_bytes(noise + failure + noise[:5000])
    out = {}
    for native in ("1", "0"):
        env = {**os.environ, "DOCTOR_NATIVE": native}
        r = subprocess.run([sys.executable, "-m", "doctor", "explain", "--json", str(log)], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and not r.stderr, r.stderr[-2000:]
        out[native] = json.loads(r.stdout)
    assert out["1"] == out["0"]
    first = out["1"]["findings"][0]
    assert first["rule"] == "memory-oom-log-prob"
    assert [ln["n"] for ln in first["lines"]] == [960_008, 960_014]


@native_only
def test_a_build_of_another_version_is_not_used(monkeypatch):
    # an in-place build left from an older _lines.c (a checkout pulled, not rebuilt): Python instead
    assert lines._native() is NATIVE
    monkeypatch.setattr(lines, "C_VERSION", lines.C_VERSION + 1)
    assert lines._native() is None
