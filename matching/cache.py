"""doctor's own cache (~/.cache/verl-doctor): compiled Hyperscan databases and saved catalogs.

Every file is named by a digest of what it was made from, written atomically (a concurrent doctor
never reads half a file), and pruned by last use. A cache that cannot be read or written is
ignored: it only saves time.
"""
from __future__ import annotations

import os
from pathlib import Path

try:  # CPython's own BLAKE2: hashlib would load OpenSSL, ~3.5 MB of RSS for a cache key
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - another interpreter
    from hashlib import blake2b


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "verl-doctor"


def cache_key(data: bytes) -> str:
    """The name part of a cached file: a digest of everything the file was made from."""
    return blake2b(data, digest_size=12).hexdigest()


def load(name: str) -> bytes | None:
    """The cached file's bytes, marked as used now (its mtime orders the pruning); None if absent."""
    path = cache_dir() / name
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        os.utime(path)
    except OSError:
        pass
    return data


def store(name: str, data: bytes, family: str, keep: int) -> None:
    """Write the file atomically, then keep only the `keep` most recently used of its `family`
    (a glob): each catalog edit makes a new one, and so does every test that builds a catalog of
    its own, so the one in use must not be pushed out."""
    d = cache_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        import tempfile  # only when writing: its import costs every run that reads the cache

        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, d / name)
        old = sorted(d.glob(family), key=lambda p: p.stat().st_mtime, reverse=True)[keep:]
        for path in old:
            path.unlink(missing_ok=True)
    except OSError:
        pass
