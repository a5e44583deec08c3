"""The newline counter under every line number doctor explain prints (matching/newlines.py).

Its C version must give bytes.count's answer for every buffer and span, and be the one in use
wherever the install could build it: a silent fallback would only show as a slower benchmark."""
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

from matching import newlines

from .conftest import ROOT

NATIVE = newlines.native_count
BUILT = "run `pip install -e .` (it builds matching/_newlines.c)"


def test_the_c_version_is_in_use_where_a_compiler_could_build_it():
    if os.environ.get("DOCTOR_NATIVE") == "0":
        assert newlines.count is newlines._python_count
        return
    compiler = sysconfig.get_config_var("CC") or "cc"
    if shutil.which(compiler.split()[0]) is None and shutil.which("cc") is None:
        assert newlines.count is newlines._python_count  # the fallback, and nothing half-built
        return
    assert NATIVE is not None and newlines.count is NATIVE, BUILT


# bytes around the 16-byte steps and the 255-step flush of the C loop; newline-heavy on purpose
_DATA = st.binary(max_size=9000) | st.lists(st.sampled_from([b"\n", b"a", b"\n\n", b"x" * 15]),
                                            max_size=1200).map(b"".join)
_INDEX = st.integers(min_value=-10_000, max_value=10_000)


@pytest.mark.skipif(NATIVE is None, reason=BUILT)  # the test above fails then
@settings(max_examples=400, deadline=None)
@given(_DATA, _INDEX, _INDEX)
def test_the_c_version_counts_what_bytes_count_counts(data, start, end):
    for buf in (data, bytearray(data), memoryview(data)):
        assert NATIVE(buf, start, end) == data.count(b"\n", start, end)


@pytest.mark.skipif(NATIVE is None, reason=BUILT)
def test_the_c_version_counts_a_large_mapped_file(tmp_path):
    # a real file read through mmap, over the size where the count runs without the GIL
    path = tmp_path / "big.log"
    line = b"(TaskRunner pid=4242) step:1 - actor/pg_loss:0.01 - critic/score/mean:0.5\n"
    path.write_bytes(line * 40_000 + b"no newline at the end")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert NATIVE(m, 0, len(m)) == 40_000
        assert NATIVE(m, len(line) * 10 + 1, len(m)) == 40_000 - 10


def test_a_type_without_the_buffer_interface_is_refused():
    with pytest.raises(TypeError):
        newlines.count("text\n", 0, 5)


def test_explain_gives_the_same_findings_with_and_without_the_c_version(tmp_path):
    # 36 MB: more blocks than the helper on another core needs to start; the failure near the end
    fixtures = ROOT / "tests" / "fixtures" / "explain"
    log = tmp_path / "run.log"
    noise = b"(WorkerDict pid=77) WARNING: Retrying request, attempt 1 of 3\nINFO step ok\n" * 480_000
    log.write_bytes(noise + (fixtures / "memory-oom-log-prob.log").read_bytes() + noise[:5000])
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
