"""Why an attempt failed: the failure catalog's first explanation of its log (`matching.explain`)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from matching.explain import explain_paths

PHASE_MARKER = re.compile(r"\[trainer\] phase=(\w+) failed")


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
    phase = marker_phase(log_path)
    if not found:
        return Diagnosis(category=None, phase=phase)
    top = found[0]
    return Diagnosis(category=top.category, rule=top.rule, phase=top.phase or phase,
                     title=top.title, cause=top.cause, fix=top.fix,
                     lines=[dict(line) for line in top.lines])


def marker_phase(log_path: Path) -> str | None:
    """The reference trainer's own `[trainer] phase=X failed` line names the phase."""
    phase = None
    with open(log_path, errors="replace") as fh:
        for line in fh:
            m = PHASE_MARKER.search(line)
            if m:
                phase = m.group(1)
    return phase
