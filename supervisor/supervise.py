"""Run a training job until it finishes: watch, diagnose, decide, relaunch with resume.

One attempt = one child process (the reference trainer or verl's main_ppo, see supervisor/engine.py).
Its output streams, redacted line by line, to the console and to `RUN_DIR/attempt-N.log`. On a
non-zero exit the log is explained with the failure catalog (supervisor/diagnosis.py), and the
category decides (`knowledge/downshift.toml`): memory -> the phase's downshift ladder;
network/cluster -> wait for the Ray nodes, retry unchanged; config/data/imports/versions/workdir ->
stop; anything else -> one unchanged retry.

Work is never lost: a checkpoint frequency is forced when none is set, every attempt runs with
`trainer.resume_mode=auto`, and the step it resumed from is recorded. The ledger
(supervisor/ledger.py) is rewritten after every change, so `doctor train --resume RUN_DIR` continues a
supervisor that was itself stopped.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

from matching.redact import Redactor, redact_mapping, redact_text, remember_secrets
from supervisor import downshift
from supervisor.child_process import (redacted_lines, signal_if_running, signal_pid, signal_session,
                                   start_child)
from supervisor.diagnosis import Diagnosis, diagnose
from supervisor.engine import Engine, ReferenceEngine
from supervisor.ledger import Attempt, now, read_ledger, write_ledger
from supervisor.overrides import hydra_value, override_delta, parse_overrides, set_override
from supervisor.preflight import failed_checks, failure_report
from supervisor.ray_nodes import answering_nodes
from supervisor.verl_engine import VerlEngine

SCHEMA = "doctor.train/v1"
STEP_LINE = re.compile(r"(?:^|\s)step:(\d+)\b")
CHECKPOINT_TRACKER = "latest_checkpointed_iteration.txt"


class SupervisorError(Exception):
    """The supervisor cannot do its job (bad run dir, unreadable state): one line, exit 2."""


def engine_from_spec(spec: dict[str, Any]) -> Engine:
    """Rebuild the engine recorded in run.json (for --resume); the environment is today's."""
    if spec.get("engine") == "verl":
        return VerlEngine.from_spec(spec)
    return ReferenceEngine(spec.get("overrides", []), cwd=spec.get("cwd"), python=spec.get("python"))


def read_checkpoint_step(ckpt_dir: Path) -> int:
    try:
        return int((ckpt_dir / CHECKPOINT_TRACKER).read_text().strip())
    except (OSError, ValueError):
        return 0


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
        # The job's secrets (a launch script's exports too) stay out of every output: the
        # console, the attempt logs, the ledger and the summary.
        remember_secrets(engine.env)

    # -- state -----------------------------------------------------------------------------
    @property
    def out(self) -> TextIO:
        return self.opt.echo or sys.stdout

    def say(self, msg: str) -> None:
        print(f"doctor: {redact_text(msg)}", file=self.out, flush=True)

    def save(self) -> None:
        state = {"schema": SCHEMA, "status": self.status, "engine": self.engine.spec(),
                 "overrides": self.overrides, "notes": self.notes,
                 "max_retries": self.opt.max_retries, "auto_tune": self.opt.auto_tune}
        write_ledger(self.run_dir, state, self.attempts)

    @classmethod
    def resume(cls, run_dir: Path, options: Options | None = None) -> "Supervisor":
        run_dir = Path(run_dir)
        try:
            state, attempts = read_ledger(run_dir)
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
        sup.attempts = attempts
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
        except (OSError, ValueError):
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
        attempt = Attempt(n=n, overrides=list(self.overrides), started_at=now(),
                          resumed_from_step=read_checkpoint_step(ckpt),
                          log=str(self.run_dir / f"attempt-{n}.log"))
        self.attempts.append(attempt)
        where = f" (resuming from step {attempt.resumed_from_step})" if attempt.resumed_from_step else ""
        self.say(f"attempt {n}{where}: " + " ".join(self.engine.command(self.overrides)))
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
        redactor = Redactor()  # this process's secrets and the job's (remembered above)
        last_step = 0
        with open(attempt.log, "w", encoding="utf-8") as log:
            proc = start_child(self.engine.command(self.overrides), self.engine.cwd, env)
            self._child = proc
            attempt.pid = proc.pid
            self.save()
            for line in redacted_lines(proc.stdout, redactor):
                log.write(line)
                log.flush()
                self.out.write(line)
                self.out.flush()
                m = STEP_LINE.search(line)
                if m:
                    last_step = max(last_step, int(m.group(1)))
            rc = proc.wait()
            self._child = None
            signal_session(proc.pid, signal.SIGKILL)  # what the job left behind in its session
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
            signal_pid(child.pid, signal.SIGINT)
            # A driver blocked in native code may not see SIGINT: SIGTERM after a grace period.
            timer = threading.Timer(self.opt.stop_grace_s, signal_if_running, (child, signal.SIGTERM))
            timer.daemon = True
            timer.start()
        else:
            self.say("killing the run")
            signal_session(child.pid, signal.SIGKILL)

    # -- pre-flight ---------------------------------------------------------------------------
    def _preflight(self) -> bool:
        """`doctor check` on the launch; a failure stops before anything starts."""
        findings = failed_checks(self.engine, self.overrides, self._external_cluster())
        self.preflight_findings = [f.to_dict() for f in findings]
        if not findings:
            return True
        for line in failure_report(findings):
            self.say(line)
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
        return redact_mapping(doc)
