"""Ray's log deduplicator: a line several workers print is shown once, then once more with
"[repeated Nx across cluster]". The repeat is the same failure: it adds nothing when the first copy
is in the log, and it is the only evidence when the log starts after it (a paste, a later capture).

The logs are real Ray runs (a local instance, four tasks printing the same traceback, or the same
error line of a tool that gives up).
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
# Python logging's CRITICAL form, an error line the generic layer reads when nothing else is in the log
LINE_JOB = JOB.replace('''    try:
        assert i < 0, "found no DeviceMesh from dtensor args for c10d.broadcast_.default!"
    except AssertionError:
        import traceback; traceback.print_exc()
''', '''    print("CRITICAL:root:connection refused by the store at 10.0.0.1:29500", flush=True)
''')
PASTES = [lambda t: t, lambda t: ANSI.sub("", t),           # as printed; colours gone
          lambda t: t.replace("\x1b", "")]                  # a web page's copy: "[36m" left as text
PASTE_IDS = ["as-printed", "colours-stripped", "escapes-dropped"]
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


@pytest.mark.parametrize("paste", PASTES, ids=PASTE_IDS)
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


@pytest.fixture(scope="module")
def ray_line_log(tmp_path_factory) -> str:
    out = run_python(LINE_JOB, tmp_path_factory.mktemp("ray_line_repeats")).stdout
    assert "across cluster]" in out and "CRITICAL:root:" in out, out[-2000:]
    return out


def _seen(text: str) -> list:
    return [(f.rule, f.category, f.hits, [(ln.n, ln.text) for ln in f.lines]) for f in explain_text(text)]


@pytest.mark.parametrize("paste", PASTES, ids=PASTE_IDS)
def test_a_repeated_error_line_is_read_as_its_first_copy_however_it_was_pasted(ray_line_log, paste):
    """Ray colours its count and, the first time, adds a hint after it ("(Ray deduplicates logs by
    default. ...)"): the line still reads as the line it repeats, and the first copy is the evidence."""
    whole = paste(ray_line_log)
    plain = ANSI.sub("", ray_line_log)
    without = "".join(ln for ln in plain.splitlines(keepends=True) if "across cluster]" not in ln)
    seen = _seen(whole)
    assert seen and seen == _seen(without), (seen, _seen(without))
    assert seen[0][:2] == ("generic-error-line", "network")
    later = _seen(_from_first_repeat(whole))  # a paste that starts at the repeat: the repeat is the evidence
    assert [s[:3] for s in later] == [s[:3] for s in seen]
    assert "repeated" not in later[0][3][0][1] and "deduplicates" not in later[0][3][0][1]
