"""Keep secrets out of everything doctor prints or writes, and (on request) identities too.

`redact_text` / `redact_mapping` remove secrets: values of secret-looking names (env variables,
config keys, `NAME=value` and `--flag value` inside text), credentials in URLs, bearer tokens,
key-shaped strings, and the literal value of every secret environment variable wherever it shows up
(a token pasted into a log line is still the token). What counts as secret is data:
`knowledge/secrets.toml`.

`Anonymizer` replaces host names, IP addresses, user names and home paths with stable placeholders
(`host-1`, `ip-1`, `user-1`): the same value always gets the same placeholder, so differences
between nodes stay readable.
"""
from __future__ import annotations

import getpass
import ipaddress
import os
import re
import socket
import threading
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping

from knowledge import load_toml

REDACTED = "[redacted]"  # plain in Markdown, JSON and logs alike
LARGE_TEXT = 16 << 10     # from this size on, texts are prefiltered line by line with RE2
MERGE_GAP = 4 << 10       # candidate lines closer than this are redacted as one chunk


@dataclass(frozen=True)
class _Rules:
    words: frozenset[str]
    fragments: tuple[str, ...]
    known: frozenset[str]
    prefixes: tuple[str, ...]
    not_secret: re.Pattern
    common_values: frozenset[str]
    min_literal: int
    values: tuple[tuple[str, re.Pattern, int, re.Pattern | None], ...]  # (id, pattern, group, not_if)
    hints: tuple[str, ...]  # RE2 patterns: a line without any of them needs no redaction


@lru_cache(maxsize=1)
def _rules() -> _Rules:
    data = load_toml("secrets.toml")
    return _Rules(
        words=frozenset(w.lower() for w in data["names"]["words"]),
        fragments=tuple(f.lower() for f in data["names"]["fragments"]),
        known=frozenset(n.upper() for n in data["known"]["names"]),
        prefixes=tuple(p.upper() for p in data["known"]["prefixes"]),
        not_secret=re.compile("|".join(f"(?:{p})" for p in data["not_secret"]["names"])),
        common_values=frozenset(v.lower() for v in data["not_secret_values"]["values"]),
        min_literal=int(data["not_secret_values"]["min_literal_length"]),
        values=tuple((v["id"], re.compile(v["pattern"]), int(v.get("group", 0)),
                      re.compile(v["not_if"]) if v.get("not_if") else None) for v in data["value"]),
        hints=tuple(v.get("hint", v["pattern"]) for v in data["value"]) + _name_hints(data["names"]),
    )


def _name_hints(names: dict) -> tuple[str, ...]:
    """Where a `NAME=value` or `--name value` with a secret-looking name could start."""
    words = "|".join(re.escape(w) for w in sorted(set(names["words"]) | set(names["fragments"])))
    return (rf"(?i)(?:{words})[\w.-]*[\"']?[ \t]*[=:]", rf"(?i)--[\w-]*(?:{words})")


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")


def _words(name: str) -> list[str]:
    return [w.lower() for w in _SEPARATORS.split(_CAMEL.sub("_", name)) if w]


def is_secret_name(name: str) -> bool:
    """True when a variable / key / flag of this name holds a secret (see secrets.toml)."""
    if not isinstance(name, str) or not name:
        return False
    rules = _rules()
    bare = name.lstrip("-+~")
    upper = bare.upper().replace("-", "_")
    if upper in rules.known or upper.startswith(rules.prefixes):
        return True
    lower = bare.lower().replace("-", "_")
    if rules.not_secret.search(lower):
        return False
    if any(w in rules.words for w in _words(bare)):
        return True
    flat = re.sub(r"[^a-z0-9]", "", lower)
    return any(f in flat for f in rules.fragments)


def secret_values(env: Mapping[str, Any]) -> set[str]:
    """The values of the secret variables in `env` that are worth hunting for in free text."""
    rules = _rules()
    out = set()
    for k, v in env.items():
        if isinstance(v, (str, int)) and not isinstance(v, bool) and is_secret_name(str(k)):
            s = str(v).strip()
            if len(s) >= rules.min_literal and s.lower() not in rules.common_values:
                out.add(s)
    return out


# Secret values learnt during this process (a launch script's exports, a remote node's env):
# they stay secret in every later output, whoever renders it.
_REMEMBERED: set[str] = set()
_REMEMBERED_LOCK = threading.Lock()


def remember_secrets(env: Mapping[str, Any]) -> None:
    """Register the secret values of `env` (e.g. a launch script's exports) for every redaction."""
    found = secret_values(env)
    with _REMEMBERED_LOCK:
        _REMEMBERED.update(found)


# NAME=value, NAME: value, "name": "value", export NAME='value'
_ASSIGN = re.compile(
    r"(?P<name>(?<![\w.-])[A-Za-z_][\w.-]*)(?P<close>[\"']?)(?P<sep>[ \t]*[=:][ \t]*)"
    r"(?:(?P<q>[\"'])(?P<qval>[^\"'\n]*)(?P=q)|(?P<val>[^\s\"',;}\])]+))")
# --token value, --api-key value
_FLAG = re.compile(r"(?<![\w-])--(?P<name>[A-Za-z][\w-]*)[ \t]+(?P<val>[^\s-]\S*)")


class Redactor:
    """Redaction with one set of known secret values (the environment's, plus any learnt)."""

    def __init__(self, env: Mapping[str, Any] | None = None, values: Iterable[str] = ()):
        self._values = secret_values(os.environ if env is None else env) | set(values)
        with _REMEMBERED_LOCK:
            self._values |= _REMEMBERED
        self._literal: re.Pattern | None = None
        self._hint_re = None

    def add_values(self, values: Iterable[str]) -> None:
        rules = _rules()
        new = {v for v in values
               if len(v) >= rules.min_literal and v.lower() not in rules.common_values} - self._values
        if new:
            self._values |= new
            self._literal = self._hint_re = None

    def learn(self, obj: Any) -> None:
        """Collect the values held under secret-looking keys anywhere in `obj`."""
        found: list[str] = []

        def walk(o: Any, secret: bool = False) -> None:
            if isinstance(o, Mapping):
                for k, v in o.items():
                    walk(v, secret or is_secret_name(str(k)))
            elif isinstance(o, (list, tuple)):
                for v in o:
                    walk(v, secret)
            elif secret and isinstance(o, (str, int)) and not isinstance(o, bool):
                found.append(str(o).strip())

        walk(obj)
        self.add_values(found)

    def _literal_pattern(self) -> re.Pattern | None:
        if self._literal is None and self._values:
            alts = sorted(self._values, key=len, reverse=True)
            self._literal = re.compile("|".join(re.escape(v) for v in alts))
        return self._literal

    def text(self, text: str) -> str:
        """`text` without secrets. A large text is scanned once by RE2 and only the lines that
        could hold a secret are redacted (the same result, in a fraction of the time)."""
        if not text:
            return text
        if len(text) < LARGE_TEXT:
            return self._text(text)
        try:
            hint = self._hint()
        except Exception:  # a value RE2 cannot take: redact the slow, sure way
            return self._text(text)
        spans: list[list[int]] = []  # candidate lines, neighbours merged into one chunk
        for m in hint.finditer(text):
            if spans and m.start() < spans[-1][1]:
                continue
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            end = len(text) if end < 0 else end
            if spans and start - spans[-1][1] < MERGE_GAP:
                spans[-1][1] = end
            else:
                spans.append([start, end])
        out, done = [], 0
        for start, end in spans:
            out += [text[done:start], self._text(text[start:end])]
            done = end
        out.append(text[done:])
        return "".join(out)

    def literals(self, text: str) -> str:
        """Only the known secret values replaced: a cheap last pass over text built from parts
        that were each redacted already."""
        literal = self._literal_pattern()
        return literal.sub(REDACTED, text) if literal is not None and text else text

    def _hint(self):
        import re2

        if self._hint_re is None:
            parts = list(_rules().hints) + [re.escape(v) for v in sorted(self._values, key=len, reverse=True)]
            options = re2.Options()
            options.max_mem = 64 << 20
            self._hint_re = re2.compile("|".join(f"(?:{p})" for p in parts), options)
        return self._hint_re

    def _text(self, text: str) -> str:
        literal = self._literal_pattern()
        if literal is not None:
            text = literal.sub(REDACTED, text)
        for _id, pattern, group, not_if in _rules().values:
            text = pattern.sub(lambda m, g=group, n=not_if: _replace_group(m, g, n), text)
        text = _ASSIGN.sub(_redact_assignment, text)
        return _FLAG.sub(_redact_flag, text)

    def mapping(self, obj: Any) -> Any:
        """A copy of `obj` (dicts, lists, strings, ...) with secrets removed; structure kept."""
        self.learn(obj)
        return self._walk(obj)

    def _walk(self, obj: Any, secret: bool = False) -> Any:
        """Copy `obj`; under a secret key every string or number is replaced (None, "" and
        booleans stay: "unset" and "on" are diagnoses, not secrets)."""
        if isinstance(obj, Mapping):
            return {(self.text(k) if isinstance(k, str) else k): self._walk(v, secret or is_secret_name(str(k)))
                    for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self._walk(v, secret) for v in obj]
        if secret and obj not in (None, "") and isinstance(obj, (str, int, float)) and not isinstance(obj, bool):
            return REDACTED
        if isinstance(obj, str):
            return self.text(obj)
        return obj


def _redact_assignment(m: re.Match) -> str:
    if not is_secret_name(m.group("name")):
        return m.group(0)
    if m.group("q"):
        return f"{m.group('name')}{m.group('close')}{m.group('sep')}{m.group('q')}{REDACTED}{m.group('q')}"
    if m.group("val").startswith((REDACTED[:-1], "$")):  # already done, or a shell reference
        return m.group(0)
    return f"{m.group('name')}{m.group('close')}{m.group('sep')}{REDACTED}"


def _redact_flag(m: re.Match) -> str:
    if not is_secret_name(m.group("name")) or m.group("val").startswith(REDACTED[:-1]):
        return m.group(0)
    return f"--{m.group('name')} {REDACTED}"


def _replace_group(m: re.Match, group: int, not_if: re.Pattern | None = None) -> str:
    if not_if is not None and not_if.search(m.group(group)):
        return m.group(0)
    if group == 0 or m.group(group) is None:
        return REDACTED
    start, end = m.span(group)
    base = m.start(0)
    whole = m.group(0)
    return whole[: start - base] + REDACTED + whole[end - base:]


def _redactor(env: Mapping[str, Any] | None) -> Redactor:
    if env is not None:
        return Redactor(env)
    with _REMEMBERED_LOCK:
        key = frozenset(secret_values(os.environ) | _REMEMBERED)
    return _cached_redactor(key)


@lru_cache(maxsize=4)
def _cached_redactor(values: frozenset[str]) -> Redactor:
    return Redactor(env={}, values=values)


def redact_text(text: str, env: Mapping[str, Any] | None = None) -> str:
    """`text` without secrets; `env` (default: os.environ and remembered secrets) supplies the
    secret values to hunt for."""
    return _redactor(env).text(text)


def redact_mapping(obj: Any, env: Mapping[str, Any] | None = None) -> Any:
    """A redacted copy of a JSON-like object (recursive); values under secret keys anywhere in
    `obj` are also hunted in its free text."""
    redactor = Redactor(env={}, values=_redactor(env)._values)
    return redactor.mapping(obj)


# ---------------------------------------------------------------------------------------------
# Anonymization: identities, not secrets.

_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w]|\.\d)")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
_HOME = re.compile(r"(?P<root>/home/|/Users/)(?P<user>[A-Za-z0-9._-]+)")


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = re.compile(rf"(?<![\w.-]){_LABEL}(?:\.{_LABEL})+(?![\w-])")


@lru_cache(maxsize=1)
def _anon_rules() -> tuple[frozenset[str], re.Pattern, frozenset[str]]:
    data = load_toml("secrets.toml")["anonymize"]
    return (frozenset(data["private_labels"]), re.compile(data["host_variables"], re.IGNORECASE),
            frozenset(data["system_users"]))


def _private_domains(text: str) -> Iterable[str]:
    private = _anon_rules()[0]
    for m in _DOMAIN.finditer(text):
        labels = m.group(0).lower().split(".")
        if any(label in private for label in labels[1:]):
            yield m.group(0)


class Anonymizer:
    """Stable placeholders for hosts, IP addresses and users within one report."""

    def __init__(self, hosts: Iterable[str] = (), users: Iterable[str] = ()):
        self._map: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._hosts: set[str] = set()
        self._users: set[str] = set()
        self._word_re: re.Pattern | None = None
        for h in hosts:
            self.add_host(h)
        for u in users:
            self.add_user(u)

    @classmethod
    def for_this_machine(cls, env: Mapping[str, str] | None = None) -> "Anonymizer":
        env = os.environ if env is None else env
        hosts = {socket.gethostname(), socket.getfqdn()}
        users = {env.get("USER", ""), env.get("LOGNAME", ""), env.get("SUDO_USER", "")}
        try:
            users.add(getpass.getuser())
        except Exception:  # no passwd entry in some containers
            pass
        home = env.get("HOME", "")
        m = _HOME.match(home)
        if m:
            users.add(m.group("user"))
        _private, host_var, _system = _anon_rules()
        for name, value in env.items():
            if host_var.search(name) and value:
                for item in re.split(r"[,\s]+", value):
                    hosts.add(re.sub(r":\d+$", "", item.split("://")[-1].split("/")[0]))
        return cls(hosts, users)

    def _placeholder(self, kind: str, value: str) -> str:
        key = f"{kind}:{value}"
        if key not in self._map:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            self._map[key] = f"{kind}-{self._counts[kind]}"
        return self._map[key]

    def add_host(self, name: str) -> None:
        name = (name or "").strip()
        if (not name or name in ("localhost", "localhost.localdomain") or _is_ip(name)
                or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*", name)):
            return
        placeholder = self._placeholder("host", name.split(".")[0])
        for variant in {name, name.split(".")[0]}:
            if len(variant) >= 2:
                self._map[f"host:{variant}"] = placeholder
                self._hosts.add(variant)
        self._word_re = None

    def add_user(self, name: str) -> None:
        name = (name or "").strip()
        if len(name) < 2 or name in _anon_rules()[2]:
            return
        self._placeholder("user", name)
        self._users.add(name)
        self._word_re = None

    def host(self, name: str) -> str:
        """The placeholder of a node name (host name or IP address)."""
        if _is_ip(name):
            return self._ip(name)
        self.add_host(name)
        return self._map.get(f"host:{name}", name)

    def _ip(self, text: str) -> str:
        try:
            ip = ipaddress.ip_address(text)
        except ValueError:
            return text
        if ip.is_loopback or ip.is_unspecified or ip.is_multicast or (ip.version == 4 and str(ip).startswith("255.")):
            return text  # 127.0.1.1 is a diagnosis, not an identity
        return self._placeholder("ip", str(ip))

    def _words(self) -> re.Pattern | None:
        if self._word_re is None:
            names = sorted(self._hosts | self._users, key=len, reverse=True)
            if names:
                self._word_re = re.compile(
                    r"(?<![A-Za-z0-9_-])(" + "|".join(re.escape(n) for n in names) + r")(?![A-Za-z0-9_-])")
        return self._word_re

    def text(self, text: str) -> str:
        if not text:
            return text
        for m in _HOME.finditer(text):
            self.add_user(m.group("user"))
        for domain in _private_domains(text):
            self.add_host(domain)
        text = _IPV4.sub(lambda m: self._ip(m.group(0)), text)
        text = _IPV6.sub(lambda m: self._ip(m.group(0)) if m.group(0).count(":") >= 2 else m.group(0), text)
        words = self._words()
        if words is not None:
            text = words.sub(self._word_placeholder, text)
        return text

    def _word_placeholder(self, m: re.Match) -> str:
        word = m.group(1)
        return self._map.get(f"host:{word}") or self._map.get(f"user:{word}") or word

    def mapping(self, obj: Any) -> Any:
        if isinstance(obj, Mapping):
            return {(self.text(k) if isinstance(k, str) else k): self.mapping(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.mapping(v) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    @property
    def placeholders(self) -> dict[str, str]:
        """value -> placeholder (for the user's eyes only: never print this in a report)."""
        return {k.split(":", 1)[1]: v for k, v in self._map.items()}


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False
