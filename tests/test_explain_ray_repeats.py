"""Ray's log deduplicator: a line several workers print is shown once, then once more with
"[repeated Nx across cluster]". The repeat is the same failure: it adds nothing when the first copy
is in the log, and it is the only evidence when the log starts after it (a paste, a later capture).

The log is a real Ray run (a local instance, four tasks printing the same traceback).
"""
from __future__ import annotations

import re

import pytest

from matching.explain import explain_text

from .conftest import run_python

JOB = """import time, ray
ray.init(num_cpus=2, include_dashboard=False)

@ray.remote(max_retries=0)
def check(i):
    try:
        assert i < 0, "found no DeviceMesh from dtensor args for c10d.broadcast_.default!"
    except AssertionError:
        import traceback; traceback.print_exc()
    time.sleep(1)

ray.get([check.remote(i) for i in range(4)])
time.sleep(7)   # the deduplicator prints its repeats after its 5 s window
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def ray_log(tmp_path_factory) -> str:
    out = run_python(JOB, tmp_path_factory.mktemp("ray_repeats")).stdout
    assert "across cluster]" in out, out[-2000:]
    return out


def _from_first_repeat(text: str) -> str:
    lines = text.splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if "across cluster]" in ln)
    return "".join(lines[at:])


def _top(text: str) -> tuple[str, str]:
    found = explain_text(text)
    assert found, "no finding"
    return found[0].rule, found[0].category


@pytest.mark.parametrize("paste", [lambda t: t, lambda t: ANSI.sub("", t),           # as printed; colours gone
                                   lambda t: t.replace("\x1b", "")],   # a web page's copy: "[36m" left as text
                         ids=["as-printed", "colours-stripped", "escapes-dropped"])
def test_a_log_that_starts_at_rays_repeats_still_names_the_failure(ray_log, paste):
    whole = paste(ray_log)
    later = _from_first_repeat(whole)
    assert "AssertionError: found no DeviceMesh" in later and later.count("across cluster]") >= 4
    assert _top(later) == _top(whole) == ("generic-python-exception", "other")


def test_a_repeat_of_a_line_the_log_holds_adds_no_finding_or_hit(ray_log):
    plain = ANSI.sub("", ray_log)
    without = "".join(ln for ln in plain.splitlines(keepends=True) if "across cluster]" not in ln)
    a, b = explain_text(plain), explain_text(without)
    assert [(f.rule, f.hits, [ln.n for ln in f.lines]) for f in a] == \
           [(f.rule, f.hits, [ln.n for ln in f.lines]) for f in b]
