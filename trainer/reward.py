"""Rewards through verl's scorer signature:
`compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float | dict`.

Which scorer runs, in verl 0.9's order:
1. `reward.custom_reward_function.path/name` (the legacy top-level `custom_reward_function.*` is
   honoured too, with a notice, because verl 0.9 silently ignores it);
2. the embedded task's data source, scored by `digits_score`;
3. verl's own registry (`verl.utils.reward_score.default_compute_score`, e.g. openai/gsm8k) when
   verl is installed.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from typing import Callable

from trainer.tiny import DATA_SOURCE as DIGITS_SOURCE

Scorer = Callable[..., "float | dict"]


class RewardError(Exception):
    """The reward function cannot be loaded: one clear line for the user."""


def digits_score(data_source, solution_str: str, ground_truth: str, extra_info=None, **kwargs) -> float:
    """The embedded task: the share of non-space characters that are digits greater than the threshold.

    An answer of "9" (for a threshold below 9) scores 1.0; an untrained policy scores a little."""
    threshold = int(ground_truth)
    chars = [c for c in solution_str if not c.isspace()]
    if not chars:
        return 0.0
    return sum(1 for c in chars if c in "0123456789" and int(c) > threshold) / len(chars)


def _load_file(path: str, name: str) -> Scorer:
    if path.startswith("pkg://"):
        module = importlib.import_module(path[len("pkg://"):])
    else:
        path = path[len("file://"):] if path.startswith("file://") else path
        path = os.path.abspath(os.path.expanduser(path))
        if not os.path.isfile(path):
            raise RewardError(f"reward function file not found: {path}")
        spec = importlib.util.spec_from_file_location("custom_reward_module", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["custom_reward_module"] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's file: report its error in one line
            raise RewardError(f"error while importing reward function file {path}: "
                              f"{type(exc).__name__}: {exc}") from exc
    fn = getattr(module, name, None)
    if fn is None:
        raise RewardError(f"reward function {name!r} not found in {path}")
    return fn


def _verl_registry() -> Scorer | None:
    try:
        from verl.utils.reward_score import default_compute_score
    except Exception:  # verl absent or broken: only custom and embedded scorers are available
        return None
    return default_compute_score


class RewardFunction:
    """Calls the configured scorer for each response; returns (score, accuracy, extra) per item."""

    def __init__(self, path: str | None = None, name: str = "compute_score", reward_kwargs: dict | None = None):
        self.custom = _load_file(path, name or "compute_score") if path else None
        self.kwargs = dict(reward_kwargs or {})
        self._registry: Scorer | None = None

    def scorer_for(self, data_source: str) -> Scorer:
        if self.custom is not None:
            return self.custom
        if data_source == DIGITS_SOURCE:
            return digits_score
        if self._registry is None:
            self._registry = _verl_registry()
        if self._registry is None:
            raise RewardError(f"no reward function for data_source={data_source!r}: set "
                              "reward.custom_reward_function.path, or install verl for its built-in scorers")
        return self._registry

    def __call__(self, data_source: str, solution_str: str, ground_truth, extra_info=None) -> tuple[float, float]:
        fn = self.scorer_for(data_source)
        result = fn(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                    extra_info=extra_info, **self.kwargs)
        if inspect.isawaitable(result):
            import asyncio

            result = asyncio.run(result)
        if isinstance(result, dict):
            score = float(result["score"])
            acc = float(result.get("acc", score >= 1.0))
        else:
            score = float(result)
            acc = float(score >= 1.0)
        return score, acc


def from_config(cfg: dict) -> RewardFunction:
    """The scorer the flat trainer config asks for (new key first, then the legacy top-level one)."""
    new_path = cfg["reward.custom_reward_function.path"]
    path = new_path or cfg["custom_reward_function.path"]
    name = cfg["reward.custom_reward_function.name"] if new_path else cfg["custom_reward_function.name"]
    return RewardFunction(path, name, cfg["reward.custom_reward_function.reward_kwargs"])
