"""One training worker per device: rollout, reward, log-probs, update, like verl's actor/rollout/ref
worker, with data parallelism through torch.distributed (gloo on CPU, nccl on CUDA, hccl on NPU).

The phase methods carry verl's names (`generate_sequences`, `compute_log_prob`,
`compute_ref_log_prob`, `update_actor`) so a traceback reads like verl's; a failure inside one is
re-raised as `PhaseError`, whose text is the `[trainer] phase=<phase> failed: ...` marker line.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import os
import resource
import sys
import time
from dataclasses import dataclass

import torch

from trainer import algos
from trainer.attention import use_sdpa_gqa
from trainer.config import A, R, BatchPlan, parse_bytes
from trainer.reward import from_config as reward_from_config
from trainer.rollout import Rollout, generate_sequences, position_ids

BACKENDS = {"cpu": "gloo", "cuda": "nccl", "npu": "hccl"}
FUSED_ADAMW_DEVICES = {"cpu", "cuda"}  # one kernel for all parameters instead of a Python loop over them


class PhaseError(RuntimeError):
    """A failure inside one phase of a step; str() is the marker line."""

    def __init__(self, phase: str, error: BaseException | str):
        self.phase = phase
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self.error = text
        super().__init__(f"[trainer] phase={phase} failed: {text}")

    def __reduce__(self):  # crosses Ray's process boundary as plain strings
        return PhaseError, (self.phase, self.error)


@contextlib.contextmanager
def phase(name: str):
    try:
        yield
    except PhaseError:
        raise
    except Exception as exc:
        err = PhaseError(name, exc)
        print(str(err), file=sys.stderr, flush=True)
        raise err from exc


def npu_available() -> bool:
    try:
        import torch_npu  # noqa: F401
    except Exception:
        return False
    return bool(getattr(torch, "npu", None) and torch.npu.is_available())


def pick_device(requested: str, explicit: bool) -> str:
    """The device the worker trains on. An explicit trainer.device is honoured (and must exist);
    verl's default (cuda) falls back to what this machine has, as verl's auto_set_device does."""
    available = {"cpu": True, "cuda": torch.cuda.is_available(), "npu": npu_available()}
    if requested not in available:
        raise ValueError(f"trainer.device={requested!r}: choose cuda, npu or cpu")
    if explicit:
        if not available[requested]:
            raise RuntimeError(f"trainer.device={requested} but no {requested} device is visible to this worker")
        return requested
    return next(d for d in ("cuda", "npu", "cpu") if available[d])


def limit_memory(limit_bytes: int | None) -> None:
    """A kernel-enforced cap on this process's data memory: an allocation beyond it fails
    (torch raises "DefaultCPUAllocator: can't allocate memory"), like a device OOM."""
    if limit_bytes:
        resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))


def data_memory() -> int | None:
    """This process's data memory (what RLIMIT_DATA limits), from /proc on Linux."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@dataclass
class Item:
    """One prompt of a step, as the driver sends it."""
    uid: str
    prompt_ids: list[int]
    data_source: str
    ground_truth: object
    extra_info: dict | None


class Worker:
    def __init__(self, cfg: dict, plan: BatchPlan, rank: int, world: int, threads: int | None = None):
        limit_memory(parse_bytes(cfg["trainer.worker_memory_limit"]))
        self.cfg, self.plan, self.rank, self.world = cfg, plan, rank, world
        if threads:
            torch.set_num_threads(threads)
        self.device_type = pick_device(cfg["trainer.device"], "trainer.device" in cfg["_given"])
        self.device = torch.device(self.device_type if self.device_type == "cpu" else f"{self.device_type}:0")
        self.generator = torch.Generator(device=self.device)  # sampling happens on the device
        self.seed = int(cfg["data.seed"] if cfg["data.seed"] is not None else 1)
        self.generator.manual_seed(self.seed * 1_000_003 + rank)
        self.fingerprints: dict | None = None  # filled per update once track_gradients() is called

    # -- set-up ----------------------------------------------------------------------------------
    def address(self) -> tuple[str, int]:
        """Where rank 0 listens for the process group (this node's IP and a free port)."""
        import socket

        import ray

        ip = ray.util.get_node_ip_address()
        with socket.socket() as s:
            s.bind((ip, 0))
            return ip, s.getsockname()[1]

    def node_id(self) -> str:
        """The Ray node this worker runs on (Ray's own record), or the host name outside Ray."""
        ray = sys.modules.get("ray")
        if ray is None or not ray.is_initialized():
            import socket

            return socket.gethostname()
        return ray.get_runtime_context().get_node_id()

    def setup(self, master_addr: str | None = None, master_port: int | None = None) -> dict:
        with phase("rollout_init"):
            if self.world > 1:
                import datetime

                import torch.distributed as dist

                dist.init_process_group(BACKENDS[self.device_type], init_method=f"tcp://{master_addr}:{master_port}",
                                        rank=self.rank, world_size=self.world,
                                        timeout=datetime.timedelta(seconds=300))
            self._load_models()
            self.reward = reward_from_config(self.cfg)
        return {"rank": self.rank, "device": str(self.device), "threads": torch.get_num_threads(),
                "pid": os.getpid(), "data_memory_bytes": data_memory()}

    def _load_models(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        cfg = self.cfg
        path = os.path.expanduser(cfg["actor_rollout_ref.model.path"])
        remote = cfg["actor_rollout_ref.model.trust_remote_code"]
        self.tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=remote)
        torch.manual_seed(self.seed)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, trust_remote_code=remote)
        self.model.to(self.device)
        use_sdpa_gqa(self.model)
        if cfg["actor_rollout_ref.model.enable_gradient_checkpointing"]:
            self.model.gradient_checkpointing_enable()
        self.ref_model = None
        if cfg[A + "use_kl_loss"]:
            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        betas = tuple(cfg[A + "optim.betas"])
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=cfg[A + "optim.lr"], betas=betas,
                                           weight_decay=cfg[A + "optim.weight_decay"],
                                           fused=self.device.type in FUSED_ADAMW_DEVICES)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        eos = self.model.generation_config.eos_token_id or self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        self.total_steps = 0  # set by the driver before the first step

    # -- the step ----------------------------------------------------------------------------------
    def train_step(self, step: int, items: list[Item], lr: float) -> dict:
        """One GRPO step on this worker's share of the batch; returns (sum, weight) metrics."""
        t0 = time.perf_counter()
        timing = {}
        with phase("generate"):
            rollout = self.generate_sequences(items).to("cpu")  # phases move their micro batches back
        timing["gen"] = time.perf_counter() - t0
        with phase("reward"):
            scores, accs = self.compute_rewards(items, rollout)
        index = [it.uid for it in items for _ in range(self.cfg[R + "n"])]
        token_rewards = torch.zeros(rollout.response_mask.shape, dtype=torch.float32)
        lengths = rollout.response_mask.sum(-1)
        token_rewards[torch.arange(len(scores)), (lengths - 1).clamp(min=0)] = scores
        advantages = algos.grpo_outcome_advantage(token_rewards, rollout.response_mask.float(), index,
                                                  norm_adv_by_std_in_grpo=self.cfg["algorithm.norm_adv_by_std_in_grpo"])
        t1 = time.perf_counter()
        old_log_prob = None
        if self.plan.updates_per_step > 1 or self.cfg[A + "ppo_epochs"] > 1:
            with phase("log_prob"):
                old_log_prob = self.compute_log_prob(rollout)
        timing["old_log_prob"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        ref_log_prob = None
        if self.ref_model is not None:
            with phase("ref_log_prob"):
                ref_log_prob = self.compute_ref_log_prob(rollout)
        timing["ref"] = time.perf_counter() - t2
        t3 = time.perf_counter()
        with phase("update"):
            metrics = self.update_actor(rollout, advantages, old_log_prob, ref_log_prob, lr)
        timing["update_actor"] = time.perf_counter() - t3
        n = len(scores)
        resp_len = lengths.float()
        metrics.update({
            "critic/score/mean": (float(scores.sum()), n),
            "critic/score/max": ("max", float(scores.max())),
            "critic/score/min": ("min", float(scores.min())),
            "reward/accuracy": (float(accs.sum()), n),
            "critic/advantages/mean": (float(advantages.sum()), float(rollout.response_mask.sum())),  # token mean
            "response_length/mean": (float(resp_len.sum()), n),
            "response_length/max": ("max", float(resp_len.max())),
            "response_length/clip_ratio": (float((resp_len >= self.cfg["data.max_response_length"]).sum()), n),
            "prompt_length/mean": (float(rollout.prompt_mask.sum()), n),
            "_tokens": ("sum", float(rollout.prompt_mask.sum() + rollout.response_mask.sum())),
            "_response_tokens": ("sum", float(rollout.response_mask.sum())),
        })
        for key, seconds in timing.items():
            metrics[f"timing_s/{key}"] = ("max", seconds)
        return metrics

    def generate_sequences(self, items: list[Item], do_sample: bool | None = None, n: int | None = None) -> Rollout:
        cfg = self.cfg
        n = cfg[R + "n"] if n is None else n
        prompts = [it.prompt_ids for it in items for _ in range(n)]
        self.model.eval()
        sample = cfg[R + "do_sample"] if do_sample is None else do_sample
        return generate_sequences(self.model, prompts, max_new_tokens=cfg["data.max_response_length"],
                                  eos_ids=self.eos_ids, pad_id=self.pad_id, generator=self.generator,
                                  temperature=cfg[R + "temperature"], top_k=cfg[R + "top_k"],
                                  top_p=cfg[R + "top_p"], do_sample=sample)

    def compute_rewards(self, items: list[Item], rollout: Rollout, n: int | None = None):
        n = self.cfg[R + "n"] if n is None else n
        texts = self.tokenizer.batch_decode(rollout.responses * rollout.response_mask, skip_special_tokens=True)
        scores, accs = [], []
        for i, text in enumerate(texts):
            it = items[i // n]
            score, acc = self.reward(it.data_source, text, it.ground_truth, it.extra_info)
            scores.append(score)
            accs.append(acc)
        return torch.tensor(scores, dtype=torch.float32), torch.tensor(accs, dtype=torch.float32)

    def _response_logits(self, model, rollout: Rollout) -> torch.Tensor:
        """Logits that predict each response token, divided by the rollout temperature (as verl does)."""
        mask = rollout.attention_mask.to(self.device)
        width = rollout.responses.shape[1]
        out = model(input_ids=rollout.input_ids.to(self.device), attention_mask=mask,
                    position_ids=position_ids(mask), use_cache=False, logits_to_keep=width + 1)
        logits = out.logits[:, :-1, :].float()
        temperature = self.cfg[R + "temperature"]
        scale = temperature and temperature > 0 and temperature != 1.0  # x / 1.0 is x: skip the copy
        return logits / temperature if scale else logits

    @torch.no_grad()
    def _log_probs(self, model, rollout: Rollout, micro: int) -> torch.Tensor:
        parts = []
        for start in range(0, rollout.responses.shape[0], micro):
            chunk = rollout.select(slice(start, start + micro))
            logits = self._response_logits(model, chunk)
            parts.append(algos.log_probs_from_logits(logits, chunk.responses.to(self.device)).cpu())
        return torch.cat(parts)

    def compute_log_prob(self, rollout: Rollout) -> torch.Tensor:
        self.model.eval()
        return self._log_probs(self.model, rollout, self.plan.log_prob_micro)

    def compute_ref_log_prob(self, rollout: Rollout) -> torch.Tensor:
        return self._log_probs(self.ref_model, rollout, self.plan.ref_micro)

    def _all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor

    def update_actor(self, rollout: Rollout, advantages, old_log_prob, ref_log_prob, lr: float) -> dict:
        cfg, plan = self.cfg, self.plan
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.model.train()
        size = rollout.responses.shape[0]
        sums: dict[str, list[float]] = {}

        def add(key, value, weight=1.0):
            s = sums.setdefault(key, [0.0, 0.0])
            s[0] += float(value) * weight
            s[1] += weight

        for epoch in range(cfg[A + "ppo_epochs"]):
            order = torch.arange(size)
            if cfg[A + "shuffle"]:
                order = torch.randperm(size, generator=self.generator, device=self.device).cpu()
            for start in range(0, size, plan.local_mini):
                mini = order[start:start + plan.local_mini]
                counts = torch.tensor([float(rollout.response_mask[mini].sum()),
                                       float((rollout.response_mask[mini].sum(-1) > 0).sum())], dtype=torch.float64)
                counts = self._all_reduce(counts.to(self.device)).cpu()
                batch_info = {"dp_size": self.world, "batch_num_tokens": counts[0].item(),
                              "global_batch_size": counts[1].item(), "loss_scale_factor": cfg[A + "loss_scale_factor"]}
                self.optimizer.zero_grad(set_to_none=True)
                for mstart in range(0, len(mini), plan.micro):
                    idx = mini[mstart:mstart + plan.micro]
                    self._micro_step(rollout.select(idx), advantages[idx],
                                     None if old_log_prob is None else old_log_prob[idx],
                                     None if ref_log_prob is None else ref_log_prob[idx], batch_info, add)
                grad_norm = self._reduce_and_step()
                add("actor/grad_norm", grad_norm)
        metrics = {key: (s[0], s[1]) for key, s in sums.items()}
        metrics["actor/lr"] = ("max", lr)
        return metrics

    def _micro_step(self, chunk: Rollout, adv, old, ref, batch_info: dict, add) -> None:
        cfg = self.cfg
        mask = chunk.response_mask.to(self.device).float()
        adv = adv.to(self.device)
        logits = self._response_logits(self.model, chunk)
        entropy_coeff = cfg[A + "entropy_coeff"]
        log_prob, entropy = algos.log_probs_and_entropy(logits, chunk.responses.to(self.device),
                                                        entropy_grad=bool(entropy_coeff))
        old = log_prob.detach() if old is None else old.to(self.device)  # on-policy: ratio is exactly 1
        mode = cfg[A + "loss_agg_mode"]
        pg_loss, pg_metrics = algos.policy_loss(
            old, log_prob, adv, mask, loss_agg_mode=mode, clip_ratio=cfg[A + "clip_ratio"],
            clip_ratio_low=cfg[A + "clip_ratio_low"], clip_ratio_high=cfg[A + "clip_ratio_high"],
            clip_ratio_c=cfg[A + "clip_ratio_c"], **batch_info)
        loss = pg_loss
        tokens = float(mask.sum())
        if entropy_coeff:
            loss = loss - entropy_coeff * algos.agg_loss(entropy, mask, mode, **batch_info)
        add("actor/entropy", algos.masked_mean(entropy.detach(), mask), tokens)
        if ref is not None:
            kld = algos.kl_penalty(log_prob, ref.to(self.device), cfg[A + "kl_loss_type"])
            kl_loss = algos.agg_loss(kld, mask, mode, **batch_info)
            loss = loss + cfg[A + "kl_loss_coef"] * kl_loss
            add("actor/kl_loss", algos.masked_mean(kld.detach(), mask), tokens)
        loss.backward()
        add("actor/pg_loss", pg_loss.detach(), 1.0)
        for key, value in pg_metrics.items():
            add(key, value, tokens)

    def _reduce_and_step(self) -> float:
        """Average gradients over workers in one all-reduce, clip, step (skipped if not finite)."""
        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.fingerprints is not None:
            self.fingerprints["local_grad"] = _fingerprint(p.grad for p in params)
        if self.world > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            self._all_reduce(flat)
            flat /= self.world
            offset = 0
            for p in params:
                n = p.numel()
                p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
                offset += n
        if self.fingerprints is not None:
            self.fingerprints["reduced_grad"] = _fingerprint(p.grad for p in params)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, self.cfg[A + "grad_clip"]))
        if math.isfinite(grad_norm):
            self.optimizer.step()
        return grad_norm

    # -- validation --------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self, items: list[Item]) -> dict:
        with phase("generate"):
            rollout = self.generate_sequences(items, do_sample=False, n=1).to("cpu")
        scores, accs = self.compute_rewards(items, rollout, n=1)
        return {"val/score/mean": (float(scores.sum()), len(scores)), "val/accuracy": (float(accs.sum()), len(accs))}

    # -- checkpoint state ----------------------------------------------------------------------------
    def get_state(self) -> dict:
        state = {"rng": self.generator.get_state(), "torch_rng": torch.get_rng_state()}
        if self.rank == 0:
            state["model"] = {k: v.detach().cpu() for k, v in self.model.state_dict().items()}
            state["optimizer"] = self.optimizer.state_dict()
        return state

    def set_state(self, model_state: dict, optimizer_state: dict, rng: dict) -> None:
        self.model.load_state_dict(model_state)
        self.optimizer.load_state_dict(optimizer_state)
        self.generator.set_state(rng["rng"])
        torch.set_rng_state(rng["torch_rng"])

    def track_gradients(self) -> None:
        """From now on keep digests of each update's gradients, before and after the all-reduce."""
        self.fingerprints = {}

    def fingerprint(self) -> dict:
        """Digests of the last update's gradients and of the parameters (for agreement checks)."""
        return {**(self.fingerprints or {}), "params": _fingerprint(p.detach() for p in self.model.parameters())}

    def shutdown(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def _fingerprint(tensors) -> dict:
    digest = hashlib.sha256()
    total = 0.0
    for t in tensors:
        t = t.detach().to("cpu", torch.float32).contiguous()
        digest.update(t.numpy().tobytes())
        total += float(t.abs().sum())
    return {"sha256": digest.hexdigest(), "abs_sum": total}
