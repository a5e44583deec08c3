"""The failure catalog: every `[[rule]]` in `knowledge/rules/*.toml`, loaded and validated.

A rule is data (see `knowledge/rules/README.md`). Loading fails with one clear `CatalogError` line
naming the file and the rule for anything the matcher could not trust: an unknown field, a regex
RE2 rejects (RE2 keeps every pattern linear-time), a duplicate id, an unknown category.
"""
from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import re2

import knowledge.vocabulary
from knowledge.vocabulary import CATEGORIES, PHASES, PLATFORMS
from matching import cache

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

RULES_DIR = Path(__file__).resolve().parents[1] / "knowledge" / "rules"

ID_SHAPE = re2.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

_REQUIRED = ("id", "category", "title", "platforms", "patterns", "cause", "fix", "references")
_OPTIONAL = ("near", "requires", "phase", "specificity", "consequence", "yields_to")


class CatalogError(ValueError):
    """A rule file the matcher cannot use; the message names the file and rule."""


@dataclass(frozen=True)
class Near:
    pattern: str
    within: int


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    title: str
    platforms: tuple[str, ...]
    patterns: tuple[str, ...]
    cause: str
    fix: str
    references: tuple[str, ...]
    near: Near | None = None
    requires: str | None = None
    phase: str | None = None
    specificity: int = 1
    consequence: bool = False
    # generic classes (knowledge/generic.toml) that name this rule's line more precisely from what the rule cannot
    # see (the frames): when one of them reads it so, its finding stands instead
    yields_to: tuple[str, ...] = ()
    source: str = field(default="", compare=False)  # the file it came from

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("id", "category", "title", "cause", "fix", "phase",
                                             "specificity", "consequence")}
        out.update(platforms=list(self.platforms), patterns=list(self.patterns),
                   references=list(self.references), requires=self.requires,
                   near={"pattern": self.near.pattern, "within": self.near.within} if self.near else None,
                   yields_to=list(self.yields_to))
        return out


def check_pattern(pattern: str) -> None:
    """Raise ValueError unless `pattern` is a regex the streaming matcher can run.

    RE2 compiles only linear-time regexes (no backreferences, no lookaround). Anchors: a leading
    `^` (start of the message, after any Ray prefix) and a trailing `$` only, because the
    prefilter scans whole blocks and drops exactly those two.
    """
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("a pattern must be a non-empty string")
    try:
        re2.compile(pattern)
    except re2.error as exc:
        raise ValueError(f"pattern {pattern!r} is not valid RE2: {exc}") from None
    inner = pattern[1:] if pattern.startswith("^") else pattern
    inner = inner.replace("\\\\", "").replace("\\^", "").replace("[^", "[")
    if inner.endswith("$") and not inner.endswith("\\$"):
        inner = inner[:-1]
    if "^" in inner or "$" in inner.replace("\\$", ""):
        raise ValueError(f"pattern {pattern!r}: only a leading ^ and a trailing $ are allowed")
    if re2.compile(pattern).search(""):
        raise ValueError(f"pattern {pattern!r} matches the empty line")


def _rule_from_table(table: dict, source: str) -> Rule:
    rid = table.get("id")
    where = f"{source}: rule {rid!r}" if rid else f"{source}: a rule without id"
    unknown = sorted(set(table) - set(_REQUIRED) - set(_OPTIONAL))
    if unknown:
        raise CatalogError(f"{where}: unknown field {unknown[0]!r}")
    missing = [k for k in _REQUIRED if k not in table]
    if missing:
        raise CatalogError(f"{where}: missing field {missing[0]!r}")
    if not isinstance(rid, str) or not ID_SHAPE.match(rid):
        raise CatalogError(f"{where}: id must be kebab-case (a-z, 0-9, -)")
    for key in ("title", "cause", "fix"):
        if not isinstance(table[key], str) or not table[key].strip():
            raise CatalogError(f"{where}: {key} must be a non-empty string")
    if table["category"] not in CATEGORIES:
        raise CatalogError(f"{where}: unknown category {table['category']!r}; "
                           f"choose from {', '.join(CATEGORIES)}")
    platforms = table["platforms"]
    if not isinstance(platforms, list) or not platforms or set(platforms) - set(PLATFORMS):
        raise CatalogError(f"{where}: platforms must be a non-empty list of {', '.join(PLATFORMS)}")
    patterns = table["patterns"]
    if not isinstance(patterns, list) or not patterns:
        raise CatalogError(f"{where}: patterns must be a non-empty list of regexes")
    refs = table["references"]
    if not isinstance(refs, list) or not refs or not all(isinstance(r, str) and r for r in refs):
        raise CatalogError(f"{where}: references must be a non-empty list of URLs")
    try:
        for p in patterns:
            check_pattern(p)
        near = None
        if "near" in table:
            n = table["near"]
            if not isinstance(n, dict) or set(n) != {"pattern", "within"}:
                raise ValueError("near must be a table {pattern = '...', within = N}")
            if not isinstance(n["within"], int) or isinstance(n["within"], bool) or n["within"] < 1:
                raise ValueError("near.within must be a positive integer (lines)")
            check_pattern(n["pattern"])
            near = Near(n["pattern"], n["within"])
        if "requires" in table:
            check_pattern(table["requires"])
    except ValueError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    phase = table.get("phase")
    if phase is not None and phase not in PHASES:
        raise CatalogError(f"{where}: unknown phase {phase!r}; choose from {', '.join(PHASES)}")
    spec = table.get("specificity", 1)
    if not isinstance(spec, int) or isinstance(spec, bool) or spec < 0:
        raise CatalogError(f"{where}: specificity must be a non-negative integer")
    consequence = table.get("consequence", False)
    if not isinstance(consequence, bool):
        raise CatalogError(f"{where}: consequence must be true or false")
    yields_to = table.get("yields_to", [])
    if not isinstance(yields_to, list) or not all(isinstance(c, str) and ID_SHAPE.match(c) for c in yields_to):
        raise CatalogError(f"{where}: yields_to must be a list of generic class ids")
    return Rule(id=rid, category=table["category"], title=table["title"].strip(),
                platforms=tuple(platforms), patterns=tuple(patterns), cause=table["cause"].strip(),
                fix=table["fix"].strip(), references=tuple(refs), near=near,
                requires=table.get("requires"), phase=phase, specificity=spec,
                consequence=consequence, yields_to=tuple(yields_to), source=source)


def load_file(path: Path) -> list[Rule]:
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path.name}: not valid TOML: {exc}") from None
    extra = sorted(set(doc) - {"rule"})
    if extra:
        raise CatalogError(f"{path.name}: unknown top-level key {extra[0]!r} (use [[rule]] tables)")
    tables = doc.get("rule", [])
    if not isinstance(tables, list):
        raise CatalogError(f"{path.name}: 'rule' must be an array of tables ([[rule]])")
    return [_rule_from_table(t, path.name) for t in tables]


def load_rules(directory: Path | str | None = None) -> list[Rule]:
    """Every rule of every `*.toml` in `directory` (default: the shipped catalog), ids unique."""
    directory = Path(directory) if directory else RULES_DIR
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in sorted(directory.glob("*.toml")):
        for rule in load_file(path):
            if rule.id in seen:
                raise CatalogError(f"{path.name}: rule {rule.id!r}: duplicate id "
                                   f"(also in {seen[rule.id]})")
            seen[rule.id] = path.name
            rules.append(rule)
    return rules


def saved(name: str, sources: list[Path], load):
    """`load()`, or what it returned in an earlier run whose sources (the TOML files and the code
    that reads them) were the same bytes: parsing and validating them was most of what `doctor
    explain` did before reading a byte of the log. Kept beside the Hyperscan databases (the
    user's own cache), written atomically; a cache that cannot be read or written is ignored.
    Only a load that succeeded is kept, so a broken file still fails with its one line."""
    made_of = [sys.version.encode()] + [p.name.encode() + b"\0" + p.read_bytes() for p in sources]
    key = cache.cache_key(b"\0".join(made_of))
    file = f"{name}-{key}.pickle"
    try:
        return pickle.loads(cache.load(file))
    except Exception:  # absent (None), unreadable or from another build: load afresh
        pass
    value = load()
    cache.store(file, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), f"{name}-*.pickle", keep=8)
    return value


def code_files() -> list[Path]:
    """What else a loaded catalog depends on (the code that checks it, the vocabulary it is
    checked against): a change to any of them must not reuse a saved catalog."""
    vocabulary = Path(knowledge.vocabulary.__file__)
    return [Path(__file__), vocabulary, vocabulary.with_suffix(".toml")]


@lru_cache(maxsize=1)
def catalog() -> tuple[Rule, ...]:
    """The shipped catalog, loaded once per process (and saved between runs, see `saved`)."""
    return saved("catalog", sorted(RULES_DIR.glob("*.toml")) + code_files(), lambda: tuple(load_rules()))


def rule_by_id(rule_id: str) -> Rule | None:
    return next((r for r in catalog() if r.id == rule_id), None)
