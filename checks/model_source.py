"""The actor model's config.json, wherever it can be had, for the memory estimate.

Best first: the path itself (a directory with config.json, or the file); the Hugging Face cache of
the environment training will see (the hub layout `models--ORG--NAME/refs/main` ->
`snapshots/<commit>/config.json`, as huggingface_hub's `try_to_load_from_cache` reads it, under
HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub); else the sourced table of common
models in knowledge/models.toml, keyed by the last part of the path. A CI runner or a login node
usually has none of the weights, and the estimate needs only the shape.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ModelConfig:
    config: dict | None
    origin: str  # "path" | "hf-cache" | "table" | "" (not found)
    where: str  # the file, or the table row and its source; why not found when config is None


def find(path: str | None, cwd: Path, env: dict[str, str] | None = None) -> ModelConfig:
    if not path:
        return ModelConfig(None, "", "no actor_rollout_ref.model.path")
    env = dict(os.environ) if env is None else env
    local = Path(os.path.expanduser(str(path)))
    local = local if local.is_absolute() else cwd / local
    file = local / "config.json" if local.is_dir() else local
    if file.is_file():
        return _read(file, "path")
    cache = hub_cache(env)
    cached = cached_config(str(path), cache)
    if cached is not None:
        return _read(cached, "hf-cache")
    row = table_row(str(path))
    if row is not None:
        fields = {k: v for k, v in row.items() if k not in ("names", "source", "checked")}
        return ModelConfig(fields, "table", f"doctor's model table: {row['names'][0]} ({row['source']})")
    return ModelConfig(None, "", f"{file} not found on this machine, {_name(str(path))} is not in the Hugging Face "
                                 f"cache ({cache}) nor in doctor's model table (knowledge/models.toml)")


def _read(file: Path, origin: str) -> ModelConfig:
    try:
        return ModelConfig(json.loads(file.read_text()), origin, str(file))
    except (OSError, ValueError) as exc:
        return ModelConfig(None, "", f"{file}: {exc}")


def hub_cache(env: dict[str, str]) -> Path:
    """The hub cache directory, by huggingface_hub's own precedence (constants.py)."""
    explicit = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expanduser(explicit))
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(os.path.expanduser(home)) / "hub"


def _name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def cached_config(path: str, cache: Path) -> Path | None:
    """config.json of the model in the cache: the repo `path` names (ORG/NAME), else any repo whose
    name is the last part of the path; the revision refs/main points at, else the newest snapshot."""
    if not cache.is_dir():
        return None
    parts = path.strip("/").split("/")
    exact = cache / f"models--{parts[-2]}--{parts[-1]}" if len(parts) >= 2 else None
    wanted = f"--{_name(path)}".lower()
    repos = [exact] if exact is not None and exact.is_dir() else []
    repos += sorted(p for p in cache.glob("models--*") if p.name.lower().endswith(wanted) and p not in repos)
    for repo in repos:
        found = _snapshot_config(repo)
        if found is not None:
            return found
    return None


def _snapshot_config(repo: Path) -> Path | None:
    ref = repo / "refs" / "main"
    if ref.is_file():
        pinned = repo / "snapshots" / ref.read_text().strip() / "config.json"
        if pinned.is_file():
            return pinned
    found = [p for p in (repo / "snapshots").glob("*/config.json") if p.is_file()]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def table_row(path: str) -> dict | None:
    from knowledge import load_toml

    wanted = _name(path).lower()
    for row in load_toml("models.toml")["model"]:
        if any(_name(n).lower() == wanted for n in row["names"]):
            return row
    return None
