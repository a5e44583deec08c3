"""Fresh-machine conditions for one command, as a newcomer's machine has them: a private, empty
/tmp (no /tmp/ray, nothing an earlier test or run left there) and an empty HOME (no
~/.cache/verl-doctor, no Hugging Face cache), in a mount and PID namespace of its own, so nothing
it starts outlives it. This checkout and this interpreter stay where they are, also when they
live in /tmp (a clone there, as ../shared/tools/fresh-machine makes one). Without root (no
namespace) /tmp stays and TMPDIR names a private one, which Ray and Python's tempfile honour;
`FreshRun.private_tmp` says which it was.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a fresh machine does not have (the same list CI drops): caches and settings pointing into an old HOME or /tmp.
DROPPED = tuple(name for ln in (ROOT / ".ci" / "fresh-unset").read_text().splitlines()
                if (name := ln.split("#", 1)[0].strip()))
assert all(re.fullmatch(r"[A-Za-z_]\w*", name) for name in DROPPED), ".ci/fresh-unset: not a variable name"
# The old /tmp is mounted at $S/old, the new one is $S/tmp; what must stay is bound back.
ENTER = ('mount --bind /tmp "$S/old" && mount --bind "$S/tmp" /tmp && '
         'for p in $KEEP; do mkdir -p "$p" && mount --bind "$S/old/${p#/tmp/}" "$p" || exit 97; done')


@functools.lru_cache(maxsize=1)
def can_unshare() -> bool:
    try:
        return Path("/var/tmp").is_dir() and subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True,
            timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass
class FreshRun:
    proc: subprocess.CompletedProcess
    tmp: Path  # what the command had as its temp dir (/tmp in the namespace), seen from here
    private_tmp: bool  # True: it was /tmp itself; False: TMPDIR only
    scratch: Path | None = None  # removed on exit of the `with` block

    @property
    def output(self) -> str:
        return self.proc.stdout + self.proc.stderr

    def __enter__(self) -> "FreshRun":
        return self

    def __exit__(self, *exc) -> None:
        if self.scratch:  # the namespace and its mounts are gone with its last process
            shutil.rmtree(self.scratch, ignore_errors=True)


def _kept_under_tmp() -> list[str]:
    """This checkout and the interpreter's prefixes, where they live in /tmp."""
    paths = {str(ROOT), os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix)}
    return sorted(p for p in paths if p.startswith("/tmp/"))


def fresh_run(argv: list[str], fallback_dir: Path, env: dict[str, str] | None = None, setup: str = "",
              timeout: float = 600) -> FreshRun:
    """Run `argv` from `$TMP/work` with `$TMP/home` as HOME; use as `with fresh_run(...) as run:`.
    `setup`: shell lines run first, inside the namespace ($TMP is the temp dir). This checkout
    comes first on PYTHONPATH. `fallback_dir` holds the temp dir when there is no namespace."""
    private = can_unshare()
    scratch = Path(tempfile.mkdtemp(prefix="fresh-", dir="/var/tmp")) if private else fallback_dir
    tmp = scratch / "tmp"
    for sub in ("home", "work"):
        (tmp / sub).mkdir(parents=True)
    tmp.chmod(0o1777)
    base = {k: v for k, v in os.environ.items() if k not in DROPPED}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    base.update(env or {})
    inner = f'{setup}\ncd "$TMP/work" && exec "$@"'
    if private:
        (scratch / "old").mkdir()
        base.update(HOME="/tmp/home", TMPDIR="/tmp", S=str(scratch), KEEP=" ".join(_kept_under_tmp()))
        cmd = ["unshare", "--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private",
               "bash", "-c", f"{ENTER}\nTMP=/tmp\n{inner}", "fresh", *argv]
    else:
        base.update(HOME=str(tmp / "home"), TMPDIR=str(tmp), TMP=str(tmp))
        cmd = ["bash", "-c", inner, "fresh", *argv]
    try:
        proc = subprocess.run(cmd, env=base, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except BaseException:
        if private:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    return FreshRun(proc, tmp, private, scratch if private else None)
