"""The phase-aware memory ladder: after an out-of-memory failure in phase P, the next change.

The ladder is data (`knowledge/downshift.toml`). A rung applies while it can still change the
configuration, so the ladder has no state of its own: the current configuration says where a run
stands on it, and `doctor train --resume` needs nothing else. Only memory knobs move; the keys in
`policy.frozen` (batch per step, group size, update size, learning rate) never do.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from knowledge import load_toml

PHASES = ("rollout_init", "generate", "weight_sync", "log_prob", "ref_log_prob", "update")


@dataclass(frozen=True)
class Rung:
    phase: str
    keys: tuple[str, ...]
    action: str
    engines: tuple[str, ...]
    reason: str
    source: str
    min: float | None = None
    max: float | None = None
    by: float | None = None
    min_sum: tuple[str, ...] = ()
    requires: str | None = None

    def propose(self, config: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """{key: (old, new)} this rung would change in `config`; empty when it cannot help."""
        if self.requires and not _truthy(config.get(self.requires)):
            return {}
        if self.action == "enable":
            return {k: (config.get(k), True) for k in self.keys if not _truthy(config.get(k))}
        key = self.keys[0]
        old = config.get(key)
        if not _is_number(old):
            return {}  # null: the knob is not in use (e.g. a token budget without dynamic bsz)
        if self.action == "halve":
            floor = self._floor(config)
            new = max(int(floor), int(old) // 2)
        elif self.action == "step":
            new = round(old + self.by, 4)
            if self.min is not None:
                new = max(self.min, new)
            if self.max is not None:
                new = min(self.max, new)
        else:
            raise ValueError(f"unknown ladder action {self.action!r}")
        return {key: (old, new)} if new != old else {}

    def _floor(self, config: Mapping[str, Any]) -> float:
        if self.min_sum:
            parts = [config.get(k) for k in self.min_sum]
            return sum(p for p in parts if _is_number(p)) or 1
        return self.min if self.min is not None else 1


@dataclass
class Downshift:
    """One retry's worth of change: possibly several rungs when the estimate says one is not enough."""

    phase: str
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # rungs passed over because they cannot fit

    def __bool__(self) -> bool:
        return bool(self.changes)


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    return bool(v)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def policy() -> dict:
    return load_toml("downshift.toml")["policy"]


def action_for(category: str | None, rule: str | None = None) -> str:
    """downshift | wait_retry | retry_once | stop: by rule where the rule says, else by category."""
    by_rule = policy().get("by_rule", {})
    if rule in by_rule:
        return by_rule[rule]
    table = policy()["on_failure"]
    return table.get(category or "unknown", table["unknown"])


def forced_save_freq(engine: str) -> int:
    return int(load_toml("downshift.toml")["checkpoint"]["save_freq"][engine])


def ladder(phase: str) -> list[Rung]:
    data = load_toml("downshift.toml")["ladder"].get(phase, [])
    rungs = []
    for r in data:
        rungs.append(Rung(
            phase=phase, keys=tuple(r["keys"]), action=r["action"], engines=tuple(r["engines"]),
            reason=r["reason"], source=r["source"], min=r.get("min"), max=r.get("max"),
            by=r.get("by"), min_sum=tuple(r.get("min_sum", ())), requires=r.get("requires")))
    return rungs


def next_downshift(phase: str | None, config: Mapping[str, Any], engine: str,
                   supported: Callable[[str], bool] | None = None,
                   fits: Callable[[Mapping[str, Any]], bool | None] | None = None,
                   max_rungs: int = 4) -> Downshift:
    """The change for the next attempt after an out-of-memory failure in `phase`.

    `config` holds the effective values (defaults + overrides) by dotted key. `supported(key)` says
    whether the engine knows a knob. `fits(config)` is the memory estimate: True / False, or None
    when it cannot tell. Rungs are taken in order; while the estimate says the result still cannot
    fit, the next rung is added on top (at most `max_rungs`), so one retry is not spent on a step
    that is known to fail. If no combination is estimated to fit, only the first rung is taken:
    the estimate is a model, the failure was real.
    """
    shift = Downshift(phase=phase or "update")
    frozen = set(policy()["frozen"])
    current = dict(config)
    first: Downshift | None = None
    taken = 0
    for rung in _applicable(shift.phase, engine, supported):
        while taken < max_rungs:
            proposal = rung.propose(current)
            if not proposal:
                break
            touched = frozen & set(proposal)
            if touched:  # data error in the ladder: never move the algorithm
                raise ValueError(f"ladder rung for {phase} touches frozen key {sorted(touched)[0]}")
            for k, (old, new) in proposal.items():
                shift.changes[k] = (shift.changes.get(k, (old, None))[0], new)
                current[k] = new
            shift.reasons.append(f"{rung.keys[0]}: {rung.reason}")
            taken += 1
            if first is None:
                first = Downshift(shift.phase, dict(shift.changes), list(shift.reasons))
            verdict = fits(current) if fits else None
            if verdict is None or verdict:
                return shift
            shift.skipped.append(f"{rung.keys[0]}={_fmt(current[rung.keys[0]])} (estimated not to fit)")
            if rung.action != "halve":
                break
    if first is not None and fits is not None:
        first.skipped = [f"no combination is estimated to fit; trying {', '.join(first.changes)} anyway"]
        return first
    return shift


def _applicable(phase: str, engine: str, supported) -> list[Rung]:
    return [r for r in ladder(phase)
            if engine in r.engines and (supported is None or all(supported(k) for k in r.keys[:1]))]


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
