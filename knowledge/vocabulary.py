"""The shared vocabulary (knowledge/vocabulary.toml): categories, statuses, verdicts, phases, platforms."""
from __future__ import annotations

from knowledge import load_toml

_DOC = load_toml("vocabulary.toml")

CATEGORIES: tuple[str, ...] = tuple(c["name"] for c in _DOC["category"])
CATEGORY_COLOURS: dict[str, str] = {c["name"]: c["colour"] for c in _DOC["category"]}
STATUSES: tuple[str, ...] = tuple(s["name"] for s in _DOC["status"])
SEVERITY: dict[str, int] = {s["name"]: s["severity"] for s in _DOC["status"]}
MARKS: dict[str, tuple[str, str]] = {s["name"]: (s["mark"], s["colour"]) for s in _DOC["status"]}
VERDICTS: tuple[str, ...] = tuple(_DOC["run"]["verdicts"])
PHASES: tuple[str, ...] = tuple(_DOC["run"]["phases"])
PLATFORMS: tuple[str, ...] = tuple(_DOC["run"]["platforms"])
