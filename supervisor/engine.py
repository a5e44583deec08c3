"""What the supervisor runs: an engine turns an override list into a command and a configuration.

`ReferenceEngine` runs this project's trainer; `VerlEngine` (supervisor/verl_engine.py) runs verl's
`main_ppo`, optionally from a launch script.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from launch.script import Launch, parse_launch
from trainer.config import KEYS
from supervisor.overrides import parse_overrides


class Engine:
    name = "engine"
    module = ""
    # Check categories that do not apply to this engine (doctor check models verl's config).
    preflight_skip: frozenset[str] = frozenset()

    def __init__(self, overrides: list[str], cwd: Path | None = None, python: str | None = None,
                 env: dict[str, str] | None = None):
        self.base_overrides = list(overrides)
        self.cwd = Path(cwd or os.getcwd()).resolve()
        self.python = python or sys.executable
        self.env = dict(os.environ if env is None else env)

    def command(self, overrides: list[str]) -> list[str]:
        return [self.python, "-m", self.module, *overrides]

    def defaults(self) -> dict[str, Any]:
        """Effective default values by dotted key (what a key means when not overridden)."""
        return {}

    def supports(self, key: str) -> bool:
        return True

    def config(self, overrides: list[str]) -> dict[str, Any]:
        """The effective configuration of a launch with `overrides`, by dotted key."""
        cfg = dict(self.defaults())
        cfg.update(parse_overrides(overrides).as_dict())
        return cfg

    def spec(self) -> dict[str, Any]:
        return {"engine": self.name, "overrides": self.base_overrides, "cwd": str(self.cwd),
                "python": self.python}

    def preflight_launch(self, overrides: list[str]) -> Launch:
        return parse_launch(self.command(overrides), cwd=self.cwd, environ=self.env)


class ReferenceEngine(Engine):
    """`python -m trainer.main_grpo` - the reference trainer (runs on CPU, CUDA or NPU)."""

    name = "reference"
    module = "trainer.main_grpo"
    # verl's config schema and memory model are not this trainer's; it validates its own keys.
    preflight_skip = frozenset({"config", "memory"})

    def defaults(self) -> dict[str, Any]:
        return {key: spec.default for key, spec in KEYS.items()}

    def supports(self, key: str) -> bool:
        """A knob the reference trainer acts on (verl's engine-only keys are accepted, inert)."""
        spec = KEYS.get(key)
        return spec is not None and spec.effect
