"""Data, not code: failure rules, the version matrix, the device table, and their loaders."""
from __future__ import annotations

import sys
from functools import lru_cache
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def load_toml(name: str) -> dict:
    """Load `knowledge/<name>` (a TOML file shipped with the package)."""
    with open(HERE / name, "rb") as fh:
        return tomllib.load(fh)
