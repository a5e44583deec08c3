"""Why an attempt failed: the failure catalog's first explanation of its log (`matching.explain`).

One failure is the supervisor's own to name: the reference trainer's `phase=startup` marker (Ray
did not start or could not be joined), which the catalog only knows as a generic phase failure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matching.explain import explain_paths

PHASE_MARKER = re.compile(r"\[trainer\] phase=(\w+) failed")
STARTUP_MARKER = re.compile(r"\[trainer\] phase=startup failed: (.*)")
GENERIC_RULES = {None, "trainer-phase-failed"}  # says no more than the marker itself
STARTUP_FIX = ("Ray keeps its sockets, logs and address file under RAY_TMPDIR, else TMPDIR, else /tmp "
               "(ray 2.60, ray/_common/utils.py:327): that directory must exist, be writable and have "
               "free space; a local start also needs free ports here. Or join a running cluster with "
               "RAY_ADDRESS.")


@dataclass
class Diagnosis:
    category: str | None  # None: nothing in the catalog matched
    rule: str | None = None
    phase: str | None = None
    title: str = ""
    cause: str = ""
    fix: str = ""
    lines: list[dict] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.category or "unknown"

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.kind, "rule": self.rule, "phase": self.phase, "title": self.title,
                "cause": self.cause, "fix": self.fix, "lines": self.lines[:5]}


def diagnose(log_path: Path) -> Diagnosis:
    found = explain_paths([str(log_path)])
    phase, marker = marker_phase(log_path)
    top = found[0] if found else None
    if phase == "startup" and (top is None or top.rule in GENERIC_RULES):
        return startup_diagnosis(marker)
    if top is None:
        return Diagnosis(category=None, phase=phase)
    return Diagnosis(category=top.category, rule=top.rule, phase=top.phase or phase,
                     title=top.title, cause=top.cause, fix=top.fix,
                     lines=[dict(line) for line in top.lines])


def startup_diagnosis(marker: dict) -> Diagnosis:
    """Ray did not start: a cluster failure, named by the exception the trainer's marker gives."""
    m = STARTUP_MARKER.search(marker["text"])
    what = m.group(1).strip() if m else marker["text"].strip()
    return Diagnosis(category="cluster", phase="startup", title=f"Ray did not start: {what}",
                     cause="The trainer could not start its local Ray nodes (or join RAY_ADDRESS), "
                           "so no worker ran.",
                     fix=STARTUP_FIX, lines=[marker])


def marker_phase(log_path: Path) -> tuple[str | None, dict | None]:
    """The reference trainer's own `[trainer] phase=X failed` line: the phase, and the line."""
    phase, marker = None, None
    with open(log_path, errors="replace") as fh:
        for n, line in enumerate(fh, 1):
            m = PHASE_MARKER.search(line)
            if m:
                phase, marker = m.group(1), {"n": n, "text": line.rstrip("\n")}
    return phase, marker
