"""The job's process: started in a session of its own (so whatever it spawns is stopped with it),
sent SIGTERM when the supervisor dies, signalled by PID only, and read line by line with every
secret removed before a line reaches the console or the attempt's log."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import BinaryIO, Iterator

from matching.redact import Redactor


def start_child(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    """The job with stdout and stderr on one pipe (one log, in the order it was written)."""
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_die_with_parent)


def redacted_lines(stream: BinaryIO, redactor: Redactor) -> Iterator[str]:
    """The job's output as text, a line at a time, without secrets."""
    for raw in stream:
        yield redactor.text(raw.decode("utf-8", "replace"))


def signal_pid(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def signal_if_running(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is None:
        signal_pid(proc.pid, sig)


def signal_session(pid: int, sig: int) -> None:
    """Signal the session the child leads (it was started with start_new_session)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_parent() -> None:
    """The child gets SIGTERM if the supervisor dies, so a resumed run never races an orphan."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass
