"""Fresh-machine conditions for one command, as a newcomer's machine has them: a private, empty
/tmp (no /tmp/ray, nothing an earlier test or run left there) and an empty HOME (no
~/.cache/verl-doctor, no Hugging Face cache), in a mount and PID namespace of its own, so nothing
it starts outlives it. Without root (no namespace) the /tmp stays and TMPDIR names a private one,
which Ray and Python's tempfile honour; `FreshRun.private_tmp` says which it was.
"""
from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a fresh machine does not have: caches and settings pointing into an old HOME or /tmp.
DROPPED = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "VERL_DOCTOR_CACHE", "RAY_TMPDIR", "RAY_ADDRESS",
           "TMPDIR", "HF_HOME", "HF_HUB_CACHE", "TRANSFORMERS_CACHE")


@functools.lru_cache(maxsize=1)
def can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                              capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass
class FreshRun:
    proc: subprocess.CompletedProcess
    tmp: Path  # what the command saw as its temp dir (/tmp in the namespace), seen from here
    private_tmp: bool  # True: it was /tmp itself; False: TMPDIR only

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr


def fresh_run(argv: list[str], scratch: Path, env: dict[str, str] | None = None, setup: str = "",
              timeout: float = 600) -> FreshRun:
    """Run `argv` from `<tmp>/work` with `<tmp>/home` as HOME. `setup`: shell lines run first,
    inside the namespace (with $TMP its temp dir). This checkout comes first on PYTHONPATH."""
    tmp = scratch / "fresh-tmp"
    (tmp / "home").mkdir(parents=True)
    (tmp / "work").mkdir()
    tmp.chmod(0o1777)
    base = {k: v for k, v in os.environ.items() if k not in DROPPED}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    base.update(env or {})
    private = can_unshare()
    inner = f'{setup}\ncd "$TMP/work" && exec "$@"'
    if private:
        cmd = ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private",
               "bash", "-c", f'mount --bind "$0" /tmp && TMP=/tmp && {inner}', str(tmp), *argv]
        base.update(HOME="/tmp/home", TMPDIR="/tmp")
    else:
        cmd = ["bash", "-c", f'TMP="$0" && {inner}', str(tmp), *argv]
        base.update(HOME=str(tmp / "home"), TMPDIR=str(tmp))
    proc = subprocess.run(cmd, env=base, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    return FreshRun(proc, tmp, private)
