"""Shared test helpers. Tests build real situations; helpers here only lay them out."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# ../shared beside the checkout, or beside its parent (a git worktree under wt/)
SHARED = next((p / "shared" for p in ROOT.parents[:2] if (p / "shared").is_dir()), ROOT.parent / "shared")


def run_doctor(*args: str, cwd: str | os.PathLike | None = None, env: dict | None = None,
               input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = dict(os.environ)
    if env is not None:
        full_env.update(env)
    return subprocess.run([sys.executable, "-m", "doctor", *args], cwd=cwd or ROOT, env=full_env,
                          input=input, capture_output=True, text=True, timeout=timeout)


def run_python(code: str, tmp_path: Path, name: str = "job.py") -> subprocess.CompletedProcess:
    """A real interpreter running `code` from tmp_path: its stdout and stderr together, as a log
    has them (what it writes stays in tmp_path)."""
    script = tmp_path / name
    script.write_text(code)
    return subprocess.run([sys.executable, "-u", str(script)], stdout=subprocess.PIPE, cwd=tmp_path,
                          stderr=subprocess.STDOUT, text=True, timeout=120)


@pytest.fixture
def doctor():
    return run_doctor
