"""Run a training job until it finishes: watch, diagnose, decide, relaunch with resume.

One attempt = one child process (the reference trainer or verl's main_ppo). Its output streams to
the console and to `RUN_DIR/attempt-N.log`. On a non-zero exit the log is explained with the
failure catalog (`knowledge.explain`), and the category decides (`knowledge/downshift.toml`):
memory -> the phase's downshift ladder; network/cluster -> wait for the Ray nodes, retry unchanged;
config/data/imports/versions/workdir -> stop; anything else -> one unchanged retry.

Work is never lost: a checkpoint frequency is forced when none is set, every attempt runs with
`trainer.resume_mode=auto`, and the step it resumed from is recorded. `RUN_DIR/run.json` (the state)
and `RUN_DIR/attempts.jsonl` (the ledger) are rewritten atomically after every change, so
`doctor train --resume RUN_DIR` continues a supervisor that was itself stopped.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, TextIO

from checks.launch import Launch, parse_launch
from trainer import downshift
from trainer.atomic import write_text_atomic

SCHEMA = "doctor.train/v1"
STEP_LINE = re.compile(r"(?:^|\s)step:(\d+)\b")
PHASE_MARKER = re.compile(r"\[trainer\] phase=(\w+) failed")
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"


class SupervisorError(Exception):
    """The supervisor cannot do its job (bad run dir, unreadable state): one line, exit 2."""


# ---------------------------------------------------------------------------------------------
# Overrides: the user's list, edited in place so the last word on a key is ours.

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


# ---------------------------------------------------------------------------------------------
# Engines: what to run. The verl engine lives in trainer/verl_engine.py.

class Engine:
    name = "engine"
    module = ""

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

    # Check categories that do not apply to this engine (doctor check models verl's config).
    preflight_skip: frozenset[str] = frozenset()


class ReferenceEngine(Engine):
    """`python -m trainer.main_grpo` - the reference trainer (runs on CPU, CUDA or NPU)."""

    name = "reference"
    module = "trainer.main_grpo"
    # verl's config schema and memory model are not this trainer's; it validates its own keys.
    preflight_skip = frozenset({"config", "memory"})

    @staticmethod
    def _keys() -> dict:
        try:
            from trainer.config import KEYS
        except ImportError:
            return {}
        return KEYS

    def defaults(self) -> dict[str, Any]:
        return {key: spec.default for key, spec in self._keys().items()}

    def supports(self, key: str) -> bool:
        """A knob the reference trainer acts on (verl's engine-only keys are accepted, inert)."""
        spec = self._keys().get(key)
        return spec is not None and spec.effect


def engine_from_spec(spec: dict[str, Any]) -> Engine:
    """Rebuild the engine recorded in run.json (for --resume); the environment is today's."""
    if spec.get("engine") == "verl":
        from trainer.verl_engine import VerlEngine

        return VerlEngine.from_spec(spec)
    return ReferenceEngine(spec.get("overrides", []), cwd=spec.get("cwd"), python=spec.get("python"))


# ---------------------------------------------------------------------------------------------
# Diagnosis: the catalog's first explanation of the attempt's log.

@dataclass
class Diagnosis:
    category: str | None  # None: nothing in the catalog matched
    rule: str | None = None
    phase: str | None = None
    title: str = ""
    cause: str = ""
    fix: str = ""
    lines: list[dict] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.category or "unknown"

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.kind, "rule": self.rule, "phase": self.phase, "title": self.title,
                "cause": self.cause, "fix": self.fix, "lines": self.lines[:5]}


def diagnose(log_path: Path) -> Diagnosis:
    try:
        from knowledge.explain import explain_paths
    except ImportError:  # the catalog is not installed: every failure is unknown
        found = []
    else:
        found = explain_paths([str(log_path)])
    phase = _marker_phase(log_path)
    if not found:
        return Diagnosis(category=None, phase=phase)
    top = found[0]
    return Diagnosis(category=top.category, rule=top.rule, phase=getattr(top, "phase", None) or phase,
                     title=top.title, cause=top.cause, fix=top.fix,
                     lines=[dict(line) for line in (top.lines or [])])


def _marker_phase(log_path: Path) -> str | None:
    """The reference trainer's own `[trainer] phase=X failed` line names the phase."""
    phase = None
    with open(log_path, errors="replace") as fh:
        for line in fh:
            m = PHASE_MARKER.search(line)
            if m:
                phase = m.group(1)
    return phase


# ---------------------------------------------------------------------------------------------
# The Ray cluster: wait until it has the nodes the job needs, each one answering a task.

_NODE_PROBE = r"""
import json, os, sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
@ray.remote(num_cpus=0)
def here():
    return 1
alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
refs = [here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False)).remote()
        for n in alive]
ready, _ = ray.wait(refs, num_returns=len(refs), timeout=float(sys.argv[2]))
print(json.dumps({"alive": len(alive), "answering": len(ready)}), flush=True)
os._exit(0)
"""


def answering_nodes(python: str, address: str, env: dict[str, str], timeout: float = 10.0) -> int:
    """Nodes of the cluster at `address` that run a task now (a node the GCS has not yet declared
    dead is listed alive but does not answer). 0 when the cluster cannot be reached."""
    try:
        out = subprocess.run([python, "-c", _NODE_PROBE, address, str(timeout)], env=env,
                             capture_output=True, text=True, timeout=timeout + 60)
        return int(json.loads(out.stdout.strip().splitlines()[-1])["answering"])
    except (subprocess.TimeoutExpired, ValueError, IndexError, KeyError, OSError):
        return 0


# ---------------------------------------------------------------------------------------------
# The ledger.

@dataclass
class Attempt:
    n: int
    overrides: list[str]
    started_at: str
    resumed_from_step: int = 0
    exit_code: int | None = None
    duration_s: float = 0.0
    steps_completed: int = 0
    diagnosis: dict | None = None
    decision: str = "running"  # done | downshift | retry | stop | interrupted | abandoned
    reason: str = ""
    changes: dict[str, list] = field(default_factory=dict)  # for the next attempt: key -> [old, new]
    log: str = ""
    pid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _redact(obj: Any) -> Any:
    try:
        from knowledge.redact import redact_mapping
    except ImportError:
        return obj
    return redact_mapping(obj)


def _redact_text(text: str) -> str:
    try:
        from knowledge.redact import redact_text
    except ImportError:
        return text
    return redact_text(text)



def read_checkpoint_step(ckpt_dir: Path) -> int:
    try:
        return int((ckpt_dir / CHECKPOINT_TRACKER).read_text().strip())
    except (OSError, ValueError):
        return 0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------------------------------------

@dataclass
class Options:
    max_retries: int = 3
    auto_tune: bool = True
    node_wait_s: float = 300.0
    node_probe_s: float = 10.0
    preflight: bool = True
    stop_grace_s: float = 15.0  # after Ctrl-C, how long the job may take to stop before SIGTERM
    echo: TextIO | None = None  # where the child's output and our notes go (None: stdout)
    device_memory: int | None = None  # bytes per device: enables the memory estimate
    fits: Callable[[dict], bool | None] | None = None  # or give the estimate directly


class Interrupted(Exception):
    pass


class Supervisor:
    def __init__(self, run_dir: Path, engine: Engine, options: Options | None = None):
        self.run_dir = Path(run_dir).resolve()
        self.engine = engine
        self.opt = options or Options()
        self.attempts: list[Attempt] = []
        self.overrides: list[str] = list(engine.base_overrides)
        self.notes: list[str] = []
        self.status = "running"
        self.preflight_findings: list[dict] = []
        self._interrupts = 0
        self._child: subprocess.Popen | None = None

    # -- state -----------------------------------------------------------------------------
    @property
    def out(self) -> TextIO:
        return self.opt.echo or sys.stdout

    def say(self, msg: str) -> None:
        print(f"doctor: {msg}", file=self.out, flush=True)

    def save(self) -> None:
        state = {"schema": SCHEMA, "status": self.status, "engine": self.engine.spec(),
                 "overrides": self.overrides, "notes": self.notes,
                 "max_retries": self.opt.max_retries, "auto_tune": self.opt.auto_tune}
        write_text_atomic(self.run_dir / "run.json", json.dumps(_redact(state), indent=2) + "\n")
        lines = "".join(json.dumps(_redact(a.to_dict())) + "\n" for a in self.attempts)
        write_text_atomic(self.run_dir / "attempts.jsonl", lines)

    @classmethod
    def resume(cls, run_dir: Path, options: Options | None = None) -> "Supervisor":
        run_dir = Path(run_dir)
        try:
            state = json.loads((run_dir / "run.json").read_text())
            rows = [json.loads(x) for x in (run_dir / "attempts.jsonl").read_text().splitlines() if x]
        except (OSError, ValueError) as exc:
            raise SupervisorError(f"{run_dir} is not a doctor train run directory ({exc})") from None
        options = options or Options()
        options.max_retries = int(state.get("max_retries", options.max_retries))
        options.auto_tune = bool(state.get("auto_tune", options.auto_tune))
        options.preflight = False  # it passed (or was skipped) when the run began
        sup = cls(run_dir, engine_from_spec(state["engine"]), options)
        sup.overrides = list(state["overrides"])
        sup.notes = list(state.get("notes", []))
        sup.status = state.get("status", "running")
        sup.attempts = [Attempt(**row) for row in rows]
        if sup.status == "interrupted":
            sup.status = "running"
        for a in sup.attempts:
            if a.decision == "running":  # the supervisor itself was stopped during this attempt
                a.decision, a.reason = "abandoned", "the supervisor stopped; relaunched unchanged"
        return sup

    # -- never lose work -------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return self.engine.config(self.overrides)

    def memory_fits(self) -> Callable[[dict], bool | None] | None:
        """The memory estimate as a yes/no for a candidate config, when the device size is known."""
        if self.opt.fits is not None or not self.opt.device_memory:
            return self.opt.fits
        try:
            from checks.plan import memory_estimate

            model = Path(str(self.config().get("actor_rollout_ref.model.path", ""))).expanduser()
            model = model if model.is_absolute() else self.engine.cwd / model
            model_config = json.loads((model / "config.json").read_text())
        except (ImportError, OSError, ValueError):
            return None

        def fits(cfg: dict) -> bool | None:
            try:
                return memory_estimate(cfg, model_config, self.opt.device_memory, suggest=False).fits
            except Exception:  # an estimate that cannot be made says nothing
                return None

        return fits

    @property
    def checkpoint_dir(self) -> Path:
        path = Path(str(self.config()["trainer.default_local_dir"]))
        return path if path.is_absolute() else self.engine.cwd / path

    def _guard_work(self) -> None:
        launch = parse_overrides(self.overrides)
        cfg = self.config()
        try:
            save_freq = int(cfg.get("trainer.save_freq", -1))
        except (TypeError, ValueError):
            save_freq = -1
        if save_freq <= 0:
            forced = downshift.forced_save_freq(self.engine.name)
            self.overrides = set_override(self.overrides, "trainer.save_freq", forced)
            self.notes.append(f"trainer.save_freq was {save_freq} (never): set to {forced} so a "
                              f"relaunch resumes instead of starting over")
        if str(cfg.get("trainer.resume_mode", "")) != "auto":
            self.overrides = set_override(self.overrides, "trainer.resume_mode", "auto")
            if launch.has("trainer.resume_mode"):
                self.notes.append("trainer.resume_mode set to auto: every relaunch resumes")
        if not launch.has("trainer.default_local_dir"):
            ckpt = self.run_dir / "checkpoints"
            self.overrides = set_override(self.overrides, "trainer.default_local_dir", str(ckpt))
            self.notes.append(f"checkpoints go to {ckpt} (trainer.default_local_dir)")
        for note in self.notes:
            self.say(note)

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not self.attempts:
            if self.opt.preflight and not self._preflight():
                self.status = "failed"
                self.save()
                return self.summary()
            self._guard_work()
        self.save()
        previous = {signal.SIGINT: signal.signal(signal.SIGINT, self._on_interrupt),
                    signal.SIGTERM: signal.signal(signal.SIGTERM, self._on_interrupt)}
        try:
            while self.status == "running":
                self._one_attempt()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self.summary()

    def _one_attempt(self) -> None:
        n = len(self.attempts) + 1
        ckpt = self.checkpoint_dir
        attempt = Attempt(n=n, overrides=list(self.overrides), started_at=_now(),
                          resumed_from_step=read_checkpoint_step(ckpt),
                          log=str(self.run_dir / f"attempt-{n}.log"))
        self.attempts.append(attempt)
        where = f" (resuming from step {attempt.resumed_from_step})" if attempt.resumed_from_step else ""
        self.say(f"attempt {n}{where}: " + _redact_text(" ".join(self.engine.command(self.overrides))))
        t0 = time.monotonic()
        try:
            attempt.exit_code, attempt.steps_completed = self._run_child(attempt)
        finally:
            attempt.duration_s = round(time.monotonic() - t0, 2)
        if self._interrupts:
            attempt.decision, attempt.reason = "interrupted", "stopped by Ctrl-C"
            self.status = "interrupted"
            self.save()
            return
        if attempt.exit_code == 0:
            attempt.decision = "done"
            self.status = "succeeded"
            self.save()
            return
        diagnosis = diagnose(Path(attempt.log))
        attempt.diagnosis = diagnosis.to_dict()
        self._decide(attempt, diagnosis)
        self.save()
        self._report(attempt, diagnosis)
        if self.status == "running" and not self._cluster_ready():
            if self._interrupts:
                attempt.decision, attempt.reason = "interrupted", "stopped by Ctrl-C while waiting for nodes"
                self.status = "interrupted"
            else:
                attempt.decision = "stop"
                attempt.reason += "; the Ray cluster did not get its nodes back in time"
                self.status = "failed"
            self.save()

    def _decide(self, attempt: Attempt, diagnosis: Diagnosis) -> None:
        action = downshift.action_for(diagnosis.category, diagnosis.rule)
        if action == "wait_retry" and not self._external_cluster():
            action = "retry_once"  # nothing to wait for: the job starts its own Ray each time
        retries_used = sum(a.decision in ("downshift", "retry") for a in self.attempts[:-1])
        if action == "stop":
            attempt.decision, attempt.reason = "stop", f"a {diagnosis.kind} failure: a relaunch cannot fix it"
        elif not self.opt.auto_tune:
            attempt.decision, attempt.reason = "stop", "not retried without --auto-tune"
        elif retries_used >= self.opt.max_retries:
            attempt.decision, attempt.reason = "stop", f"retry budget spent ({self.opt.max_retries})"
        elif action == "downshift":
            # A phase the log does not name (or one without a ladder): the update phase holds
            # the largest activations, so its ladder is the best guess.
            phase = diagnosis.phase if diagnosis.phase in downshift.PHASES else "update"
            shift = downshift.next_downshift(phase, self.config(), self.engine.name,
                                             supported=self.engine.supports, fits=self.memory_fits())
            if not shift:
                attempt.decision = "stop"
                attempt.reason = f"out of memory in {shift.phase} and its ladder is at the bottom"
            else:
                for key, (_old, new) in shift.changes.items():
                    self.overrides = set_override(self.overrides, key, new)
                attempt.changes = {k: [o, v] for k, (o, v) in shift.changes.items()}
                attempt.decision = "downshift"
                attempt.reason = "; ".join(shift.reasons + shift.skipped)
        elif action == "wait_retry":
            attempt.decision, attempt.reason = "retry", f"transient {diagnosis.kind} failure: retry unchanged"
        else:  # retry_once
            before = self.attempts[-2] if len(self.attempts) > 1 else None
            again = before is not None and before.decision == "retry" and before.changes == {} and \
                (before.diagnosis or {}).get("rule") == diagnosis.rule
            if again:
                attempt.decision, attempt.reason = "stop", f"{diagnosis.kind} failure again after an unchanged retry"
            else:
                attempt.decision, attempt.reason = "retry", f"{diagnosis.kind} failure: one unchanged retry"
        self.status = "running" if attempt.decision in ("downshift", "retry") else "failed"

    def _report(self, attempt: Attempt, d: Diagnosis) -> None:
        label = f"{d.kind}" + (f" ({d.rule})" if d.rule else "") + (f", phase {d.phase}" if d.phase else "")
        self.say(f"attempt {attempt.n} failed with exit code {attempt.exit_code}: {label}")
        if d.title:
            self.say(f"  {d.title}")
        for line in d.lines[:3]:
            self.say(f"  line {line.get('n')}: {str(line.get('text', ''))[:200]}")
        if attempt.decision == "stop":
            if d.cause:
                self.say(f"  cause: {d.cause}")
            if d.fix:
                self.say(f"  fix: {d.fix}")
        for key, (old, new) in attempt.changes.items():
            self.say(f"  change {key}: {hydra_value(old)} -> {hydra_value(new)}")
        self.say(f"  {attempt.decision}: {attempt.reason}")

    # -- waiting for the cluster -------------------------------------------------------------
    def ray_address(self) -> str | None:
        cfg = self.config()
        return cfg.get("ray_kwargs.ray_init.address") or self.engine.env.get("RAY_ADDRESS")

    def _external_cluster(self) -> bool:
        return self.ray_address() not in (None, "", "local")

    def _cluster_ready(self) -> bool:
        """Before a relaunch on an existing Ray cluster: wait (bounded) for the nodes it needs."""
        if not self._external_cluster():
            return True
        address = self.ray_address()
        try:
            needed = int(self.config().get("trainer.nnodes", 1))
        except (TypeError, ValueError):
            needed = 1
        deadline = time.monotonic() + self.opt.node_wait_s
        said = False
        while not self._interrupts:
            have = answering_nodes(self.engine.python, address, self.engine.env, self.opt.node_probe_s)
            if have >= needed:
                if said:
                    self.say(f"the Ray cluster has {have} node(s) again")
                return True
            if time.monotonic() > deadline:
                return False
            if not said:
                self.say(f"waiting for the Ray cluster at {address}: {have} of {needed} node(s) answer "
                         f"(up to {self.opt.node_wait_s:.0f} s)")
                said = True
            time.sleep(2.0)
        return False

    # -- the child ---------------------------------------------------------------------------
    def _run_child(self, attempt: Attempt) -> tuple[int, int]:
        env = dict(self.engine.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = self.engine.command(self.overrides)
        last_step = 0
        with open(attempt.log, "wb") as log:
            proc = subprocess.Popen(cmd, cwd=self.engine.cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True, preexec_fn=_die_with_parent)
            self._child = proc
            attempt.pid = proc.pid
            self.save()
            for raw in proc.stdout:
                log.write(raw)
                log.flush()
                text = raw.decode("utf-8", "replace")
                self.out.write(text)
                self.out.flush()
                m = STEP_LINE.search(text)
                if m:
                    last_step = max(last_step, int(m.group(1)))
            rc = proc.wait()
            self._child = None
            _signal_group(proc.pid, signal.SIGKILL)  # what the job left behind in its session
        return rc, last_step

    def _on_interrupt(self, signum, frame) -> None:
        """First Ctrl-C: ask the job to stop (its driver cleans up its Ray workers). Second: kill."""
        self._interrupts += 1
        child = self._child
        if child is None or child.poll() is not None:
            if self._interrupts == 1:
                self.say("interrupted")
            return
        if self._interrupts == 1:
            self.say("stopping the run cleanly (Ctrl-C again to kill it)")
            _signal(child.pid, signal.SIGINT)
            # A driver blocked in native code may not see SIGINT: SIGTERM after a grace period.
            timer = threading.Timer(self.opt.stop_grace_s, _signal_if_running, (child, signal.SIGTERM))
            timer.daemon = True
            timer.start()
        else:
            self.say("killing the run")
            _signal_group(child.pid, signal.SIGKILL)

    # -- pre-flight ---------------------------------------------------------------------------
    def _preflight(self) -> bool:
        """`doctor check` on the launch; a failure stops before anything starts."""
        from checks.context import CheckContext
        from checks.registry import all_checks, flatten, run_checks, select

        launch = self.engine.preflight_launch(self.overrides)
        # Ray nodes the reference trainer starts itself all live on this machine: one host.
        nodes = 1 if self.engine.name == "reference" and not self._external_cluster() else None
        ctx = CheckContext.local(cwd=self.engine.cwd, python=self.engine.python, launch=launch, nodes=nodes)
        ctx.env = dict(self.engine.env)
        checks = select(all_checks(), None, set(self.engine.preflight_skip) or None)
        findings = [f for f in flatten(run_checks(checks, ctx)) if f.status == "fail"]
        self.preflight_findings = [f.to_dict() for f in findings]
        if not findings:
            return True
        self.say(f"pre-flight check failed ({len(findings)} problem(s)); nothing was launched "
                 f"(--no-preflight to launch anyway):")
        for f in findings:
            self.say(f"  [{f.category}] {f.title} ({f.id})" + (f" on {f.node}" if f.node else ""))
            for line in (f.message or "").splitlines()[:4]:
                self.say(f"      {line}")
            if f.fix:
                self.say(f"      fix: {f.fix.splitlines()[0]}")
        return False

    # -- the result ----------------------------------------------------------------------------
    def steps_completed(self) -> int:
        last = self.attempts[-1].steps_completed if self.attempts else 0
        return max(read_checkpoint_step(self.checkpoint_dir), last if self.status == "succeeded" else 0)

    def summary(self) -> dict[str, Any]:
        final = parse_overrides(self.overrides)
        doc = {
            "schema": SCHEMA,
            "status": "succeeded" if self.status == "succeeded" else "failed",
            "steps_completed": self.steps_completed(),
            "attempts": [
                {"n": a.n, "exit_code": a.exit_code,
                 "diagnosis": ({k: a.diagnosis[k] for k in ("category", "rule", "phase")}
                               if a.diagnosis else None),
                 "decision": a.decision, "reason": a.reason,
                 "changes": a.changes, "resumed_from_step": a.resumed_from_step,
                 "steps_completed": a.steps_completed, "duration_s": a.duration_s, "log": a.log}
                for a in self.attempts],
            "final_overrides": {o.key: o.value for o in final.overrides if o.op != "delete"},
            "paste": " ".join(override_delta(self.engine.base_overrides, self.overrides)),
            "notes": self.notes,
            "run_dir": str(self.run_dir),
        }
        if self.status == "interrupted":
            doc["interrupted"] = True
        if self.preflight_findings:
            doc["preflight"] = self.preflight_findings
        return _redact(doc)


def _signal_if_running(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is None:
        _signal(proc.pid, sig)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _signal_group(pid: int, sig: int) -> None:
    """Signal the session the child leads (it was started with start_new_session)."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_parent() -> None:
    """The child gets SIGTERM if the supervisor dies, so a resumed run never races an orphan."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def render_table(doc: dict[str, Any], file: TextIO | None = None) -> None:
    """The final table of attempts and the line to paste into the launch script."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file or sys.stdout, highlight=False, soft_wrap=True)
    table = Table(title=f"doctor train: {doc['status']}, {doc['steps_completed']} step(s) done")
    for col in ("#", "exit", "diagnosis", "resumed from", "steps", "seconds", "decision", "changes"):
        table.add_column(col)
    for a in doc["attempts"]:
        d = a["diagnosis"] or {}
        diag = "-" if not d else d["category"] + (f" {d['rule']}" if d.get("rule") else "") + \
            (f" @{d['phase']}" if d.get("phase") else "")
        changes = ", ".join(f"{k.rsplit('.', 1)[-1]} {hydra_value(o)}->{hydra_value(v)}"
                            for k, (o, v) in a["changes"].items()) or "-"
        table.add_row(str(a["n"]), str(a["exit_code"]), diag, str(a["resumed_from_step"]),
                      str(a["steps_completed"]), f"{a['duration_s']:.0f}", a["decision"], changes)
    console.print(table)
    if doc["paste"]:
        console.print("Overrides that worked (append to the launch command):")
        console.print(f"  {doc['paste']}", markup=False)
