"""doctor explain's helper on another core (matching/ahead.py), tested in a process like the CLI's.

The helper is forked only from a process without other threads (one could hold a lock the helper
needs). A test process may hold threads that earlier tests left behind, such as tqdm's monitor after
a progress bar on a fresh machine, and then no helper starts. So the cases in explain_ahead_cases.py
run in a fresh interpreter of their own, where the only thread is the one the CLI would have."""
from __future__ import annotations

import subprocess
import sys

from .conftest import ROOT


def test_the_helper_cases_in_an_interpreter_without_other_threads():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        str(ROOT / "tests" / "explain_ahead_cases.py")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-4000:] + r.stderr[-2000:]
    assert "10 passed" in r.stdout, r.stdout[-2000:]
