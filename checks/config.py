"""Config (category `config`): the trainer configuration verl will see, checked before launch.

* keys: overrides Hydra rejects (unknown keys with a did-you-mean, a missing `+`, a `+` on an existing
  key), keys the detected verl ignores or removed (knowledge/verl_keys.toml), values verl rewrites.
* verl's start-up validation (`verl.utils.config.validate_config` and the config dataclasses it
  builds), reproduced in verl's order and with verl's wording so a user can search for it.
* what verl checks only minutes in, or never: rollout TP vs devices per node, the per-device micro
  batch split, GRPO with n=1, devices requested vs present, save_freq/resume, Ray CPUs for
  TransferQueue, flash-attention, data sources with no scorer.

Each problem's title, words (verl's own where verl has them), fix and keys are a row of
knowledge/config_problems.toml; the code holds only the predicates, one small function per verl config
class (or per place verl meets the problem late), each yielding a problem id and the fields its row's
templates need. They take the composed config as a nested dict (`Composed.config`); the checks turn
the problems into findings. bench/config_agreement.py and
tests/test_config_differential.py compare `startup_problems` with verl's own validate_config.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields as dataclass_fields
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
class ConfigProblem:
    """One row of knowledge/config_problems.toml met by a config; `_finding` turns it into a
    Finding (a check's own verdict is checks.model.Problem)."""

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


# --- the problem table (knowledge/config_problems.toml) --------------------------------------------

@dataclass(frozen=True)
class Row:
    """One problem of knowledge/config_problems.toml: its words and keys; the predicate is code."""

    id: str
    title: str
    when: str  # "startup": verl's validate_config raises it; "late": minutes in, or never
    # the settings the finding names, and the other keys its predicate reads
    keys: tuple[str, ...]
    reads: tuple[str, ...]
    source: str
    # templates filled with the predicate's fields (str.format); a dict of variants where verl words it twice
    message: str | dict | None = None
    fix: str | dict = ""
    severity: str = "fail"
    verl_message: str | None = None  # verl's exact text where it differs from message ("" for a bare assert)

    def problem(self, fields: dict) -> ConfigProblem:
        variant = fields.get("variant")
        message = _variant(self.message, variant).format(**fields)
        fix = _variant(self.fix, variant).format(**fields)
        return ConfigProblem(self.id, message, fix, self.severity, list(self.keys), self.when == "startup",
                       self.verl_message)


_ROW_FIELDS = {f.name for f in dataclass_fields(Row)}


def _variant(text: str | dict | None, variant: str | None) -> str:
    return text[variant] if isinstance(text, dict) else (text or "")


def load_problem_table(doc: dict) -> dict[str, Row]:
    """The rows of a config_problems document, by id; a row without a title, a source or its keys
    is an error here, so no finding can go out untitled."""
    rows: dict[str, Row] = {}
    for table in doc.get("problem", []):
        pid = table.get("id") or "?"
        unknown = sorted(set(table) - _ROW_FIELDS)
        missing = [k for k in ("id", "title", "when", "keys", "source") if not table.get(k)]
        if unknown or missing:
            raise ValueError(f"config_problems.toml: {pid}: " + (f"unknown field {unknown[0]!r}" if unknown
                                                                 else f"missing {missing[0]!r}"))
        if table["when"] not in ("startup", "late") or pid in rows:
            raise ValueError(f"config_problems.toml: {pid}: when must be startup or late, ids unique")
        rows[pid] = Row(pid, table["title"], table["when"], tuple(table["keys"]), tuple(table.get("reads", ())),
                        table["source"], table.get("message"), table.get("fix", ""),
                        table.get("severity", "fail"), table.get("verl_message"))
    return rows


def _table() -> tuple[dict, dict[str, Row]]:
    from knowledge import load_toml

    doc = load_toml("config_problems.toml")
    return doc, load_problem_table(doc)


_DOC, PROBLEMS = _table()

# Every key `startup_problems` reads: the differential test builds its view of verl's config from these.
STARTUP_KEYS = list(dict.fromkeys(
    [k for r in PROBLEMS.values() if r.when == "startup" for k in r.keys + r.reads]
    + list(_DOC.get("startup", {}).get("reads", ()))))


# --- verl's start-up validation, one predicate per verl config class, in verl's order -------------
# A predicate yields (problem id, fields for the row's templates); the row words the problem.

class View:
    """The composed config, with what most predicates read looked up once per config."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.actor = get(cfg, "actor_rollout_ref.actor", {}) or {}
        self.rollout = get(cfg, "actor_rollout_ref.rollout", {}) or {}
        self.dynamic = bool(self.actor.get("use_dynamic_bsz"))
        self.per_node, self.nnodes = get(cfg, "trainer.n_gpus_per_node", 1), get(cfg, "trainer.nnodes", 1)
        fsdp = self.actor.get("fsdp_config") or {}
        self.replay_mode = ((fsdp.get("router_replay") or {}).get("mode")) if isinstance(fsdp, dict) else None

    def get(self, dotted: str, default: Any = None) -> Any:
        return get(self.cfg, dotted, default)

    @property
    def n_gpus(self) -> int:
        """verl's n_gpus in validate_config (an unset count is 0 there)."""
        return (self.per_node or 0) * (self.nnodes or 0)

    @property
    def world(self) -> tuple[int, int]:
        """(devices per node, nodes) as the workers read them (an unset count is 1)."""
        return self.per_node or 1, self.nnodes or 1


def validate_config_batch(v: View):
    """verl.utils.config.validate_config: the batch must split over the devices (megatron: over DP)."""
    if v.dynamic:
        return
    actor, n_gpus = v.actor, v.n_gpus
    if actor.get("strategy") == "megatron":
        meg = actor.get("megatron") or {}
        mp = (meg.get("tensor_model_parallel_size") or 1) * (meg.get("pipeline_model_parallel_size") or 1)
        cp = meg.get("context_parallel_size") or 1
        if n_gpus % (mp * cp):
            yield "config.megatron_parallel", {"n_gpus": n_gpus, "mp": mp, "cp": cp}
        minimal = (n_gpus // (mp * cp)) * (actor.get("ppo_micro_batch_size_per_gpu") or 0)
    else:
        minimal = n_gpus
    B, n = v.get("data.train_batch_size"), v.get("actor_rollout_ref.rollout.n")
    real = (B or 0) * (n or 0)
    if minimal and real % minimal:
        yield "config.train_batch_divisible", {"real": real, "minimal": minimal,
                                               "suggest": _round_up(B, minimal, n or 1)}


def fsdp_engine_config(v: View):
    """FSDPEngineConfig.__post_init__ (the nested dataclasses validate before the actor's own)."""
    actor = v.actor
    strategy = (actor.get("fsdp_config") or {}).get("strategy")
    if actor.get("strategy") != "megatron" and strategy not in FSDP_STRATEGIES:
        yield "config.fsdp_strategy", {"strategy": strategy, "choices": ", ".join(FSDP_STRATEGIES)}


def fsdp_optimizer_config(v: View):
    """FSDPOptimizerConfig.__post_init__ (a bare assert)."""
    kind = (v.actor.get("optim") or {}).get("lr_scheduler_type", "constant")
    if kind not in ("constant", "cosine"):
        yield "config.lr_scheduler", {"value": kind}


def engine_router_replay_config(v: View):
    """EngineRouterReplayConfig.__post_init__."""
    replay = v.replay_mode
    if replay is not None and replay not in ROUTER_REPLAY_MODES:
        yield "config.router_replay", {"mode": replay, "modes": list(ROUTER_REPLAY_MODES)}


def actor_config_post_init(v: View):
    """ActorConfig.__post_init__: one micro batch setting, a known loss_agg_mode."""
    actor = v.actor
    micro, micro_gpu = actor.get("ppo_micro_batch_size"), actor.get("ppo_micro_batch_size_per_gpu")
    if not v.dynamic and micro is not None and micro_gpu is not None:
        yield "config.actor_micro_both", {}
    elif not v.dynamic and micro is None and micro_gpu is None:
        yield "config.actor_micro_missing", {}
    if actor.get("loss_agg_mode") not in LOSS_AGG_MODES:
        yield "config.loss_agg_mode", {"mode": actor.get("loss_agg_mode"), "choices": ", ".join(LOSS_AGG_MODES)}


def actor_config_validate(v: View):
    """ActorConfig.validate(n_gpus, train_batch_size): the mini and micro batch against the batch."""
    actor, n_gpus = v.actor, v.n_gpus
    B, M, micro = v.get("data.train_batch_size"), actor.get("ppo_mini_batch_size"), actor.get("ppo_micro_batch_size")
    if v.dynamic or not isinstance(B, int) or not isinstance(M, int):
        return
    sp = actor.get("ulysses_sequence_parallel_size", 1) or 1
    if B < M:
        yield "config.mini_gt_train", {"B": B, "M": M}
    elif micro is not None and M % micro:
        yield "config.mini_micro_divisible", {"M": M, "micro": micro}
    elif micro is not None and micro * sp < n_gpus:
        yield "config.micro_lt_gpus", {"micro": micro, "sp": sp, "n_gpus": n_gpus}


def fsdp_actor_config_validate(v: View):
    """FSDPActorConfig.validate: sequence parallelism needs remove-padding."""
    actor = v.actor
    if actor.get("strategy") != "megatron" and (actor.get("ulysses_sequence_parallel_size", 1) or 1) > 1 \
            and not v.get("actor_rollout_ref.model.use_remove_padding", False):
        yield "config.sp_remove_padding", {}


def router_replay_rollout_correction(v: View):
    """verl.utils.config._validate_router_replay_config."""
    corr = v.get("algorithm.rollout_correction") or {}
    if v.replay_mode == "R2" and isinstance(corr, dict) and corr.get("bypass_mode"):
        yield "config.router_replay_bypass", {}


def validate_config_log_prob(v: View):
    """validate_config's check_mutually_exclusive for the ref (when KL needs it) and the rollout."""
    if v.dynamic:
        return
    sections = [("ref", "config.ref_log_prob_micro_missing", "config.ref_log_prob_micro_both"),
                ("rollout", "config.rollout_log_prob_micro_missing", "config.rollout_log_prob_micro_both")]
    for short, missing, both in sections[0 if need_reference_policy(v.cfg) else 1:]:
        node = v.get(f"actor_rollout_ref.{short}") or {}
        mbs, per_gpu = node.get("log_prob_micro_batch_size"), node.get("log_prob_micro_batch_size_per_gpu")
        if mbs is None and per_gpu is None:
            yield missing, {}
        elif mbs is not None and per_gpu is not None:
            yield both, {}


def validate_config_sampling(v: View):
    """validate_config: validation sampling needs a positive temperature."""
    rollout = v.get("actor_rollout_ref.rollout", {}) or {}
    if (rollout.get("val_kwargs") or {}).get("do_sample") and not (rollout.get("temperature", 1.0) > 0):
        yield "config.val_temperature", {}


def vllm_lora_rank(v: View):
    """validate_config -> vllm_rollout.utils.get_vllm_max_lora_rank (vLLM serves ranks up to 512)."""
    lora = v.get("actor_rollout_ref.model.lora") or {}
    rank = lora.get("rank", 0) or 0
    if rank <= 0:
        rank = v.get("actor_rollout_ref.model.lora_rank", 0) or 0
    if lora.get("merge"):
        rank = 0
    if rank > 512 and v.get("actor_rollout_ref.rollout.name") == "vllm":
        yield "config.lora_rank", {"rank": rank}


STARTUP_PREDICATES = (validate_config_batch, fsdp_engine_config, fsdp_optimizer_config, engine_router_replay_config,
                      actor_config_post_init, actor_config_validate, fsdp_actor_config_validate,
                      router_replay_rollout_correction, validate_config_log_prob, validate_config_sampling,
                      vllm_lora_rank)


def startup_problems(cfg: dict) -> list[ConfigProblem]:
    """What verl's validate_config rejects, with its messages. verl stops at the first; this lists
    them all, in the order verl would meet them."""
    view = View(cfg)
    return [PROBLEMS[pid].problem(fields) for pred in STARTUP_PREDICATES for pid, fields in pred(view)]


def _round_up(B, minimal, n) -> int:
    """The smallest train_batch_size >= B with B*n divisible by `minimal`."""
    b = max(int(B or 1), 1)
    while (b * n) % minimal:
        b += 1
    return b


# --- what verl checks late, or never: one predicate per place verl (or nothing) meets it ------------
# A predicate takes the config and the node's facts (devices, CPUs, flash-attn, NPU).

def rollout_parallel(v: View, facts: dict):
    """The rollout workers (engine_workers / vllm_async_server): TP*DP*PP must split the devices."""
    rollout = v.rollout
    per_node, nnodes = v.world
    world = per_node * nnodes
    tp = rollout.get("tensor_model_parallel_size", 1) or 1
    infer = tp * (rollout.get("data_parallel_size", 1) or 1) * (rollout.get("pipeline_model_parallel_size", 1) or 1)
    fields = {"world": world, "infer": infer, "per_node": per_node, "tp": tp, "suggest": _divisor(per_node, tp)}
    if world % infer:
        yield "config.rollout_tp", {**fields, "variant": "world"}
    elif tp > per_node or per_node % tp:
        yield "config.rollout_tp", {**fields, "variant": "per_node"}


def actor_update_batches(v: View, facts: dict):
    """The actor's first update step: mini batch over DP ranks, then the per-device part over micro batches."""
    actor, n = v.actor, v.rollout.get("n") or 1
    B, M, micro = v.get("data.train_batch_size"), actor.get("ppo_mini_batch_size"), actor.get("ppo_micro_batch_size_per_gpu")
    per_node, nnodes = v.world
    dp = max(per_node * nnodes // (actor.get("ulysses_sequence_parallel_size", 1) or 1), 1)
    if actor.get("use_dynamic_bsz") or not isinstance(M, int) or not isinstance(B, int) or B < M:
        return
    mini = M * n
    if mini % dp:
        yield "config.mini_batch_dp", {"mini": mini, "dp": dp, "M": M, "n": n}
    elif isinstance(micro, int) and micro > 0 and (mini // dp) % micro:
        local = mini // dp
        yield "config.micro_split", {"M": M, "n": n, "dp": dp, "local": local, "micro": micro,
                                     "suggest": _divisor(local, micro)}


def grpo_group(v: View, facts: dict):
    """Group advantage estimators (GRPO, RLOO, ...) need two or more responses per prompt."""
    adv, n = v.get("algorithm.adv_estimator"), v.rollout.get("n") or 1
    if adv in GROUP_ADV and n < 2:
        yield "config.grpo_n", {"adv": adv, "n": n}


def rollout_name(v: View, facts: dict):
    """RolloutConfig.name is ??? in verl's yaml: read when the rollout worker starts."""
    if v.rollout.get("name") in (None, "???"):
        yield "config.rollout_name", {}


def resource_pool(v: View, facts: dict):
    """RayResourcePool: the devices Ray sees on the node against trainer.n_gpus_per_node."""
    count, limit = facts.get("devices_per_node"), facts.get("devices_limit")
    per_node, nnodes = v.world
    if count is not None and count < per_node:
        fields = {"per_node": per_node, "count": count, "available": count * nnodes, "world": per_node * nnodes}
        if limit:
            fields.update(variant="var", var=limit[0], value=limit[1])
        yield "config.devices", {"variant": "count", **fields}


def checkpoint_resume(v: View, facts: dict):
    """resume_mode=auto resumes from checkpoints that save_freq=-1 never writes."""
    if v.get("trainer.save_freq", -1) in (-1, 0, None) and v.get("trainer.resume_mode") == "auto":
        yield "config.resume_nothing", {}


def ray_cpus(cfg: dict, cpus: int | None, cpus_from: str = "") -> list[ConfigProblem]:
    """TransferQueue's storage actors against the Ray CPUs: a hang with no error, worded here."""
    out: list[ConfigProblem] = []
    if cpus is not None and get(cfg, "trainer.use_v1", True):
        units = get(cfg, "transfer_queue.backend.SimpleStorage.num_data_storage_units", 0) or 0
        # verl 0.9.1 main_ppo.py (TaskRunner num_cpus=1) and transfer_queue: with 2 Ray CPUs the TaskRunner and ONE storage unit start and
        # tq.init waits forever; with 16 all start. So each unit takes a CPU beside the TaskRunner's.
        need = units + 1
        have = get(cfg, "ray_kwargs.ray_init.num_cpus") or cpus
        where = "ray_kwargs.ray_init.num_cpus" if get(cfg, "ray_kwargs.ray_init.num_cpus") else cpus_from
        if units and have < need:
            out.append(ConfigProblem("config.ray_cpus",
                               f"Ray has {have} CPUs{f' ({where})' if where else ''} but TransferQueue starts {units} storage actors (1 CPU each) "
                               f"beside the TaskRunner: tq.init waits for them forever, with no error",
                               f"ray_kwargs.ray_init.num_cpus={need} (or "
                               f"transfer_queue.backend.SimpleStorage.num_data_storage_units={max(have - 1, 1)})",
                               keys=["ray_kwargs.ray_init.num_cpus"]))
    return out


def flash_attention(v: View, facts: dict):
    """The model is built with flash_attention_2 unless override_config names another (not on NPU)."""
    attn = (v.get("actor_rollout_ref.model.override_config") or {}).get("attn_implementation")
    if facts.get("flash_attn") is False and not facts.get("npu") and attn in (None, "flash_attention_2"):
        yield "config.flash_attn", {}


def _ray_cpus(v: View, facts: dict) -> list[ConfigProblem]:
    return ray_cpus(v.cfg, facts.get("cpus"), facts.get("cpus_from", ""))


LATE_PREDICATES = (rollout_parallel, actor_update_batches, grpo_group, rollout_name, resource_pool,
                   checkpoint_resume, _ray_cpus, flash_attention)


def late_problems(cfg: dict, devices_per_node: int | None = None, cpus: int | None = None,
                  flash_attn: bool | None = None, npu: bool = False,
                  devices_limit: tuple[str, str] | None = None, cpus_from: str = "") -> list[ConfigProblem]:
    facts = {"devices_per_node": devices_per_node, "cpus": cpus, "flash_attn": flash_attn, "npu": npu,
             "devices_limit": devices_limit, "cpus_from": cpus_from}
    out: list[ConfigProblem] = []
    view = View(cfg)
    for pred in LATE_PREDICATES:
        for found in pred(view, facts):
            out.append(found if isinstance(found, ConfigProblem) else PROBLEMS[found[0]].problem(found[1]))
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
    """What it checks: every override of the launch, composed with Hydra's own override parser against
    verl's config (the target interpreter's verl, else the verl 0.9.1 snapshot in knowledge/verl/):
    a key verl's config does not have (with the key most likely meant), a new key without `+`, a `+`
    on a key that exists; keys the detected verl ignores or removed (knowledge/verl_keys.toml, each
    with its source); values verl silently rewrites.

    How the job fails without it: Hydra stops main_ppo before anything starts:
    `Could not override 'trainer.n_gpu_per_node'. ... Key 'n_gpu_per_node' is not in struct`
    (https://hydra.cc/docs/advanced/override_grammar/basic/). An ignored key is worse: verl 0.9 no
    longer reads the top-level custom_reward_function.* of older scripts (the seed article's
    section 4.3), so the run goes on with the default scorer and no warning.

    Fix: the finding writes the override that works: the key it most likely meant, `+key=value` for
    a new key, the key without `+`, or the replacement key (reward.custom_reward_function.path=...).

    After the fact: hydra-override-unknown-key, verl-reward-data-source-unknown"""
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
    """What it checks: verl's start-up validation, on the composed config: `validate_config`
    (verl/utils/config.py) and the config dataclasses it builds (FSDPEngineConfig,
    FSDPOptimizerConfig, the router replay config, ActorConfig and FSDPActorConfig), reproduced in
    verl's order and with verl's words (knowledge/config_problems.toml, one row per problem with its
    verl 0.9.1 file:line), all problems at once where verl stops at the first; and verl's own
    validate_config, run in the config probe when verl is installed. bench/config_agreement.py
    measures the agreement with verl's own.

    How the job fails without it: main_ppo raises after its imports, before the workers start, one
    problem per launch: `AssertionError: real_train_batch_size (30) must be divisible by minimal
    possible batch size (8)`, `ValueError: [actor] Please set at least one of
    'actor.ppo_micro_batch_size' or 'actor.ppo_micro_batch_size_per_gpu' ...`; fixing one shows the next.

    Fix: each finding names the setting and a value that passes (e.g. a data.train_batch_size that
    makes train_batch_size * rollout.n a multiple of the device count); `doctor plan` shows the
    batch arithmetic behind them.

    After the fact: verl-batch-not-divisible, verl-actor-micro-batch-both-set, verl-actor-micro-batch-unset,
    verl-log-prob-micro-batch-unset, verl-ref-log-prob-micro-batch-unset, verl-mini-batch-exceeds-train-batch,
    verl-invalid-loss-agg-mode, verl-sp-needs-remove-padding, verl-val-temperature-zero,
    verl-optimizer-config-invalid, verl-config-instantiation-failed"""
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


def _finding(p: ConfigProblem, sess) -> Finding:
    when = "verl rejects this at start-up" if p.verl_checks_at_startup else "verl finds this only after launch"
    return Finding(p.id, "config", p.severity, PROBLEMS[p.id].title,
                   f"{p.message}\n({when}; config from {sess.composed.source})", p.fix, {"settings": p.keys})


@check("config.runtime", "config", "Settings verl checks late or never", needs=("launch", "config"), scope="launch")
def check_runtime(ctx):
    """What it checks: settings verl meets only minutes into the run, or never (knowledge/config_problems.toml,
    rows with when = "late"): rollout tensor x data x pipeline parallel sizes against the devices per
    node; the mini batch over the data-parallel ranks and each rank's share over the micro batch;
    a group advantage estimator (GRPO, RLOO, ...) with rollout.n=1; rollout.name unset;
    trainer.n_gpus_per_node above the devices Ray will count on this node (narrowed by
    ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES); resume_mode=auto with save_freq=-1; Ray CPUs
    against TransferQueue's storage actors; flash_attention_2 with flash-attn absent (not on NPU).

    How the job fails without it: after Ray, the models and vLLM have started: `Total available
    GPUs 8 is less than total desired GPUs 16` (verl/single_controller/ray/base.py), `rollout
    world_size: 8 is not divisible by infer_world_size: 3`, `Got mini_batch_size=... and
    self.engine.get_data_parallel_size()=...` at the first update, `FlashAttention2 has been toggled
    on, but it cannot be used ...`. Or silently: with n=1 every advantage is 0 and the policy never
    learns; tq.init waits forever for storage actors Ray has no CPU for; a restart begins at step 0.

    Fix: the finding's override (a tensor_model_parallel_size that divides the devices per node, a
    micro batch that divides each rank's share, rollout.n=4, the device count Ray has,
    trainer.save_freq=20, ray_kwargs.ray_init.num_cpus, attn_implementation=sdpa).

    After the fact: verl-not-enough-gpus, verl-rollout-name-missing, verl-flash-attn-missing,
    ray-resources-unschedulable"""
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
