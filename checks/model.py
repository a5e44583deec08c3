"""The finding: the one currency every check, renderer and report trades in."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from knowledge.vocabulary import CATEGORIES, SEVERITY as _SEVERITY, STATUSES

__all__ = ["CATEGORIES", "STATUSES", "Finding", "Problem", "overall_status", "exit_code"]


@dataclass
class Finding:
    id: str
    category: str
    status: str
    title: str
    message: str = ""
    fix: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    node: str | None = None

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}")
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")

    @property
    def severity(self) -> int:
        return _SEVERITY[self.status]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Problem:
    """What a check returns: the verdict and its words. The runner turns it into a Finding with
    the check's own id, category and title (or `title`, where one problem needs its own words),
    and the Finding validates the status."""

    status: str
    message: str = ""
    fix: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    title: str | None = None


def overall_status(findings: list[Finding], strict: bool = False) -> str:
    """pass / warn / fail for a whole run; --strict turns warnings into failure."""
    worst = max((f.severity for f in findings), default=0)
    if worst >= _SEVERITY["fail"] or (strict and worst >= _SEVERITY["warn"]):
        return "fail"
    return "warn" if worst >= _SEVERITY["warn"] else "pass"


def exit_code(findings: list[Finding], strict: bool = False) -> int:
    return 1 if overall_status(findings, strict) == "fail" else 0
