"""The verl engine: `python -m verl.trainer.main_ppo` with the user's overrides and environment.

From a launch script (`--script run_grpo.sh`), the script is read, not run: its exports become the
child's environment on top of ours, a `cd` becomes its working directory, and its python command
and overrides become the command (the script's `$@` receives the extra command-line overrides).
The supervisor then edits that override list (downshift, save_freq, resume) and runs the command
directly, so every relaunch is the script's job with exactly the recorded changes.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from launch.script import LaunchError, parse_launch
from supervisor.engine import Engine

VERL_ENTRY = "verl.trainer.main_ppo"


class VerlEngine(Engine):
    name = "verl"

    def __init__(self, overrides: list[str], cwd: Path | None = None, python: str | None = None,
                 env: dict[str, str] | None = None, module: str = VERL_ENTRY,
                 script: Path | None = None, script_args: list[str] | None = None):
        super().__init__(overrides, cwd=cwd, python=python, env=env)
        self.module = module
        self.script = script
        self.script_args = list(script_args or [])
        self._composed: dict[tuple[str, ...], dict[str, Any]] = {}

    @classmethod
    def from_script(cls, script: str | os.PathLike, args: list[str] | None = None,
                    cwd: str | os.PathLike | None = None,
                    environ: dict[str, str] | None = None) -> "VerlEngine":
        base = Path(cwd or os.getcwd()).resolve()
        environ = dict(os.environ if environ is None else environ)
        path = Path(script)
        path = (path if path.is_absolute() else base / path).resolve()
        launch = parse_launch(["bash", str(path), *(args or [])], cwd=base, environ=environ)
        if not launch.module:
            raise LaunchError(f"{path} does not run `python -m {VERL_ENTRY}`")
        env = {**environ, **launch.env}
        python = shutil.which(launch.python, path=env.get("PATH")) or launch.python
        return cls(launch.raw_overrides, cwd=launch.cwd or base, python=python, env=env,
                   module=launch.module, script=path, script_args=list(args or []))

    @classmethod
    def from_overrides(cls, overrides: list[str], cwd: str | os.PathLike | None = None,
                       python: str | None = None, environ: dict[str, str] | None = None) -> "VerlEngine":
        return cls(overrides, cwd=Path(cwd) if cwd else None, python=python, env=environ)

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> "VerlEngine":
        if spec.get("script"):
            return cls.from_script(spec["script"], spec.get("script_args"), cwd=spec.get("launch_cwd"))
        return cls.from_overrides(spec.get("overrides", []), cwd=spec.get("cwd"), python=spec.get("python"))

    def spec(self) -> dict[str, Any]:
        out = super().spec()
        out.update(module=self.module, script=str(self.script) if self.script else None,
                   script_args=self.script_args, launch_cwd=os.getcwd())
        return out

    def config(self, overrides: list[str]) -> dict[str, Any]:
        """verl's composed config with `overrides` (interpolations resolved: a rollout key that
        follows an actor key follows it here too); without the config engine, the overrides."""
        key = tuple(overrides)
        if key not in self._composed:
            self._composed[key] = self._compose(overrides)
        return dict(self._composed[key])

    def _compose(self, overrides: list[str]) -> dict[str, Any]:
        try:
            from checks.verl_config import effective_config

            launch = parse_launch([self.python, "-m", self.module, *overrides], cwd=self.cwd,
                                  environ=self.env)
            return dict(effective_config(launch) or {})
        except Exception:  # a missing value only makes a rung skip; never a crash here
            return super().config(overrides)
