"""Batch arithmetic and a per-device memory estimate for a colocated verl GRPO job (FSDP + rollout).

All functions take the FLAT effective config (`checks.verl_config.effective_config`: dotted keys).

## Batch arithmetic (the seed article, section 4.2.3 / 5.1)
    B = data.train_batch_size   n = rollout.n   M = actor.ppo_mini_batch_size
    m = actor.ppo_micro_batch_size_per_gpu   W = trainer.nnodes * trainer.n_gpus_per_node
    T = B*n;  updates_per_iter = ceil(T/M) * ppo_epochs;  local_mini = M/W;  accum = local_mini/m
    iters_per_epoch = ceil(N/B);  total_updates = iters_per_epoch * updates_per_iter * epochs
and, beside it, what verl 0.9.1 actually does with the same numbers: it multiplies M by n before
use (v1/trainer_base.py:1829-1830), so one optimizer step eats M*n samples and an iteration makes
ceil(B/M)*ppo_epochs of them; its dataloader drops the last partial batch (drop_last=True,
trainer_base.py:744), so an epoch is floor(N/B) steps.

## Memory (bytes per device; the peak is the largest phase)
    P   parameters, counted from config.json (embeddings, attention with GQA and bias, gated MLP
        times experts, norms, untied lm_head)
    F   FSDP shard count: fsdp_config.fsdp_size, or W when -1
    Sa  actor parameter bytes (fsdp_config.model_dtype: fp32 = 4) ; Sr the reference's
    S   sequence length max_prompt_length + max_response_length; with use_dynamic_bsz a micro batch
        holds ppo_max_token_len_per_gpu tokens (log_prob_max_token_len_per_gpu for forward passes)
    actor params     P*Sa/F          (0 outside `update` with param_offload)
    gradients        P*4/F           (fp32, `update` only)
    optimizer        P*8/F           (Adam m and v in fp32; 0 outside `update` with optimizer_offload)
    ref params       P*Sr/F          (0 with ref param_offload: FSDP CPU offload streams layers in)
    gather buffer    2 * (largest layer) * 2 bytes  (FSDP all-gathers one bf16 layer, prefetches one)
    activations      training, per micro batch of b sequences of S tokens, bf16:
                       per token per layer A = 2*(6h + 2*kv_dim + 4*I)   (norm outputs, q/k/v/o, gated MLP)
                       checkpointing on:  L*b*S*h*2 (saved layer inputs) + b*S*A (one layer recomputed)
                       checkpointing off: L*b*S*A
                     forward-only passes keep one layer: b*S*A
    logits           b*S*V*7 in forward passes (bf16 logits + fp32 log-softmax + index, verl
                     perf_tuning.rst "Entropy memory"), +4 bytes per element in `update` (fp32 grad)
    rollout          gpu_memory_utilization * capacity (vLLM/vLLM-Ascend take that share of the whole
                     device for weights + KV cache while generating; freed by sleep mode afterwards)
    weight sync      min(2P, update_weights_bucket_megabytes) bf16 bucket while weights are pushed
Phases (resident state + transient): generate, weight_sync, log_prob, ref_log_prob, update.
Not modelled: allocator fragmentation, CUDA graphs, communication buffers; hence the 90% warning.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

GiB = 1024 ** 3
PHASES = ("generate", "weight_sync", "log_prob", "ref_log_prob", "update")
_DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}

A = "actor_rollout_ref.actor."
R = "actor_rollout_ref.rollout."
F = "actor_rollout_ref.ref."


def _int(cfg: dict, key: str, default: int | None = None) -> int | None:
    v = cfg.get(key, default)
    try:
        return int(v) if v is not None else default
    except (TypeError, ValueError):
        return default


def world_size(cfg: dict) -> int:
    return (_int(cfg, "trainer.nnodes", 1) or 1) * (_int(cfg, "trainer.n_gpus_per_node", 1) or 1)


# --- batch arithmetic --------------------------------------------------------------------------

def batch_plan(cfg: dict, dataset_rows: int | None = None) -> dict[str, Any]:
    B = _int(cfg, "data.train_batch_size")
    n = _int(cfg, R + "n", 1)
    M = _int(cfg, A + "ppo_mini_batch_size")
    m = _int(cfg, A + "ppo_micro_batch_size_per_gpu")
    W = world_size(cfg)
    epochs = _int(cfg, "trainer.total_epochs", 1)
    ppo_epochs = _int(cfg, A + "ppo_epochs", 1) or 1
    sp = _int(cfg, A + "ulysses_sequence_parallel_size", 1) or 1
    dynamic = bool(cfg.get(A + "use_dynamic_bsz"))
    N = dataset_rows
    plan: dict[str, Any] = {"N": N, "B": B, "n": n, "M": M, "m": m, "W": W, "epochs": epochs,
                            "ppo_epochs": ppo_epochs}
    T = B * n if B and n else None
    plan["T"] = T
    plan["updates_per_iter"] = math.ceil(T / M) * ppo_epochs if T and M else None
    plan["local_mini"] = _exact(M, W)
    plan["accum_steps"] = _exact(plan["local_mini"], m) if plan["local_mini"] and m and not dynamic else None
    plan["iters_per_epoch"] = math.ceil(N / B) if N is not None and B else None
    plan["total_updates"] = (plan["iters_per_epoch"] * plan["updates_per_iter"] * epochs
                             if plan["iters_per_epoch"] is not None and plan["updates_per_iter"] else None)
    plan["verl"] = _verl_view(cfg, B, n, M, m, W, sp, N, epochs, ppo_epochs, dynamic)
    return plan


def _exact(a, b):
    """a/b as an int when it divides, else a float rounded for display; None when unknown."""
    if a is None or not b:
        return None
    q = a / b
    return int(q) if float(q).is_integer() else round(q, 3)


def _verl_view(cfg, B, n, M, m, W, sp, N, epochs, ppo_epochs, dynamic) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not (B and n and M):
        return out
    dp = max(W // sp, 1)
    mini_samples = M * n
    out["mini_batch_samples"] = mini_samples
    out["optimizer_steps_per_iter"] = math.ceil(B / M) * ppo_epochs
    out["dp"] = dp
    out["local_mini_samples"] = _exact(mini_samples, dp)
    out["accum_steps"] = _exact(out["local_mini_samples"], m) if m and not dynamic else None
    if N is not None:
        steps = N // B
        out["steps_per_epoch"] = steps
        total = _int(cfg, "trainer.total_training_steps")
        out["total_training_steps"] = total if total is not None else steps * epochs
        out["total_optimizer_steps"] = out["total_training_steps"] * out["optimizer_steps_per_iter"]
    return out


# --- model size ---------------------------------------------------------------------------------

@dataclass
class ModelShape:
    params: int
    hidden: int
    layers: int
    intermediate: int
    vocab: int
    kv_dim: int
    largest_layer: int  # parameters of the biggest FSDP unit (a decoder layer or the embedding)


def model_shape(config: dict) -> ModelShape:
    """Parameter count of a decoder-only HF model from its config.json."""
    cfg = config.get("text_config") or config
    h = int(cfg["hidden_size"])
    L = int(cfg["num_hidden_layers"])
    heads = int(cfg["num_attention_heads"])
    kv = int(cfg.get("num_key_value_heads") or heads)
    d = int(cfg.get("head_dim") or h // heads)
    inter = int(cfg.get("intermediate_size") or cfg.get("moe_intermediate_size") or 4 * h)
    V = int(cfg["vocab_size"])
    bias = bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2"))
    experts = int(cfg.get("num_experts") or cfg.get("num_local_experts") or 1)
    q, kvd = heads * d, kv * d
    attn = h * q + 2 * h * kvd + q * h + ((q + 2 * kvd) if bias else 0)
    mlp = 3 * h * inter * experts + (h * experts if experts > 1 else 0)
    layer = attn + mlp + 2 * h
    embed = V * h
    tied = bool(config.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
    params = embed + L * layer + h + (0 if tied else V * h)
    return ModelShape(params, h, L, inter, V, kvd, max(layer, embed))


# --- memory estimate ------------------------------------------------------------------------------

@dataclass
class MemoryEstimate:
    phases: dict[str, dict[str, int]]
    capacity: int | None
    peak_phase: str
    suggestions: list[dict[str, Any]] = field(default_factory=list)
    params: int = 0

    @property
    def parts(self) -> dict[str, int]:
        """The breakdown of the peak phase, largest first."""
        return dict(sorted(self.phases[self.peak_phase].items(), key=lambda kv: -kv[1]))

    @property
    def total(self) -> int:
        return sum(self.phases[self.peak_phase].values())

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.total <= self.capacity

    @property
    def ratio(self) -> float | None:
        return None if not self.capacity else self.total / self.capacity

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "capacity": self.capacity, "peak_phase": self.peak_phase,
                "total": self.total, "fits": self.fits, "ratio": self.ratio, "parts": self.parts,
                "phases": {p: sum(v.values()) for p, v in self.phases.items()},
                "suggestions": self.suggestions}


def _dtype(cfg: dict, key: str, default: int = 4) -> int:
    return _DTYPE_BYTES.get(str(cfg.get(key, "")).lower(), default)


def _phases(cfg: dict, shape: ModelShape, capacity: int | None) -> dict[str, dict[str, int]]:
    P = shape.params
    W = world_size(cfg)
    fsdp = _int(cfg, A + "fsdp_config.fsdp_size", -1) or -1
    shards = W if fsdp is None or fsdp <= 0 else min(fsdp, W)
    S = (_int(cfg, "data.max_prompt_length", 512) or 0) + (_int(cfg, "data.max_response_length", 512) or 0)
    dynamic = bool(cfg.get(A + "use_dynamic_bsz"))
    kl = bool(cfg.get(A + "use_kl_loss")) or bool(cfg.get("algorithm.use_kl_in_reward"))
    param_off = bool(cfg.get(A + "fsdp_config.param_offload"))
    optim_off = bool(cfg.get(A + "fsdp_config.optimizer_offload"))
    ref_off = bool(cfg.get(F + "fsdp_config.param_offload"))
    ckpt = bool(cfg.get("actor_rollout_ref.model.enable_gradient_checkpointing", True))
    h, L, V = shape.hidden, shape.layers, shape.vocab
    per_token_layer = 2 * (6 * h + 2 * shape.kv_dim + 4 * shape.intermediate)

    def tokens(micro_key: str, budget_key: str) -> int:
        if dynamic:
            return _int(cfg, budget_key, 16384) or 0
        return (_int(cfg, micro_key, 1) or 1) * S

    train_tok = tokens(A + "ppo_micro_batch_size_per_gpu", A + "ppo_max_token_len_per_gpu")
    lp_tok = tokens(R + "log_prob_micro_batch_size_per_gpu", R + "log_prob_max_token_len_per_gpu")
    ref_tok = tokens(F + "log_prob_micro_batch_size_per_gpu", F + "log_prob_max_token_len_per_gpu")

    actor = P * _dtype(cfg, A + "fsdp_config.model_dtype") // shards
    optim = P * 8 // shards
    grads = P * 4 // shards
    ref = 0 if (not kl or ref_off) else P * _dtype(cfg, F + "fsdp_config.model_dtype") // shards
    gather = 2 * shape.largest_layer * 2
    resident = {"actor params": 0 if param_off else actor, "optimizer": 0 if optim_off else optim}
    if ref:
        resident["ref params"] = ref
    rollout = int(float(cfg.get(R + "gpu_memory_utilization", 0.5) or 0) * capacity) if capacity else 0
    bucket_mb = _int(cfg, R + "checkpoint_engine.update_weights_bucket_megabytes", 2048) or 2048
    if ckpt:
        train_act = L * train_tok * h * 2 + train_tok * per_token_layer
    else:
        train_act = L * train_tok * per_token_layer
    phases = {
        "generate": {**resident, "rollout": rollout},
        "weight_sync": {**resident, "rollout": rollout, "weight bucket": min(2 * P, bucket_mb * 1024 ** 2)},
        "log_prob": {**resident, "gather buffer": gather, "activations": lp_tok * per_token_layer,
                     "logits": lp_tok * V * 7},
        "update": {**resident, "actor params": actor, "optimizer": optim, "gradients": grads,
                   "gather buffer": gather, "activations": train_act, "logits": train_tok * V * 11},
    }
    if kl:
        ref_resident = P * _dtype(cfg, F + "fsdp_config.model_dtype") // shards
        phases["ref_log_prob"] = {**resident, "ref params": 0 if ref_off else ref_resident,
                                  "gather buffer": gather, "activations": ref_tok * per_token_layer,
                                  "logits": ref_tok * V * 7}
    return {p: {k: int(v) for k, v in phases[p].items() if v} for p in PHASES if p in phases}


def memory_estimate(cfg: dict, model_config: dict, device_memory_bytes: int | None,
                    suggest: bool = True) -> MemoryEstimate:
    shape = model_shape(model_config)
    phases = _phases(cfg, shape, device_memory_bytes)
    peak = max(phases, key=lambda p: sum(phases[p].values()))
    est = MemoryEstimate(phases, device_memory_bytes, peak, params=shape.params)
    if suggest and device_memory_bytes and not est.fits:
        est.suggestions = suggestions(cfg, model_config, device_memory_bytes)
    return est


# Knobs in the order a user should reach for them: first those that cost no accuracy and little
# speed, last those that change the experiment.
def _knobs(cfg: dict):
    if not cfg.get("actor_rollout_ref.model.enable_gradient_checkpointing", True):
        yield {"actor_rollout_ref.model.enable_gradient_checkpointing": True}
    for key in (R + "log_prob_micro_batch_size_per_gpu", F + "log_prob_micro_batch_size_per_gpu",
                A + "ppo_micro_batch_size_per_gpu"):
        v = _int(cfg, key)
        while v and v > 1:
            v //= 2
            yield {key: v}
    if (cfg.get(A + "use_kl_loss") or cfg.get("algorithm.use_kl_in_reward")) \
            and not cfg.get(F + "fsdp_config.param_offload"):
        yield {F + "fsdp_config.param_offload": True}
    gmu = float(cfg.get(R + "gpu_memory_utilization", 0.5) or 0.5)
    while gmu > 0.35:
        gmu = round(gmu - 0.1, 2)
        yield {R + "gpu_memory_utilization": gmu}
    if not cfg.get(A + "fsdp_config.optimizer_offload"):
        yield {A + "fsdp_config.optimizer_offload": True}
    if not cfg.get(A + "fsdp_config.param_offload"):
        yield {A + "fsdp_config.param_offload": True}
    resp = _int(cfg, "data.max_response_length")
    while resp and resp > 256:
        resp //= 2
        yield {"data.max_response_length": resp}


def suggestions(cfg: dict, model_config: dict, capacity: int, limit: int = 3) -> list[dict[str, Any]]:
    """Cheapest changes that bring the estimate under capacity: single knobs first (in knob order,
    the smallest step of each), then, if none suffices alone, the knobs combined in order."""
    out: list[dict[str, Any]] = []
    seen_keys: set[str] = set()
    for change in _knobs(cfg):
        key = next(iter(change))
        if key in seen_keys:
            continue
        est = memory_estimate({**cfg, **change}, model_config, capacity, suggest=False)
        if est.fits:
            seen_keys.add(key)
            out.append(_suggestion(cfg, change, est))
            if len(out) >= limit:
                return out
    if out:
        return out
    combined: dict[str, Any] = {}
    for change in _knobs(cfg):
        combined.update(change)
        est = memory_estimate({**cfg, **combined}, model_config, capacity, suggest=False)
        if est.fits:
            return [_suggestion(cfg, dict(combined), est)]
    return []


def _suggestion(cfg: dict, change: dict, est: MemoryEstimate) -> dict[str, Any]:
    return {"overrides": [f"{k}={_fmt(v)}" for k, v in change.items()],
            "changes": {k: [cfg.get(k), v] for k, v in change.items()},
            "total": est.total, "peak_phase": est.peak_phase}


def _fmt(v: Any) -> str:
    return str(v) if not isinstance(v, bool) else ("True" if v else "False")


def gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GiB:.1f} GiB"
