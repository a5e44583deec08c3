"""Config (category `config`): the trainer configuration verl will see, checked before launch.

* keys: overrides Hydra rejects (unknown keys with a did-you-mean, a missing `+`, a `+` on an existing
  key), keys the detected verl ignores or removed (knowledge/verl_keys.toml), values verl rewrites.
* verl's start-up validation (`verl.utils.config.validate_config` and the config dataclasses it
  builds), reproduced in verl's order and with verl's wording so a user can search for it.
* what verl checks only minutes in, or never: rollout TP vs devices per node, the per-device micro
  batch split, GRPO with n=1, devices requested vs present, save_freq/resume, Ray CPUs for
  TransferQueue, flash-attention, data sources with no scorer.

The validation functions take the composed config as a nested dict (`Composed.config`) and return
`Problem`s; the checks turn them into findings. bench/config_agreement.py and
tests/test_config_differential.py compare `startup_problems` with verl's own validate_config.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from probes.facts import visible_devices
from checks.model import Finding
from checks.registry import check

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
                  "seq-mean-token-sum-norm")
FSDP_STRATEGIES = ("fsdp", "fsdp2", "fsdp_turbo")
ROUTER_REPLAY_MODES = ("disabled", "R2", "R3")
GROUP_ADV = ("grpo", "grpo_passk", "grpo_vectorized", "rloo", "rloo_vectorized", "opo", "gdpo",
             "optimal_token_baseline", "tir_optimal_token_baseline")


@dataclass
class Problem:
    id: str
    message: str  # verl's own wording where verl has one
    fix: str = ""
    severity: str = "fail"
    keys: list[str] = field(default_factory=list)
    verl_checks_at_startup: bool = False  # True: validate_config raises this before Ray starts
    verl_message: str | None = None  # verl's exact text when it differs from `message` (bare asserts)

    @property
    def verl_text(self) -> str:
        return self.message if self.verl_message is None else self.verl_message


def get(cfg: dict | None, dotted: str, default: Any = None) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


# --- keys ----------------------------------------------------------------------------------------

def all_paths(nested: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in nested.items():
        out.append(prefix + str(k))
        if isinstance(v, dict):
            out += all_paths(v, f"{prefix}{k}.")
    return out


def did_you_mean(key: str, paths: list[str]) -> str | None:
    """The existing key the user most likely meant: same tail under another parent, else a close
    spelling of the full key, else a close spelling of the last part under the same parent."""
    tail = [p for p in paths if p.endswith("." + key)]
    if tail:
        return min(tail, key=len)
    close = difflib.get_close_matches(key, paths, n=1, cutoff=0.85)
    if close:
        return close[0]
    parent, _, leaf = key.rpartition(".")
    siblings = [p.rpartition(".")[2] for p in paths if p.rpartition(".")[0] == parent]
    close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.7)
    return f"{parent}.{close[0]}" if close and parent else (close[0] if close else None)


def override_problems(composed) -> list[dict]:
    """The overrides Hydra rejected, each with Hydra's message and the fix."""
    from checks.verl_config import compose_snapshot

    paths: list[str] | None = None
    out = []
    for err in composed.errors:
        text = err.get("override") or ""
        key = text.lstrip("+~").split("=", 1)[0]
        message = err["message"]
        fix = ""
        kind = "config.compose"
        if message.startswith("Could not override"):
            if paths is None:
                base = composed.config or compose_snapshot([]).config or {}
                paths = all_paths(base)
            guess = did_you_mean(key, paths)
            value = text.split("=", 1)[1] if "=" in text else ""
            if guess:
                kind = "config.unknown_key"
                fix = f"did you mean {guess}? write {guess}={value} (or add it as a new entry: +{text})"
            else:
                kind = "config.missing_plus"
                fix = f"{key} is not in verl's config; to add a new key write +{text}"
        elif message.startswith("Could not append"):
            kind = "config.plus_on_existing"
            fix = f"{key} already exists: write {text.lstrip('+')}"
        elif err.get("type") == "SnapshotLimit":
            kind = "config.snapshot_limit"
        out.append({"id": kind, "override": text, "key": key, "message": message, "fix": fix})
    return out


def _version_matches(spec: str, version: str | None) -> bool:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    if not version:
        return False
    try:
        return Version(version) in SpecifierSet(spec, prereleases=True)
    except (InvalidVersion, InvalidSpecifier):
        return False


def key_table() -> dict:
    from knowledge import load_toml

    return load_toml("verl_keys.toml")


def changed_keys(overrides: dict[str, Any], version: str | None) -> list[dict]:
    """Overrides naming keys the given verl version ignores or removed, with the key that works."""
    out = []
    for key, value in overrides.items():
        for entry in key_table().get("key", []):
            prefix = entry["key"]
            if key != prefix and not key.startswith(prefix + "."):
                continue
            if not _version_matches(entry["verl"], version):
                continue
            rest = key[len(prefix):]
            replacement = entry["replacement"].replace("{rest}", rest)
            out.append({"key": key, "value": value, "status": entry["status"], "replacement": replacement,
                        "why": entry["why"], "source": entry["source"]})
    return out


def rewritten_values(cfg: dict, version: str | None) -> list[dict]:
    out = []
    for entry in key_table().get("rewrite", []):
        if str(get(cfg, entry["key"])) == str(entry["value"]) and _version_matches(entry["verl"], version):
            out.append(entry)
    return out


# --- verl's start-up validation, in verl's order (verl/utils/config.py validate_config) ----------

def need_reference_policy(cfg: dict) -> bool:
    return bool(get(cfg, "algorithm.use_kl_in_reward", False) or get(cfg, "actor_rollout_ref.actor.use_kl_loss"))


def need_critic(cfg: dict) -> bool:
    enable = get(cfg, "critic.enable")
    if enable is not None:
        return bool(enable)
    return get(cfg, "algorithm.adv_estimator") == "gae"


# Every key `startup_problems` reads: the differential test builds its view of verl's config from these.
STARTUP_KEYS = [
    "trainer.n_gpus_per_node", "trainer.nnodes", "data.train_batch_size", "data.val_batch_size",
    "algorithm.use_kl_in_reward", "algorithm.adv_estimator", "algorithm.rollout_correction.bypass_mode",
    "critic.enable",
    *(f"actor_rollout_ref.actor.{k}" for k in (
        "use_dynamic_bsz", "strategy", "ppo_mini_batch_size", "ppo_micro_batch_size",
        "ppo_micro_batch_size_per_gpu", "loss_agg_mode", "ulysses_sequence_parallel_size", "use_kl_loss",
        "optim.lr_scheduler_type", "fsdp_config.strategy", "fsdp_config.router_replay.mode",
        "megatron.tensor_model_parallel_size", "megatron.pipeline_model_parallel_size",
        "megatron.context_parallel_size")),
    *(f"actor_rollout_ref.{s}.{k}" for s in ("ref", "rollout")
      for k in ("log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu")),
    "actor_rollout_ref.rollout.n", "actor_rollout_ref.rollout.name", "actor_rollout_ref.rollout.temperature",
    "actor_rollout_ref.rollout.val_kwargs.do_sample", "actor_rollout_ref.model.use_remove_padding",
    "actor_rollout_ref.model.lora.rank", "actor_rollout_ref.model.lora.merge", "actor_rollout_ref.model.lora_rank",
]


def startup_problems(cfg: dict) -> list[Problem]:
    """What verl's validate_config rejects, with its messages. verl stops at the first; this lists
    them all, in the order verl would meet them."""
    out: list[Problem] = []
    actor = get(cfg, "actor_rollout_ref.actor", {}) or {}
    rollout = get(cfg, "actor_rollout_ref.rollout", {}) or {}
    n_gpus = (get(cfg, "trainer.n_gpus_per_node", 1) or 0) * (get(cfg, "trainer.nnodes", 1) or 0)
    B = get(cfg, "data.train_batch_size")
    dynamic = bool(actor.get("use_dynamic_bsz"))

    def add(pid, msg, fix, *keys, verl_message=None):
        out.append(Problem(pid, msg, fix, "fail", list(keys), True, verl_message))

    if not dynamic:
        if actor.get("strategy") == "megatron":
            meg = actor.get("megatron") or {}
            mp = (meg.get("tensor_model_parallel_size") or 1) * (meg.get("pipeline_model_parallel_size") or 1)
            cp = meg.get("context_parallel_size") or 1
            if n_gpus % (mp * cp):
                add("config.megatron_parallel",
                    f"n_gpus ({n_gpus}) must be divisible by model_parallel_size ({mp}) times "
                    f"context_parallel_size ({cp})", "make TP*PP*CP divide nnodes*n_gpus_per_node",
                    "trainer.n_gpus_per_node")
            minimal = (n_gpus // (mp * cp)) * (actor.get("ppo_micro_batch_size_per_gpu") or 0)
        else:
            minimal = n_gpus
        real = (B or 0) * (rollout.get("n") or 0)
        if minimal and real % minimal:
            add("config.train_batch_divisible",
                f"real_train_batch_size ({real}) must be divisible by minimal possible batch size ({minimal})",
                f"make data.train_batch_size * rollout.n a multiple of {minimal} "
                f"(e.g. data.train_batch_size={_round_up(B, minimal, rollout.get('n') or 1)})",
                "data.train_batch_size", "actor_rollout_ref.rollout.n")
    # the nested dataclasses are built (and validate themselves) before the actor's own __post_init__
    fsdp = actor.get("fsdp_config") or {}
    if actor.get("strategy") != "megatron" and fsdp.get("strategy") not in FSDP_STRATEGIES:
        add("config.fsdp_strategy", f"strategy {fsdp.get('strategy')} not supported",
            f"actor_rollout_ref.actor.strategy one of {', '.join(FSDP_STRATEGIES)}",
            "actor_rollout_ref.actor.strategy")
    optim = actor.get("optim") or {}
    if optim.get("lr_scheduler_type", "constant") not in ("constant", "cosine"):
        add("config.lr_scheduler", f"actor optim.lr_scheduler_type={optim.get('lr_scheduler_type')!r} is not "
            "constant or cosine (verl fails with a bare AssertionError in FSDPOptimizerConfig)",
            "actor_rollout_ref.actor.optim.lr_scheduler_type=constant or cosine",
            "actor_rollout_ref.actor.optim.lr_scheduler_type", verl_message="")
    replay = ((fsdp.get("router_replay") or {}).get("mode")) if isinstance(fsdp, dict) else None
    if replay is not None and replay not in ROUTER_REPLAY_MODES:
        add("config.router_replay",
            f"Invalid router_replay mode: {replay}. Must be one of {list(ROUTER_REPLAY_MODES)}",
            "router_replay.mode=disabled", "actor_rollout_ref.actor.router_replay.mode")
    # ActorConfig.__post_init__
    micro, micro_gpu = actor.get("ppo_micro_batch_size"), actor.get("ppo_micro_batch_size_per_gpu")
    if not dynamic:
        if micro is not None and micro_gpu is not None:
            add("config.actor_micro_both",
                "[actor] You have set both 'actor.ppo_micro_batch_size' AND 'actor.ppo_micro_batch_size_per_gpu'. "
                "Please remove 'actor.ppo_micro_batch_size' because only '*_ppo_micro_batch_size_per_gpu' is "
                "supported (the former is deprecated).", "remove actor_rollout_ref.actor.ppo_micro_batch_size",
                "actor_rollout_ref.actor.ppo_micro_batch_size")
        elif micro is None and micro_gpu is None:
            add("config.actor_micro_missing",
                "[actor] Please set at least one of 'actor.ppo_micro_batch_size' or "
                "'actor.ppo_micro_batch_size_per_gpu' if use_dynamic_bsz is not enabled.",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 (or actor.use_dynamic_bsz=True)",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu")
    if actor.get("loss_agg_mode") not in LOSS_AGG_MODES:
        add("config.loss_agg_mode", f"Invalid loss_agg_mode: {actor.get('loss_agg_mode')}",
            f"one of {', '.join(LOSS_AGG_MODES)}", "actor_rollout_ref.actor.loss_agg_mode")
    # ActorConfig.validate / FSDPActorConfig.validate
    M = actor.get("ppo_mini_batch_size")
    if not dynamic and isinstance(B, int) and isinstance(M, int):
        sp = actor.get("ulysses_sequence_parallel_size", 1) or 1
        if B < M:
            add("config.mini_gt_train",
                f"train_batch_size ({B}) must be >= actor.ppo_mini_batch_size ({M})",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={B} or data.train_batch_size={M}",
                "data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size")
        elif micro is not None:
            if M % micro:
                add("config.mini_micro_divisible",
                    f"ppo_mini_batch_size ({M}) must be divisible by ppo_micro_batch_size ({micro})",
                    "use actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu instead",
                    "actor_rollout_ref.actor.ppo_micro_batch_size")
            elif micro * sp < n_gpus:
                add("config.micro_lt_gpus",
                    f"ppo_micro_batch_size ({micro}) * ulysses_sequence_parallel_size ({sp}) must be >= "
                    f"n_gpus ({n_gpus})", "use actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu instead",
                    "actor_rollout_ref.actor.ppo_micro_batch_size")
    if actor.get("strategy") != "megatron" and (actor.get("ulysses_sequence_parallel_size", 1) or 1) > 1 \
            and not get(cfg, "actor_rollout_ref.model.use_remove_padding", False):
        add("config.sp_remove_padding",
            "When using sequence parallelism for actor/ref policy, you must enable `use_remove_padding`.",
            "actor_rollout_ref.model.use_remove_padding=True", "actor_rollout_ref.model.use_remove_padding")
    # router replay vs rollout correction
    corr = get(cfg, "algorithm.rollout_correction") or {}
    if replay == "R2" and isinstance(corr, dict) and corr.get("bypass_mode"):
        add("config.router_replay_bypass",
            "router_replay.mode='R2' requires algorithm.rollout_correction.bypass_mode=False: R2 records routes "
            "while recomputing actor old_log_probs, but bypass mode skips that forward.",
            "algorithm.rollout_correction.bypass_mode=False", "algorithm.rollout_correction.bypass_mode")
    if not dynamic:
        sections = (["actor_rollout_ref.ref"] if need_reference_policy(cfg) else []) + ["actor_rollout_ref.rollout"]
        for name in sections:
            node = get(cfg, name) or {}
            mbs, per_gpu = node.get("log_prob_micro_batch_size"), node.get("log_prob_micro_batch_size_per_gpu")
            param = "log_prob_micro_batch_size"
            short = name.rsplit(".", 1)[1]
            if mbs is None and per_gpu is None:
                add(f"config.{short}_log_prob_micro_missing",
                    f"[{name}] Please set at least one of '{name}.{param}' or '{name}.{param}_per_gpu'.",
                    f"{name}.{param}_per_gpu=4", f"{name}.{param}_per_gpu")
            elif mbs is not None and per_gpu is not None:
                add(f"config.{short}_log_prob_micro_both",
                    f"[{name}] You have set both '{name}.{param}' AND '{name}.{param}_per_gpu'. Please remove "
                    f"'{name}.{param}' because only '*_{param}_per_gpu' is supported (the former is deprecated).",
                    f"remove {name}.{param}", f"{name}.{param}")
    val = rollout.get("val_kwargs") or {}
    if val.get("do_sample") and not (rollout.get("temperature", 1.0) > 0):
        add("config.val_temperature", "validation gen temperature should be greater than 0 when enabling do_sample",
            "actor_rollout_ref.rollout.temperature=1.0", "actor_rollout_ref.rollout.temperature")
    lora = get(cfg, "actor_rollout_ref.model.lora") or {}
    rank = lora.get("rank", 0) or 0
    if rank <= 0:
        rank = get(cfg, "actor_rollout_ref.model.lora_rank", 0) or 0
    if lora.get("merge"):
        rank = 0
    if rank > 512 and rollout.get("name") == "vllm":
        add("config.lora_rank", f"lora_rank must be less than or equal to 512, but got {rank}",
            "actor_rollout_ref.model.lora.rank=512 or less", "actor_rollout_ref.model.lora.rank")
    return out


def _round_up(B, minimal, n) -> int:
    """The smallest train_batch_size >= B with B*n divisible by `minimal`."""
    b = max(int(B or 1), 1)
    while (b * n) % minimal:
        b += 1
    return b


# --- what verl checks late, or never ---------------------------------------------------------------

def late_problems(cfg: dict, devices_per_node: int | None = None, cpus: int | None = None,
                  flash_attn: bool | None = None, npu: bool = False,
                  devices_limit: tuple[str, str] | None = None, cpus_from: str = "") -> list[Problem]:
    out: list[Problem] = []
    actor = get(cfg, "actor_rollout_ref.actor", {}) or {}
    rollout = get(cfg, "actor_rollout_ref.rollout", {}) or {}
    per_node = get(cfg, "trainer.n_gpus_per_node", 1) or 1
    nnodes = get(cfg, "trainer.nnodes", 1) or 1
    world = per_node * nnodes
    tp = rollout.get("tensor_model_parallel_size", 1) or 1
    dp = rollout.get("data_parallel_size", 1) or 1
    pp = rollout.get("pipeline_model_parallel_size", 1) or 1
    if world % (tp * dp * pp):
        out.append(Problem("config.rollout_tp",
                           f"rollout world_size: {world} is not divisible by infer_world_size: {tp * dp * pp}",
                           f"actor_rollout_ref.rollout.tensor_model_parallel_size={_divisor(per_node, tp)}",
                           keys=["actor_rollout_ref.rollout.tensor_model_parallel_size"]))
    elif tp > per_node or per_node % tp:
        out.append(Problem("config.rollout_tp",
                           f"gpus_per_node should be divisible by tensor_model_parallel_size "
                           f"(n_gpus_per_node={per_node}, tensor_model_parallel_size={tp})",
                           f"actor_rollout_ref.rollout.tensor_model_parallel_size={_divisor(per_node, tp)}",
                           keys=["actor_rollout_ref.rollout.tensor_model_parallel_size"]))
    B, n, M = get(cfg, "data.train_batch_size"), rollout.get("n") or 1, actor.get("ppo_mini_batch_size")
    micro = actor.get("ppo_micro_batch_size_per_gpu")
    sp = actor.get("ulysses_sequence_parallel_size", 1) or 1
    train_dp = max(world // sp, 1)
    if not actor.get("use_dynamic_bsz") and isinstance(M, int) and isinstance(B, int) and B >= M:
        mini = M * n
        if mini % train_dp:
            out.append(Problem("config.mini_batch_dp",
                               f"Got mini_batch_size={mini} and self.engine.get_data_parallel_size()={train_dp}",
                               f"make ppo_mini_batch_size*rollout.n ({M}*{n}) a multiple of the data-parallel "
                               f"size {train_dp}", keys=["actor_rollout_ref.actor.ppo_mini_batch_size"]))
        elif isinstance(micro, int) and micro > 0 and (mini // train_dp) % micro:
            local = mini // train_dp
            out.append(Problem("config.micro_split",
                               "data size must be divisible by force_group_size * micro_batch_size_per_gpu "
                               f"(ppo_mini_batch_size*n/dp = {M}*{n}/{train_dp} = {local} per device, "
                               f"micro batch {micro}); verl 0.9 finds this at the first update step",
                               f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={_divisor(local, micro)}",
                               keys=["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu"]))
    if get(cfg, "algorithm.adv_estimator") in GROUP_ADV and n < 2:
        out.append(Problem("config.grpo_n",
                           f"algorithm.adv_estimator={get(cfg, 'algorithm.adv_estimator')} with "
                           f"actor_rollout_ref.rollout.n={n}: each group has one response, so every advantage is "
                           "0 and the policy never learns (verl does not check this)",
                           "actor_rollout_ref.rollout.n=4 (or more)", keys=["actor_rollout_ref.rollout.n"]))
    if rollout.get("name") in (None, "???"):
        out.append(Problem("config.rollout_name", "Missing mandatory value: actor_rollout_ref.rollout.name",
                           "actor_rollout_ref.rollout.name=vllm (or sglang)",
                           keys=["actor_rollout_ref.rollout.name"]))
    if devices_per_node is not None and devices_per_node < per_node:
        var = devices_limit[0] if devices_limit else None
        has = (f"{var}={devices_limit[1]} leaves Ray {devices_per_node} of this node's devices" if var
               else f"this node has {devices_per_node} devices")
        out.append(Problem("config.devices",
                           f"trainer.n_gpus_per_node={per_node} but {has}: "
                           f"verl stops with 'Total available GPUs {devices_per_node * nnodes} is less than total "
                           f"desired GPUs {world}'",
                           f"trainer.n_gpus_per_node={devices_per_node}"
                           + (f" (or list {per_node} devices in {var} before `ray start`)" if var else ""),
                           keys=["trainer.n_gpus_per_node"]))
    if get(cfg, "trainer.save_freq", -1) in (-1, 0, None) and get(cfg, "trainer.resume_mode") == "auto":
        out.append(Problem("config.resume_nothing",
                           "trainer.resume_mode=auto with trainer.save_freq=-1: no checkpoint is ever written, "
                           "so a restart begins again from step 0", "trainer.save_freq=20 (any positive step count)",
                           "warn", ["trainer.save_freq"]))
    if cpus is not None and get(cfg, "trainer.use_v1", True):
        units = get(cfg, "transfer_queue.backend.SimpleStorage.num_data_storage_units", 0) or 0
        # verl 0.9.1 main_ppo.py (TaskRunner num_cpus=1) and transfer_queue: with 2 Ray CPUs the TaskRunner and ONE storage unit start and
        # tq.init waits forever; with 16 all start. So each unit takes a CPU beside the TaskRunner's.
        need = units + 1
        have = get(cfg, "ray_kwargs.ray_init.num_cpus") or cpus
        where = "ray_kwargs.ray_init.num_cpus" if get(cfg, "ray_kwargs.ray_init.num_cpus") else cpus_from
        if units and have < need:
            out.append(Problem("config.ray_cpus",
                               f"Ray has {have} CPUs{f' ({where})' if where else ''} but TransferQueue starts {units} storage actors (1 CPU each) "
                               f"beside the TaskRunner: tq.init waits for them forever, with no error",
                               f"ray_kwargs.ray_init.num_cpus={need} (or "
                               f"transfer_queue.backend.SimpleStorage.num_data_storage_units={max(have - 1, 1)})",
                               keys=["ray_kwargs.ray_init.num_cpus"]))
    attn = (get(cfg, "actor_rollout_ref.model.override_config") or {}).get("attn_implementation")
    if flash_attn is False and not npu and attn in (None, "flash_attention_2"):
        out.append(Problem("config.flash_attn",
                           "FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
                           "the package for FlashAttention2 doesn't seem to be installed.",
                           "+actor_rollout_ref.model.override_config.attn_implementation=sdpa "
                           "(or pip install flash-attn)",
                           keys=["actor_rollout_ref.model.override_config.attn_implementation"]))
    return out


def _divisor(total: int, near: int) -> int:
    """The largest divisor of `total` not above `near` (>= 1)."""
    for d in range(min(near, total), 0, -1):
        if total % d == 0:
            return d
    return 1


# --- checks ----------------------------------------------------------------------------------------

def _session(ctx):
    from checks.verl_config import session

    return session(ctx)


def _facts(ctx) -> dict:
    try:
        return ctx.get_facts() or {}
    except Exception:  # facts are an extra here; the config checks stand without them
        return {}


@check("config.keys", "config", "Config keys verl will read", needs=("launch",), scope="launch")
def check_keys(ctx):
    sess = _session(ctx)
    composed = sess.composed
    out = []
    for p in override_problems(composed):
        line = ctx.launch.script_lines.get(p["override"])
        where = f" (line {line})" if line else ""
        status = "warn" if p["id"] == "config.snapshot_limit" else "fail"
        out.append(Finding(p["id"], "config", status, f"Override rejected: {p['override']}{where}",
                           f"{p['message']} [{composed.source}]", p["fix"], {"override": p["override"]}))
    version = sess.verl_version or composed.verl_version
    assumed = "" if sess.verl_version else " (verl not found here: assuming the snapshot's version)"
    for c in changed_keys(ctx.launch.as_dict(), version):
        verb = "ignores" if c["status"] == "ignored" else "no longer has"
        if not c["replacement"]:
            fix = f"remove {c['key']}"
        elif "=" in c["replacement"]:
            fix = f"use {c['replacement']}"
        else:
            fix = f"write {c['replacement']}={c['value']}"
        out.append(Finding("config.ignored_key" if c["status"] == "ignored" else "config.removed_key", "config",
                           "warn" if c["status"] == "ignored" else "fail",
                           f"verl {version} {verb} {c['key']}",
                           f"{c['why']}{assumed}. Source: {c['source']}", fix, {"setting": c["key"]}))
    for r in rewritten_values(composed.config or {}, version):
        out.append(Finding("config.rewritten", "config", "warn", f"verl rewrites {r['key']}={r['value']}",
                           f"verl {version} silently replaces it with {r['becomes']}. Source: {r['source']}",
                           f"set {r['key']} to the device you have (npu or cuda); verl has no CPU training path"))
    return out


@check("config.validate", "config", "verl's start-up validation", needs=("launch", "config"), scope="launch")
def check_validate(ctx):
    sess = _session(ctx)
    cfg = sess.composed.config
    problems = startup_problems(cfg)
    out = [_finding(p, sess) for p in problems]
    verl_own = (sess.probe or {}).get("validate") or {}
    if verl_own.get("ok") is False and not any(verl_own.get("message") == p.message for p in problems):
        out.append(Finding("config.verl_validate", "config", "fail", "verl's validate_config rejects the config",
                           f"{verl_own.get('type')}: {verl_own.get('message') or verl_own.get('outer')}",
                           "", {"verl": verl_own}))
    return out


TITLES = {
    "config.megatron_parallel": "Megatron parallel sizes do not divide the devices",
    "config.train_batch_divisible": "train_batch_size * rollout.n does not split over the devices",
    "config.actor_micro_both": "Both actor micro batch settings are set",
    "config.actor_micro_missing": "No actor micro batch size",
    "config.loss_agg_mode": "Unknown loss_agg_mode",
    "config.fsdp_strategy": "Unknown actor strategy",
    "config.lr_scheduler": "Unknown lr_scheduler_type",
    "config.router_replay": "Unknown router_replay mode",
    "config.mini_gt_train": "ppo_mini_batch_size is larger than train_batch_size",
    "config.mini_micro_divisible": "ppo_mini_batch_size is not a multiple of ppo_micro_batch_size",
    "config.micro_lt_gpus": "ppo_micro_batch_size is smaller than the device count",
    "config.sp_remove_padding": "Sequence parallelism needs use_remove_padding",
    "config.router_replay_bypass": "router_replay R2 conflicts with rollout_correction bypass_mode",
    "config.ref_log_prob_micro_missing": "No ref log-prob micro batch size (KL is on)",
    "config.ref_log_prob_micro_both": "Both ref log-prob micro batch settings are set",
    "config.rollout_log_prob_micro_missing": "No rollout log-prob micro batch size",
    "config.rollout_log_prob_micro_both": "Both rollout log-prob micro batch settings are set",
    "config.val_temperature": "Validation sampling with temperature <= 0",
    "config.lora_rank": "LoRA rank above vLLM's maximum",
    "config.rollout_tp": "Rollout tensor parallel size does not fit the devices per node",
    "config.mini_batch_dp": "Mini batch does not split over data-parallel ranks",
    "config.micro_split": "Per-device mini batch is not a multiple of the micro batch",
    "config.grpo_n": "GRPO with one response per prompt",
    "config.rollout_name": "No rollout engine named",
    "config.devices": "More devices requested than the node has",
    "config.resume_nothing": "resume_mode=auto but no checkpoints are saved",
    "config.ray_cpus": "Too few Ray CPUs for TransferQueue: start-up hangs",
    "config.flash_attn": "flash-attention requested but not installed",
}


def _finding(p: Problem, sess) -> Finding:
    when = "verl rejects this at start-up" if p.verl_checks_at_startup else "verl finds this only after launch"
    return Finding(p.id, "config", p.severity, TITLES.get(p.id, p.id),
                   f"{p.message}\n({when}; config from {sess.composed.source})", p.fix, {"settings": p.keys})


@check("config.runtime", "config", "Settings verl checks late or never", needs=("launch", "config"), scope="launch")
def check_runtime(ctx):
    sess = _session(ctx)
    cfg = sess.composed.config
    facts = _facts(ctx)
    devices = facts.get("devices") or {}
    npu = (bool(devices.get("davinci")) or bool(_installed(facts, "torch_npu"))
           or get(cfg, "trainer.device") == "npu")  # flash attention comes with torch_npu there
    count, limit = visible_devices(devices, ctx.env)
    flash = _installed(facts, "flash_attn")
    cpus, cpus_from = ctx.ray_cpus()  # the cluster's own figure when given; None when judged from elsewhere
    problems = late_problems(cfg, devices_per_node=count, cpus=cpus, flash_attn=flash, npu=npu, devices_limit=limit,
                             cpus_from=cpus_from)
    return [_finding(p, sess) for p in problems]


def _installed(facts: dict, name: str) -> bool | None:
    probe = facts.get("probe") or {}
    if not probe.get("packages"):
        return None
    spec = (probe["packages"].get(name) or {}).get("spec")
    return bool(spec) and not (isinstance(spec, dict) and spec.get("error"))
