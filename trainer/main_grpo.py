"""`python -m trainer.main_grpo KEY=VALUE ...`: the reference GRPO trainer (verl's key names).

The driver reads the data, starts (or joins) Ray, puts one worker per device on each node, and
for every step hands each worker its share of the prompts; the workers roll out, score, compute
log-probs and update with gradients all-reduced among them. The driver checkpoints, logs and
resumes. Exit 0 on success, 1 when training fails (after the `[trainer] phase=... failed:` line),
2 on a bad configuration.
"""
from __future__ import annotations

import math
import os
import sys
import time
import traceback
from pathlib import Path

from trainer.config import A, ConfigError, help_text, parse_bytes, config_from_overrides, validate


def _files(value) -> list[Path]:
    paths = value if isinstance(value, list) else [value]
    out = []
    for p in paths:
        path = Path(os.path.expanduser(str(p)))
        if not path.is_file():
            raise ConfigError(f"data file not found: {path}")
        if path.suffix not in (".parquet", ".json", ".jsonl"):
            raise ConfigError(f"{path}: only .parquet, .json or .jsonl data files are supported")
        out.append(path)
    return out


def load_rows(value, max_samples: int) -> list[dict]:
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    rows: list[dict] = []
    for path in _files(value):
        table = pq.read_table(path) if path.suffix == ".parquet" else pj.read_json(path)
        rows.extend(table.to_pylist())
    return rows[:max_samples] if max_samples and max_samples > 0 else rows


def to_items(rows: list[dict], tokenizer, cfg: dict, split: str):
    """Chat-templated prompt ids per row; over-long prompts are dropped or refused, as configured."""
    from trainer.worker import Item

    key, limit = cfg["data.prompt_key"], cfg["data.max_prompt_length"]
    items, dropped = [], 0
    for i, row in enumerate(rows):
        if key not in row:
            raise ConfigError(f"{split} data has no column {key!r} (data.prompt_key); columns: {', '.join(row)}")
        text = tokenizer.apply_chat_template(row[key], add_generation_prompt=True, tokenize=False)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) > limit:
            if cfg["data.filter_overlong_prompts"]:
                dropped += 1
                continue
            raise ConfigError(f"{split} row {i}: prompt is {len(ids)} tokens, more than data.max_prompt_length="
                              f"{limit} (raise it, or set data.filter_overlong_prompts=True)")
        reward = row.get("reward_model") or {}
        items.append(Item(uid=f"{split}-{i}", prompt_ids=ids, data_source=row.get(cfg["data.reward_fn_key"]),
                          ground_truth=reward.get("ground_truth"), extra_info=row.get("extra_info")))
    return items, dropped


class Schedule:
    """Which rows a step trains on: a fixed permutation per epoch from the data seed (drop_last),
    so step k always sees the same rows, also after a resume."""

    def __init__(self, n_rows: int, batch: int, shuffle: bool, seed: int):
        import torch

        self.n_rows, self.batch, self.shuffle, self.seed = n_rows, batch, shuffle, seed
        self.steps_per_epoch = n_rows // batch
        if self.steps_per_epoch == 0:
            raise ConfigError(f"data.train_batch_size={batch} is larger than the {n_rows} training rows")
        self._torch = torch
        self._perms: dict[int, list[int]] = {}

    def _perm(self, epoch: int) -> list[int]:
        if epoch not in self._perms:
            if not self.shuffle:
                self._perms[epoch] = list(range(self.n_rows))
            else:
                g = self._torch.Generator().manual_seed(self.seed)
                for _ in range(epoch + 1):  # the generator runs on across epochs, as verl's sampler does
                    perm = self._torch.randperm(self.n_rows, generator=g).tolist()
                self._perms = {epoch: perm}
        return self._perms[epoch]

    def rows(self, step: int) -> tuple[int, list[int]]:
        epoch, k = divmod(step - 1, self.steps_per_epoch)
        return epoch, self._perm(epoch)[k * self.batch:(k + 1) * self.batch]


def lr_at(cfg: dict, step: int, total: int) -> float:
    base = cfg[A + "optim.lr"]
    warmup = cfg[A + "optim.lr_warmup_steps"]
    if warmup is None or warmup < 0:
        warmup = int(cfg[A + "optim.lr_warmup_steps_ratio"] * total)
    if warmup > 0 and step - 1 < warmup:
        return base * (step - 1) / warmup
    if cfg[A + "optim.lr_scheduler_type"] == "cosine":
        progress = (step - 1 - warmup) / max(1, total - warmup)
        floor = cfg[A + "optim.min_lr_ratio"]
        return base * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))
    return base


def fail(marker: str, detail: str | None = None) -> int:
    if detail:
        print(detail.rstrip(), file=sys.stderr)
    print(marker, file=sys.stderr, flush=True)
    return 1


class Trainer:
    def __init__(self, cfg: dict, notices: list[str]):
        self.cfg = cfg
        self.plan = validate(cfg)
        self.notices = notices
        self.root = Path(os.path.expanduser(cfg["trainer.default_local_dir"])).resolve()

    def prepare(self) -> None:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        cfg = self.cfg
        model_path = Path(os.path.expanduser(cfg["actor_rollout_ref.model.path"]))
        if not (model_path / "config.json").is_file():
            raise ConfigError(f"actor_rollout_ref.model.path={model_path}: no config.json there "
                              "(the reference trainer loads local model folders only)")
        cfg["actor_rollout_ref.model.path"] = str(model_path.resolve())
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=cfg[
            "actor_rollout_ref.model.trust_remote_code"])
        rows = load_rows(cfg["data.train_files"], cfg["data.train_max_samples"])
        self.items, dropped = to_items(rows, self.tokenizer, cfg, "train")
        if dropped:
            print(f"[trainer] dropped {dropped} prompts longer than data.max_prompt_length", flush=True)
        self.val_items = []
        if cfg["trainer.test_freq"] and cfg["trainer.test_freq"] > 0:
            val_rows = load_rows(cfg["data.val_files"], cfg["data.val_max_samples"])
            self.val_items, _ = to_items(val_rows, self.tokenizer, cfg, "val")
        seed = cfg["data.seed"] if cfg["data.seed"] is not None else 1
        self.schedule = Schedule(len(self.items), self.plan.prompts_per_step, cfg["data.shuffle"], seed)
        total = cfg["trainer.total_training_steps"]
        self.total_steps = int(total) if total else self.schedule.steps_per_epoch * cfg["trainer.total_epochs"]
        from trainer.reward import from_config

        from_config(cfg)  # a missing reward file fails here, before Ray starts

    # -- workers -------------------------------------------------------------------------------------
    def start_workers(self, cluster) -> None:
        from trainer.worker import Worker

        cfg = self.cfg
        explicit = "trainer.device" in cfg["_given"]
        device = cluster.device_kind(cfg["trainer.device"], explicit)
        self.cfg = cfg = {**cfg, "trainer.device": device, "_given": sorted(set(cfg["_given"]) | {"trainer.device"})}
        self.placements = cluster.placements(device)
        world = len(self.placements)
        total_cpus = os.cpu_count() or 1
        self.workers = []
        for rank, place in enumerate(self.placements):
            threads = place.options["num_cpus"] if device == "cpu" else None
            if cluster.local and device == "cpu":
                threads = max(1, total_cpus // world)  # local nodes share this machine's cores
            if os.environ.get("OMP_NUM_THREADS", "").isdigit():
                threads = int(os.environ["OMP_NUM_THREADS"])  # the user's choice wins
            self.workers.append(cluster.spawn(Worker, place.options, cfg, self.plan, rank, world, threads))
        self.cluster = cluster
        gather = cluster.gather
        addr, port = gather(self.workers[0].address.remote()) if world > 1 else (None, None)
        self.worker_info = gather([w.setup.remote(addr, port) for w in self.workers])
        self.worker_nodes = gather([w.node_id.remote() for w in self.workers])
        self._write_placement()

    def _write_placement(self) -> None:
        """Where Ray put each worker (node ids from the workers' own runtime context)."""
        import json

        from trainer.checkpoint import write_text_atomic

        self.root.mkdir(parents=True, exist_ok=True)
        alive = self.cluster.alive_nodes()
        workers = [{**info, "node_id": node, "node_ip": place.node_ip}
                   for info, node, place in zip(self.worker_info, self.worker_nodes, self.placements)]
        write_text_atomic(self.root / "placement.json", json.dumps({"alive_nodes": alive, "workers": workers}, indent=1))

    def shard(self, items: list) -> list[list]:
        world = len(self.workers)
        size = math.ceil(len(items) / world)
        return [items[r * size:(r + 1) * size] for r in range(world)]

    # -- state ---------------------------------------------------------------------------------------
    def resume(self) -> int:
        from trainer import checkpoint

        cfg = self.cfg
        mode = cfg["trainer.resume_mode"]
        checkpoint.clean_temp(self.root)
        if mode == "disable":
            return 0
        if mode == "resume_path":
            path = Path(os.path.expanduser(cfg["trainer.resume_from_path"]))
        else:
            step = checkpoint.latest(self.root)
            if step is None:
                return 0
            path = self.root / f"global_step_{step}"
        state = checkpoint.load(path)
        rngs = state["rngs"]
        self.cluster.gather([w.set_state.remote(state["model"], state["optimizer"], rngs[r % len(rngs)])
                 for r, w in enumerate(self.workers)])
        step = int(state["data"]["global_step"])
        print(f"[trainer] resumed from {path} (step {step})", flush=True)
        return step

    def save(self, step: int) -> None:
        from trainer import checkpoint

        states = self.cluster.gather([w.get_state.remote() for w in self.workers])
        epoch, _ = self.schedule.rows(step)
        data_state = {"global_step": step, "epoch": epoch, "steps_per_epoch": self.schedule.steps_per_epoch,
                      "seed": self.schedule.seed, "shuffle": self.schedule.shuffle}
        checkpoint.save(self.root, step, states[0]["model"], states[0]["optimizer"],
                        [{"rng": s["rng"], "torch_rng": s["torch_rng"]} for s in states], data_state,
                        keep=self.cfg["trainer.max_actor_ckpt_to_keep"])

    # -- loop ------------------------------------------------------------------------------------------
    def run_validation(self) -> dict:
        from trainer.metrics import combine

        shards = self.shard(self.val_items)
        return combine(self.cluster.gather([w.validate.remote(s) for w, s in zip(self.workers, shards)]))

    def fit(self, start: int) -> int:
        from trainer.metrics import MetricsLog, Progress, combine, console_line

        cfg = self.cfg
        log = MetricsLog(self.root / "metrics.jsonl", start)
        sinks = [log]
        if "mlflow" in cfg["trainer.logger"]:
            sinks.append(_mlflow(cfg))
        sinks = [s for s in sinks if s is not None]
        test_freq = cfg["trainer.test_freq"]
        if self.val_items and cfg["trainer.val_before_train"] and start == 0:
            val = self.run_validation()
            print(console_line(0, val), flush=True)
        progress = Progress(self.total_steps, start)
        try:
            for step in range(start + 1, self.total_steps + 1):
                t0 = time.perf_counter()
                epoch, rows = self.schedule.rows(step)
                batch = [self.items[i] for i in rows]
                lr = lr_at(cfg, step, self.total_steps)
                parts = self.cluster.gather([w.train_step.remote(step, shard, lr)
                                 for w, shard in zip(self.workers, self.shard(batch))])
                metrics = combine(parts)
                if self.val_items and test_freq > 0 and (step % test_freq == 0 or step == self.total_steps):
                    metrics.update(self.run_validation())
                if cfg["trainer.save_freq"] > 0 and (step % cfg["trainer.save_freq"] == 0 or step == self.total_steps):
                    t_save = time.perf_counter()
                    self.save(step)
                    metrics["timing_s/save_checkpoint"] = time.perf_counter() - t_save
                step_time = time.perf_counter() - t0
                tokens = metrics.pop("_tokens", 0.0)
                response_tokens = metrics.pop("_response_tokens", 0.0)
                metrics.update({"training/global_step": step, "training/epoch": epoch, "timing_s/step": step_time,
                                "perf/total_num_tokens": tokens, "perf/tokens_per_s": tokens / step_time,
                                "perf/response_tokens_per_s": response_tokens / step_time,
                                "perf/throughput": tokens / step_time / len(self.workers)})
                for sink in sinks:
                    sink.write(step, metrics)
                if "console" in cfg["trainer.logger"]:
                    print(console_line(step, metrics), flush=True)
                progress.update(step, metrics)
        finally:
            progress.close()
            for sink in sinks:
                if hasattr(sink, "close"):
                    sink.close()
        return self.total_steps

    def finish(self) -> None:
        from trainer.metrics import MetricsLog, plot_curves

        rows = MetricsLog.read(self.root / "metrics.jsonl")
        if self.cfg["trainer.plot"]:
            png = plot_curves(rows, self.root / "curves.png")
            if png:
                print(f"[trainer] curves: {png}", flush=True)
        if rows:
            first = [r["critic/score/mean"] for r in rows[:5]]
            last = [r["critic/score/mean"] for r in rows[-5:]]
            print(f"[trainer] done: {len(rows)} steps, mean reward {sum(first) / len(first):.3f} (first 5) -> "
                  f"{sum(last) / len(last):.3f} (last 5); metrics: {self.root / 'metrics.jsonl'}", flush=True)
        try:
            self.cluster.gather([w.shutdown.remote() for w in self.workers], timeout=30)
        except Exception:  # a worker that cannot say goodbye is killed all the same
            pass
        for w in self.workers:
            self.cluster.kill(w)


def _mlflow(cfg: dict):
    try:
        from trainer.metrics import MLflowLog

        return MLflowLog(cfg["trainer.project_name"], cfg["trainer.experiment_name"], cfg)
    except ImportError:
        print("[trainer] trainer.logger has mlflow but mlflow is not installed (pip install mlflow): skipped",
              flush=True)
        return None


def _remote_failure(exc: BaseException) -> tuple[str, str]:
    """The marker line and the (remote) traceback of a failed worker call."""
    from trainer.worker import PhaseError

    cause = getattr(exc, "cause", None)  # a RayTaskError carries the worker's exception
    if isinstance(cause, PhaseError):
        return str(cause), str(exc)
    if isinstance(exc, PhaseError):
        return str(exc), traceback.format_exc()
    kind = type(cause or exc).__name__
    first = str(cause or exc).strip().splitlines()
    return f"[trainer] phase=step failed: {kind}: {first[0] if first else ''}", str(exc)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(help_text())
        return 0
    from trainer.ray_cluster import StartError, describe, workers_home
    from trainer.reward import RewardError

    try:
        cfg, notices = config_from_overrides(argv)
        trainer = Trainer(cfg, notices)
        for note in notices:
            print(f"[trainer] accepted, no effect here: {note}", flush=True)
        for backend in cfg["trainer.logger"]:
            if backend not in ("console", "mlflow", "file"):
                print(f"[trainer] trainer.logger: {backend} is not supported by the reference trainer: skipped",
                      flush=True)
        if cfg["custom_reward_function.path"] and not cfg["reward.custom_reward_function.path"]:
            print("[trainer] custom_reward_function.path is honoured here, but verl 0.9 ignores this legacy key: "
                  "use reward.custom_reward_function.path", flush=True)
        trainer.prepare()
    except (ConfigError, RewardError) as exc:
        print(f"trainer: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a model or data file that cannot be read: one line, no traceback
        return fail(f"[trainer] phase=prepare failed: {describe(exc)}")

    try:
        with workers_home(cfg["trainer.nnodes"], cfg["trainer.n_gpus_per_node"], cfg["ray_kwargs.ray_init.num_cpus"],
                          parse_bytes(cfg["trainer.worker_memory_limit"])) as cluster:
            try:
                trainer.start_workers(cluster)
                start = trainer.resume()
                print(f"[trainer] {len(trainer.workers)} workers on {len(set(trainer.worker_nodes))} node(s), "
                      f"device {trainer.cfg['trainer.device']}, steps {start + 1}..{trainer.total_steps}", flush=True)
                trainer.fit(start)
                trainer.finish()
            except Exception as exc:  # a worker, a node or the cluster failed: the marker line, exit 1
                marker, detail = _remote_failure(exc)
                return fail(marker, detail)
    except StartError as exc:  # Ray did not start: one line names the exception and where it rose
        return fail(f"[trainer] phase=startup failed: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
