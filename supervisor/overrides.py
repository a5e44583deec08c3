"""The job's overrides (verl's `key=value` in Hydra syntax): read, edited in place, compared.

The supervisor edits the user's own list, so the last word on a key is ours and everything else
stays exactly as the user wrote it.
"""
from __future__ import annotations

import re
from typing import Any

from launch.script import Launch, parse_launch


def hydra_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    return text if re.fullmatch(r"[\w./:@+\-]+", text) else "'" + text.replace("'", "\\'") + "'"


def parse_overrides(texts: list[str]) -> Launch:
    """The overrides read with Hydra's own grammar (through the launch reader)."""
    return parse_launch(["python", "-m", "_", *texts])


def set_override(texts: list[str], key: str, value: Any) -> list[str]:
    """`texts` with `key` set to `value`: an existing entry is rewritten (its +/++ kept)."""
    parsed = parse_overrides(texts).overrides
    out, done = [], False
    for text in texts:
        match = next((o for o in parsed if o.text == text), None)
        if match is not None and match.key == key and match.op != "delete":
            if not done:
                out.append(f"{match.prefix}{key}={hydra_value(value)}")
                done = True
            continue
        out.append(text)
    if not done:
        out.append(f"{key}={hydra_value(value)}")
    return out


def override_delta(before: list[str], after: list[str]) -> list[str]:
    """What to append to the original launch to get `after`: new or changed entries only.
    A key the original set gets a plain `key=value` (a second `+key` would be refused)."""
    old = parse_overrides(before)
    old_values = old.as_dict()
    delta = []
    for ov in parse_overrides(after).overrides:
        if ov.op == "delete" or (ov.key in old_values and old_values[ov.key] == ov.value):
            continue
        prefix = "" if ov.key in old_values else ov.prefix
        delta.append(f"{prefix}{ov.key}={hydra_value(ov.value)}")
    return delta
