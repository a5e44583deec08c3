"""What every check sees: the launch, the target interpreter, the directory, the environment,
and the facts gathered about the node (lazily, once, shared by all checks).

`scope` says what a run judges: "all" (this machine, as a node of the job, and the launch), "node"
(this machine only) or "launch" (the launch alone, from a machine that is not part of the cluster,
as CI pre-flight does: no facts of this machine are gathered, and the cluster's own figures, such
as `--cpus-per-node`, stand in for this machine's)."""
from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launch.script import Launch


@dataclass
class CheckContext:
    cwd: Path
    python: str
    env: dict[str, str]  # the environment training will see: ours, plus the script's exports
    launch: Launch | None = None
    nodes: int | None = None  # --nodes; else trainer.nnodes from the launch
    deep: bool = False
    timeout: float = 20.0
    options: dict[str, Any] = field(default_factory=dict)  # per-command extras (device memory, ...)
    facts: dict[str, Any] | None = None  # given for a remote node; else gathered on first use
    node: str | None = None
    scope: str = "all"  # "all" | "node" | "launch": see the module docstring
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def local(cls, cwd: str | os.PathLike | None = None, python: str | None = None,
              launch: Launch | None = None, **kw) -> "CheckContext":
        env = dict(os.environ)
        if launch is not None:
            env.update(launch.env)
            from matching.redact import remember_secrets

            remember_secrets(launch.env)  # a script's `export HF_TOKEN=...` stays out of all output
        base = Path(cwd or os.getcwd()).resolve()
        if launch is not None and launch.cwd is not None:
            base = launch.cwd
        python = python or (launch.python if launch and launch.python else None) or "python3"
        resolved = shutil.which(python, path=env.get("PATH")) or python
        if kw.get("scope") == "launch":
            kw["facts"] = {}  # judged from elsewhere: nothing of this machine may count
        return cls(cwd=base, python=resolved, env=env, launch=launch, **kw)

    @property
    def node_count(self) -> int:
        """The nodes the job spans: --nodes, else the launch's trainer.nnodes, else 1."""
        return self.nodes if self.nodes is not None else (self.launch.nnodes if self.launch else 1)

    @property
    def multi_node(self) -> bool:
        return self.node_count > 1

    @property
    def judges_this_machine(self) -> bool:
        return self.scope != "launch"

    def ray_cpus(self) -> tuple[int | None, str]:
        """(the CPUs Ray will have for the job, where that figure comes from): --cpus-per-node times
        the nodes when given; else this machine's count when it is a node of the job; else unknown."""
        per_node = self.options.get("cpus_per_node")
        if per_node:
            n = max(int(self.node_count), 1)
            return int(per_node) * n, f"--cpus-per-node {per_node} x {n} node{'s' * (n != 1)}"
        if not self.judges_this_machine:
            return None, "not judged: --scope launch without --cpus-per-node"
        return os.cpu_count(), "this machine's CPUs; --cpus-per-node gives the cluster's"

    def prefetch(self, config: bool = False) -> None:
        """Start the slow parts in the background, once each, so the target interpreter works while
        doctor does: the node facts (their probe first) and, with `config`, the launch's config session."""
        jobs = {"facts": self.get_facts}
        if config and self.launch is not None:
            from checks.verl_config import session

            jobs["config"] = lambda: session(self)
        started = self.__dict__.setdefault("_prefetched", set())
        for name, job in jobs.items():
            if name not in started:
                started.add(name)
                threading.Thread(target=_quietly, args=(job,), daemon=True).start()

    def get_facts(self) -> dict[str, Any]:
        """Everything known about the node, gathered once (the target-interpreter probe included)."""
        with self._lock:
            if self.facts is None:
                from probes.facts import gather_facts

                self.facts = gather_facts(self)
            return self.facts


def _quietly(job) -> None:
    try:
        job()
    except Exception:  # met again, and reported, by the first check that needs it
        pass
