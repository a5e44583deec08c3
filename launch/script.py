"""Read what the user would run (`bash run_grpo.sh ...` or `python -m verl.trainer.main_ppo k=v ...`)
without running it: the exported environment, a `cd`, the interpreter, the entry and the overrides.

Overrides are parsed with Hydra's own override grammar, so `+k=v`, `~k`, `k=[a,b]` and quoting mean
exactly what they mean to verl.
"""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class LaunchError(Exception):
    """The launch cannot be read: the CLI prints it as one line and exits 2."""


@dataclass
class Override:
    key: str
    value: Any
    op: str  # "set" | "add" (+k) | "force_add" (++k) | "delete" (~k)
    text: str

    @property
    def prefix(self) -> str:
        return {"add": "+", "force_add": "++", "delete": "~"}.get(self.op, "")


@dataclass
class Launch:
    argv: list[str]
    script: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # exported by the script
    cwd: Path | None = None  # a `cd` in the script, resolved
    python: str | None = None
    module: str | None = None
    entry: str | None = None  # a python file, when not -m
    raw_overrides: list[str] = field(default_factory=list)
    overrides: list[Override] = field(default_factory=list)
    script_lines: dict[str, int] = field(default_factory=dict)  # override text -> script line

    def get(self, key: str, default: Any = None) -> Any:
        """The value the launch gives `key` (last one wins), else `default`."""
        for ov in reversed(self.overrides):
            if ov.key == key and ov.op != "delete":
                return ov.value
        return default

    def has(self, key: str) -> bool:
        return any(ov.key == key and ov.op != "delete" for ov in self.overrides)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for ov in self.overrides:
            if ov.op == "delete":
                out.pop(ov.key, None)
            else:
                out[ov.key] = ov.value
        return out

    @property
    def nnodes(self) -> int:
        try:
            return int(self.get("trainer.nnodes", 1))
        except (TypeError, ValueError):
            return 1

    @property
    def is_verl(self) -> bool:
        return bool(self.module and self.module.startswith("verl"))


_PY = re.compile(r"(^|/)python(3(\.\d+)?)?$")
_SHELLS = {"bash", "sh", "zsh", "dash"}
_VAR = re.compile(r"\$(?:\{(\w+)(?::?-([^}]*))?\}|(\w+))")


def parse_launch(argv: list[str], cwd: Path | None = None, environ: dict[str, str] | None = None) -> Launch:
    if not argv:
        raise LaunchError("empty launch command")
    cwd = Path(cwd or os.getcwd())
    environ = dict(os.environ if environ is None else environ)
    head = os.path.basename(argv[0])
    if head in _SHELLS or argv[0].endswith(".sh"):
        script_args = argv[1:] if head in _SHELLS else argv
        while script_args and script_args[0].startswith("-") and script_args[0] != "-c":
            script_args = script_args[1:]  # bash -x run.sh
        if not script_args:
            raise LaunchError(f"no script given to {head}")
        path = Path(script_args[0])
        path = path if path.is_absolute() else cwd / path
        return _parse_script(argv, path, script_args[1:], cwd, environ)
    launch = Launch(argv=list(argv))
    _parse_python(launch, argv, environ)
    if launch.python is None:
        raise LaunchError(f"not a python or shell launch: {' '.join(argv[:3])}")
    _parse_overrides(launch)
    return launch


def _logical_lines(text: str):
    """Join backslash continuations; yield (first line number, text) without comments."""
    buf, start = "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = n
        stripped = line.rstrip()
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            buf += stripped[:-1] + " "
            continue
        buf += line
        yield start, buf
        buf = ""
    if buf:
        yield start, buf


def _expand(word: str, variables: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(3)
        if name in variables:
            return variables[name]
        return m.group(2) or ""

    return _VAR.sub(sub, word)


def _split(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError as exc:
        raise LaunchError(f"cannot read shell line: {exc}: {line[:80]}") from None


def _parse_script(argv, path: Path, args: list[str], cwd: Path, environ) -> Launch:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise LaunchError(f"cannot read launch script {path}: {exc.strerror}") from None
    launch = Launch(argv=list(argv), script=path)
    variables = dict(environ)
    here = cwd
    for lineno, line in _logical_lines(text):
        # `$@` / `$*` are the script's own arguments: keep them as separate words.
        line = re.sub(r'"?\$[@*]"?', " __DOCTOR_ARGS__ ", line)
        words = _split(line)
        for cmd in _commands(words):
            cmd = [w for a in cmd for w in (args if a == "__DOCTOR_ARGS__" else [_expand(a, variables)])]
            if not cmd:
                continue
            if cmd[0] == "export" or (re.match(r"^\w+=", cmd[0]) and len(cmd) == 1):
                for assign in cmd[1:] if cmd[0] == "export" else cmd:
                    if "=" in assign:
                        k, v = assign.split("=", 1)
                        variables[k] = v
                        launch.env[k] = v
                continue
            if cmd[0] == "cd" and len(cmd) > 1:
                here = (here / os.path.expanduser(cmd[1])).resolve()
                launch.cwd = here
                continue
            while cmd and re.match(r"^\w+=", cmd[0]):  # VAR=x python ...
                k, v = cmd.pop(0).split("=", 1)
                launch.env[k] = v
            if cmd and _PY.search(os.path.basename(cmd[0])) and launch.python is None:
                _parse_python(launch, cmd, variables)
                launch.script_lines.update({o: lineno for o in launch.raw_overrides})
    if launch.python is None:
        raise LaunchError(f"no python command found in {path}")
    _parse_overrides(launch)
    return launch


def _commands(words: list[str]):
    """Split a word list at ; && || | into simple commands."""
    cmd: list[str] = []
    for w in words:
        if w in (";", "&&", "||", "|", "&"):
            yield cmd
            cmd = []
        else:
            cmd.append(w)
    yield cmd


def _parse_python(launch: Launch, cmd: list[str], variables) -> None:
    if not _PY.search(os.path.basename(cmd[0])):
        return
    launch.python = cmd[0]
    rest = cmd[1:]
    while rest:
        a = rest.pop(0)
        if a == "-m" and rest:
            launch.module = rest.pop(0)
            break
        if a in ("-u", "-B", "-O", "-s", "-E", "-I"):
            continue
        if a in ("-X", "-W") and rest:
            rest.pop(0)
            continue
        if not a.startswith("-"):
            launch.entry = a
            break
    launch.raw_overrides = [a for a in rest if a]


def _parse_overrides(launch: Launch) -> None:
    """Parse overrides with Hydra's grammar; keep hydra's own options (--config-name ...) aside."""
    texts = [t for t in launch.raw_overrides if not t.startswith("-")]
    if not texts:
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    ops = {OverrideType.CHANGE: "set", OverrideType.ADD: "add",
           OverrideType.FORCE_ADD: "force_add", OverrideType.DEL: "delete"}
    parser = OverridesParser.create()
    for text in texts:
        try:
            (ov,) = parser.parse_overrides([text])
        except HydraException as exc:
            msg = str(exc).splitlines()[0]
            raise LaunchError(f"cannot parse override {text!r}: {msg}") from None
        value = None if ov.type == OverrideType.DEL and ov.value() is None else _plain(ov.value())
        launch.overrides.append(Override(ov.key_or_group, value, ops[ov.type], text))


def _plain(v: Any) -> Any:
    """Hydra values (sweeps aside) as plain python values."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)
