"""The reference trainer's parts, each against the real thing: verl's own config and scorers,
transformers' generate(), the tiny model and tokenizer the project builds, checkpoints on disk."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer import checkpoint
from trainer.config import KEYS, ConfigError, parse_bytes, config_from_overrides, validate
from trainer.defaults import embedded_default
from trainer.tiny import ensure_tiny

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)  # a shared 2-core CI box: oversubscribed OpenMP threads cost 20x
    return ensure_tiny()


# -- configuration ---------------------------------------------------------------------------------

def test_defaults_are_verls(tmp_path):
    """Every verl key the trainer knows has verl 0.9.1's own default (from verl's generated config)."""
    import importlib.util

    from omegaconf import OmegaConf

    spec = importlib.util.find_spec("verl")  # its config files only: importing verl takes many seconds
    if spec is None:
        pytest.skip("verl is not installed")
    conf = Path(spec.submodule_search_locations[0]) / "trainer/config"
    sources = [OmegaConf.load(conf / "_generated_ppo_trainer.yaml"), OmegaConf.load(conf / "legacy_reward_impl.yaml"),
               OmegaConf.create({"data": OmegaConf.load(conf / "data/legacy_data.yaml")})]

    def raw(key):
        parent, leaf = key.rsplit(".", 1)
        for source in sources:
            node = OmegaConf.select(source, parent, default=None)
            if node is not None and leaf in node.keys():
                return OmegaConf.to_container(node, resolve=False)[leaf]
        raise AssertionError(f"{key} is not a verl 0.9.1 key")

    compared = 0
    for key, spec in KEYS.items():
        if not spec.verl:
            continue
        value = raw(key)
        if isinstance(value, str) and "${" in value or value == "???":
            continue  # interpolated in verl (resolved the same way here) or mandatory
        assert value == spec.default, f"{key}: verl {value!r}, ours {spec.default!r}"
        compared += 1
    assert compared > 60


def test_seed_article_overrides_are_all_accepted(tmp_path):
    """The seed article's launch script, read as bash would read it, is accepted key for key."""
    from launch.script import parse_launch

    from tests import seed_launch

    script = seed_launch.write_script(tmp_path / "run_grpo.sh")
    words = parse_launch(["bash", str(script)], cwd=tmp_path).raw_overrides
    cfg, notices = config_from_overrides(words)
    assert len(words) > 35
    assert cfg["actor_rollout_ref.actor.kl_loss_type"] == "low_var_kl" and cfg["trainer.nnodes"] == 2
    assert cfg["trainer.logger"] == ["console"] and cfg["actor_rollout_ref.rollout.n"] == 4
    assert any(n.startswith("actor_rollout_ref.rollout.name") for n in notices)  # vllm: accepted, no effect
    plan = validate(cfg)
    # The seed article's arithmetic: 128 prompts x 4 = 512 samples, mini 32 x 4 over 16 devices = 8 per device.
    assert (plan.samples_per_step, plan.updates_per_step, plan.local_mini, plan.accumulation) == (512, 4, 8, 2)


def test_unknown_key_is_refused_by_name_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "trainer.main_grpo", "algorithm.adv_estimator=grpo",
                           "trainer.n_gpu_per_node=8"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "'trainer.n_gpu_per_node'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("override, named", [
    ("algorithm.adv_estimator=gae", "algorithm.adv_estimator"),
    ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3", "ppo_micro_batch_size_per_gpu=3"),
    ("actor_rollout_ref.actor.ppo_mini_batch_size=16", "larger than data.train_batch_size"),
    ("actor_rollout_ref.actor.loss_agg_mode=token-avg", "loss_agg_mode"),
    ("data.train_batch_size=lots", "data.train_batch_size"),
    ("trainer.worker_memory_limit=plenty", "worker_memory_limit"),
    ("actor_rollout_ref.actor.use_kl_loss=maybe", "use_kl_loss"),
])
def test_inconsistent_settings_name_the_key(tiny, override, named):
    with pytest.raises(ConfigError, match=named.replace("[", r"\[")):
        cfg, _ = config_from_overrides(embedded_default() + [override])
        validate(cfg)


def test_sizes_and_interpolation():
    assert parse_bytes("2GiB") == 2 * 1024 ** 3 and parse_bytes("512M") == 512 * 1024 ** 2
    assert parse_bytes(1000) == 1000 and parse_bytes(None) is None
    cfg, _ = config_from_overrides(["trainer.project_name=p", "trainer.experiment_name=e"])
    assert cfg["trainer.default_local_dir"] == "checkpoints/p/e"


# -- tiny model, rollout, reward -------------------------------------------------------------------

def test_tiny_build_is_deterministic_and_tokenizer_consistent(tiny, tmp_path, monkeypatch):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    monkeypatch.setenv("VERL_DOCTOR_CACHE", str(tmp_path))
    again = ensure_tiny()
    assert again != tiny
    assert (again / "model/tokenizer.json").read_bytes() == (tiny / "model/tokenizer.json").read_bytes()
    a = torch.load if False else None  # noqa: F841 - weights compared through safetensors below
    from safetensors.torch import load_file

    wa, wb = load_file(tiny / "model/model.safetensors"), load_file(again / "model/model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    tok = AutoTokenizer.from_pretrained(tiny / "model")
    raw = Tokenizer.from_file(str(tiny / "model/tokenizer.json"))
    text = tok.apply_chat_template([{"role": "user", "content": "Name one digit bigger than 4."}],
                                   add_generation_prompt=True, tokenize=False)
    assert tok(text)["input_ids"] == raw.encode(text).ids
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id == 0


def _prompts(tiny, n=3):
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny / "model")
    rows = pq.read_table(tiny / "data/train.parquet").to_pylist()[:n]
    assert {"data_source", "prompt", "ability", "reward_model", "extra_info"} <= rows[0].keys()
    texts = [tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) for r in rows]
    return tok, [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def test_greedy_rollout_matches_transformers_generate(tiny):
    from transformers import AutoModelForCausalLM, GenerationConfig

    from trainer.rollout import generate_sequences

    tok, prompts = _prompts(tiny)
    prompts[1] = prompts[1][3:]  # unequal lengths: left padding is exercised
    model = AutoModelForCausalLM.from_pretrained(tiny / "model").eval()
    ours = generate_sequences(model, prompts, max_new_tokens=12, eos_ids={2}, pad_id=0,
                              generator=torch.Generator().manual_seed(0), do_sample=False)
    tok.padding_side = "left"
    enc = tok.pad({"input_ids": prompts}, return_tensors="pt")
    theirs = model.generate(**enc, generation_config=GenerationConfig(
        do_sample=False, max_new_tokens=12, eos_token_id=[2], pad_token_id=0))
    theirs = theirs[:, enc["input_ids"].shape[1]:]
    for i in range(len(prompts)):
        n = int(ours.response_mask[i].sum())
        assert ours.responses[i, :n].tolist() == theirs[i, :n].tolist()


def test_sampling_is_seeded_and_stops_at_eos(tiny):
    from transformers import AutoModelForCausalLM

    from trainer.rollout import generate_sequences

    _, prompts = _prompts(tiny, 4)
    model = AutoModelForCausalLM.from_pretrained(tiny / "model").eval()
    runs = [generate_sequences(model, prompts * 8, max_new_tokens=40, eos_ids={2}, pad_id=0,
                               generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(runs[0].responses, runs[1].responses)
    r = runs[0]
    lengths = r.response_mask.sum(-1)
    ended = [i for i in range(len(lengths)) if r.responses[i, lengths[i] - 1] == 2]
    assert ended, "some of 32 samples of 40 tokens end with EOS"
    for i in ended:  # the mask keeps the EOS and nothing after it
        assert r.response_mask[i, lengths[i]:].sum() == 0 and (r.responses[i, lengths[i]:] == 0).all()
    assert int(lengths.max()) <= 40


def _random_decoder(kind: str, **extra):
    """A small randomly initialised decoder of another shape than the tiny one (no download)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    torch.manual_seed(0)
    common = dict(vocab_size=320, hidden_size=96, intermediate_size=160, num_hidden_layers=3,
                  num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256, **extra)
    cfg = Qwen2Config(**common) if kind == "qwen2" else LlamaConfig(**common, attention_bias=False)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    for p in model.parameters():  # visible biases and norms, so a wrong wiring cannot hide
        torch.nn.init.normal_(p, std=0.3)
    return model


@pytest.mark.parametrize("kind", ["tiny", "tiny-bf16", "qwen2", "llama"])
def test_static_decoder_logits_match_the_models_forward(tiny, kind):
    """Prefill and every decode step give the logits the model's own forward gives on the whole sequence
    (in bf16, as on an accelerator, within bf16's resolution)."""
    from transformers import AutoModelForCausalLM

    from trainer import decode
    from trainer.rollout import left_pad, position_ids

    _, prompts = _prompts(tiny, 4)
    prompts[1], prompts[3] = prompts[1][5:], prompts[3][9:]  # unequal lengths: left padding
    tolerance = 2e-2 if kind.endswith("bf16") else 1e-5
    if kind.startswith("tiny"):
        dtype = torch.bfloat16 if kind.endswith("bf16") else torch.float32
        model = AutoModelForCausalLM.from_pretrained(tiny / "model", dtype=dtype).eval()
    else:
        model = _random_decoder(kind)
    assert decode.supports(model)
    ids, mask = left_pad(prompts, 0, "cpu")
    positions = position_ids(mask)
    steps = 6
    decoder = decode.StaticDecoder(model, len(prompts), ids.shape[1], steps)
    with torch.no_grad():
        logits = decoder.prefill(ids, mask, positions)
        for t in range(steps):
            full = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask)).logits[:, -1].float()
            assert (logits - full).abs().max().item() <= tolerance, f"step {t}"
            token = torch.multinomial(full.softmax(-1), 1, generator=torch.Generator().manual_seed(t)).squeeze(-1)
            ids = torch.cat([ids, token[:, None]], dim=1)
            mask = torch.cat([mask, torch.ones_like(token)[:, None]], dim=1)
            logits = decoder.step(token, position_ids(mask)[:, -1:])


@pytest.mark.parametrize("uncovered", [
    {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}},
    {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0},
], ids=["dynamic-rope", "sliding-window"])
def test_models_the_static_decoder_does_not_cover_use_transformers_forward(tiny, uncovered):
    from transformers import GenerationConfig

    from trainer import decode
    from trainer.rollout import generate_sequences

    model = _random_decoder("qwen2", **uncovered)
    assert not decode.supports(model)
    _, prompts = _prompts(tiny, 3)
    prompts[0] = prompts[0][4:]
    ours = generate_sequences(model, prompts, max_new_tokens=8, eos_ids={2}, pad_id=0,
                              generator=torch.Generator().manual_seed(0), do_sample=False)
    width = max(len(p) for p in prompts)
    theirs = model.generate(input_ids=ours.prompts, attention_mask=ours.prompt_mask, generation_config=GenerationConfig(
        do_sample=False, max_new_tokens=8, eos_token_id=[2], pad_token_id=0))[:, width:]
    for i in range(len(prompts)):
        n = int(ours.response_mask[i].sum())
        assert ours.responses[i, :n].tolist() == theirs[i, :n].tolist()


def test_sampler_draws_each_token_with_its_probability_and_never_a_cut_one():
    from trainer.rollout import _filter_logits, sample

    logits = torch.tensor([2.0, 0.5, -1.0, 1.5, 0.0, 3.0, -2.0, 1.0])
    probs = _filter_logits(logits[None], top_k=5, top_p=1.0).softmax(-1)[0]
    assert (probs == 0).sum() == 3  # top-k cut three tokens
    draws = sample(probs.expand(40_000, -1), torch.Generator().manual_seed(3))
    freq = torch.bincount(draws, minlength=len(probs)).double() / len(draws)
    assert freq[probs == 0].sum() == 0
    assert (freq - probs.double()).abs().max() < 0.01  # 4 standard errors at 40k draws


def test_rewards_use_verls_scorers_and_custom_files(tmp_path):
    from trainer.reward import RewardError, RewardFunction

    pytest.importorskip("verl")
    default = RewardFunction()
    assert default("openai/gsm8k", "so the answer is #### 72", "72") == (1.0, 1.0)  # verl's gsm8k scorer
    assert default("openai/gsm8k", "72", "72")[0] == 0.0  # strict format, as verl scores it
    assert default("verl_doctor/digits", "9 9 1", "5")[0] == pytest.approx(2 / 3)
    src = tmp_path / "my_reward.py"
    src.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kw):\n"
                   "    return {'score': float(len(solution_str)) * kw.get('scale', 1), 'acc': 1.0}\n")
    custom = RewardFunction(str(src), "compute_score", {"scale": 0.5})
    assert custom("anything", "abcd", None) == (2.0, 1.0)
    with pytest.raises(RewardError, match="not found"):
        RewardFunction(str(tmp_path / "missing.py"))
    with pytest.raises(RewardError, match="'score_fn' not found"):
        RewardFunction(str(src), "score_fn")


# -- checkpoints -----------------------------------------------------------------------------------

def test_checkpoint_roundtrip_marker_and_pruning(tmp_path):
    model = {"w": torch.arange(6.0)}
    for step in (2, 4, 6):
        checkpoint.save(tmp_path, step, model, {"state": step}, [{"rng": torch.tensor([step])}],
                        {"global_step": step}, keep=2)
    assert checkpoint.latest(tmp_path) == 6
    assert sorted(p.name for p in tmp_path.glob("global_step_*")) == ["global_step_4", "global_step_6"]
    state = checkpoint.load(tmp_path / "global_step_6")
    assert torch.equal(state["model"]["w"], model["w"]) and state["data"]["global_step"] == 6
    (tmp_path / checkpoint.MARKER).write_text("8\n")  # a marker without its folder is not trusted
    assert checkpoint.latest(tmp_path) is None
