"""Block prefilters: where in a block of log bytes might any catalog pattern match?

`candidates(view)` returns two sorted lists of byte offsets: where a pattern of the `cheap` set
given at construction matched, and where any other pattern (or one the engine cannot name) matched.
The caller re-checks each such line exactly with RE2. A prefilter may over-report, never
under-report. Two engines, same contract:

- Hyperscan (Vectorscan) when installed: all patterns in one multi-pattern automaton, compiled
  with HS_FLAG_PREFILTER (a superset of each pattern, still linear time). Compiling a catalog takes
  seconds, so the database is cached, keyed by the patterns, under ~/.cache/verl-doctor.
- Otherwise RE2: the alternation of all patterns, searched block by block (slower, still linear).

matching/ahead.py runs either of them in a forked helper, ahead of the reader of a large file.
"""
from __future__ import annotations

import os
import re

import re2

from matching import cache

# A trailing unbounded repeat makes an automaton report every byte it extends over; the prefilter
# drops it (a superset) and the exact RE2 check on the line restores it.
_TRAILING_REPEAT = re.compile(r"(?:\.|\\[wdsSWD]|\[(?:\\.|[^\]\\])*\])(?:[*+]|\{\d*,\d*\})\??$")


def _prefilter_form(pattern: str) -> str:
    while True:
        m = _TRAILING_REPEAT.search(pattern)
        if not m or m.start() == 0 or pattern[m.start() - 1] == "\\":
            return pattern
        token = m.group(0)
        # `x+` needs one x: keep the token once; `x*`, `x{0,n}` need none.
        keep = token.rstrip("?").rstrip("*+")
        if token.rstrip("?").endswith("*") or re.search(r"\{0?,", token):
            keep = ""
        else:
            keep = re.sub(r"\{\d*,\d*\}$", "", keep)
        pattern = pattern[: m.start()] + keep
        if keep:
            return pattern


def _top_level_alternation(pattern: str) -> bool:
    """Whether `|` splits the pattern itself (not only a group or a class inside it)."""
    depth, i, n = 0, 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\":
            i += 1
        elif c == "[":  # a class: up to its closing bracket (one right after [ or [^ is a member)
            i += 2 if pattern.startswith("[^", i) else 1
            i += pattern[i:i + 1] == "]"
            while i < n and pattern[i] != "]":
                i += 2 if pattern[i] == "\\" else 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        i += 1
    return False


# A pattern that matches one literal string: letters, digits, spaces, plain punctuation and escaped
# punctuation (no class, group, repeat, anchor, dot, and no escape that a longer pattern could extend,
# such as an octal \0 or \Q).
_PLAIN = re.compile(r"(?:[A-Za-z0-9 _:;,'\"=<>/!%&~`@#-]|\\[^A-Za-z0-9])+")


def _implied(longer: str, prefix: str) -> bool:
    """Whether every match of `longer` holds a match of `prefix`: `prefix` is a plain literal and
    `longer` is it followed by more (no quantifier on its last character), with no alternation."""
    return (len(longer) > len(prefix) and longer.startswith(prefix) and _PLAIN.fullmatch(prefix) is not None
            and longer[len(prefix)] not in "*+?{" and not _top_level_alternation(longer))


def _line_markers(exprs: list[str], cheap: list[bool]) -> list[int]:
    """The indexes to scan for: a cheap pattern's hit only marks its line as error-like, so one
    whose every match holds another cheap one's (Python's "Traceback (most recent call last):"
    and its "Traceback (most recent call last)") adds only callbacks: dropped."""
    marks = [i for i, c in enumerate(cheap) if c]
    return [i for i, e in enumerate(exprs)
            if not cheap[i] or not any(j != i and _implied(e, exprs[j]) for j in marks)]


# Hits one block may report before we stop Hyperscan and walk that block line by line with RE2
# instead: hostile input ("ERROR ERROR ..." for megabytes) must not grow memory with the block.
MAX_HITS_PER_BLOCK = 100_000


class HyperscanPrefilter:
    def __init__(self, patterns: list[str], cheap: frozenset[int] = frozenset()):
        import hyperscan

        self._hs = hyperscan
        self._patterns = patterns
        self._cheap = [i in cheap for i in range(len(patterns))]  # a list index: the cheapest test
        self._re2: Re2Prefilter | None = None
        forms = [_prefilter_form(p) for p in patterns]
        ids = _line_markers(forms, self._cheap)
        exprs = [forms[i].encode() for i in ids]
        key = cache.cache_key(b"\0".join(exprs) + repr(ids).encode() + hyperscan.__version__.encode())
        self.db = self._load(key) or self._compile(exprs, ids, key)
        self._scratch = hyperscan.Scratch(self.db)

    def _load(self, key: str):
        data = cache.load(f"hs-{key}.db")
        try:
            return self._hs.loadb(data, self._hs.HS_MODE_BLOCK) if data else None
        except Exception:  # unreadable or from another build: compile afresh
            return None

    def _compile(self, exprs: list[bytes], ids: list[int], key: str):
        hs = self._hs
        db = hs.Database(mode=hs.HS_MODE_BLOCK)
        flags = [hs.HS_FLAG_PREFILTER | hs.HS_FLAG_ALLOWEMPTY] * len(exprs)
        db.compile(expressions=exprs, ids=ids, elements=len(exprs), flags=flags)
        cache.store(f"hs-{key}.db", hs.dumpb(db), "hs-*.db", keep=32)
        return db

    def candidates(self, view: memoryview) -> tuple[list[int], list[int]]:
        cheap, other = [], []
        is_cheap, add_cheap, add_other = self._cheap, cheap.append, other.append
        left = [MAX_HITS_PER_BLOCK]

        def on_match(i, _from, to, _flags, _ctx):
            # an end offset points just past the match: step back into its line
            (add_cheap if is_cheap[i] else add_other)(to - 1)
            left[0] -= 1
            return not left[0]  # true stops the scan

        try:
            self.db.scan(view, match_event_handler=on_match, scratch=self._scratch)
        except self._hs.ScanTerminated:
            if self._re2 is None:
                self._re2 = Re2Prefilter(self._patterns)
            return self._re2.candidates(view)  # at most one candidate per line
        cheap.sort()
        other.sort()
        return cheap, other


class Re2Prefilter:
    def __init__(self, patterns: list[str]):
        opts = re2.Options()
        opts.max_mem = 64 << 20
        self.rx = re2.compile("|".join(f"(?:{p})" for p in patterns).encode(), opts)

    def candidates(self, view: memoryview) -> tuple[list[int], list[int]]:
        data = bytes(view)
        out, pos, end = [], 0, len(data)
        while pos < end:
            m = self.rx.search(data, pos, end)
            if m is None:
                break
            # the line the match ends on, as Hyperscan reports it: a pattern led by \s or a class that
            # holds one ("(?:^|[\s:])Exception: ") can start on the previous line's newline
            at = max(m.start(), m.end() - 1)
            out.append(at)  # which pattern is left to the exact check: never "cheap"
            nl = data.find(b"\n", at)
            pos = end if nl < 0 else nl + 1
        return [], out


def make_prefilter(patterns: list[str], cheap: frozenset[int] = frozenset()):
    """`cheap`: the indexes whose hits `candidates` reports apart (see the module's docstring)."""
    if os.environ.get("DOCTOR_PREFILTER") != "re2":
        try:
            return HyperscanPrefilter(patterns, cheap)
        except Exception:  # not installed, or a pattern it cannot take: RE2 is slower, never wrong
            pass
    return Re2Prefilter(patterns)
