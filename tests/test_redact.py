"""Redaction and anonymization on the texts doctor really handles: env dumps, launch scripts,
verl config keys and log lines."""
from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from matching.redact import (REDACTED, Anonymizer, Redactor, is_secret_name, redact_mapping,
                              redact_text, remember_secrets)

HF = "hf_PlantedHuggingFaceToken0123456789ab"
WANDB = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
PASSWORD = "Tr0ub4dor-and-3"


@pytest.mark.parametrize("name", [
    "WANDB_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MLFLOW_TRACKING_PASSWORD",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET",
    "OBS_SK", "RAY_AUTH_TOKEN", "db_password", "api-key", "accessKeyId", "clientSecret",
    "MY_SERVICE_CREDENTIALS", "Authorization",
])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    # verl's own knobs and dataset columns: their values are the diagnosis, not a secret
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu", "actor_rollout_ref.rollout.max_num_batched_tokens",
    "data.prompt_key", "data.reward_fn_key", "data.max_token_len_per_gpu", "TOKENIZERS_PARALLELISM",
    "RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "KeyError", "trainer.logger", "MLFLOW_TRACKING_URI",
    "HCCL_SOCKET_IFNAME", "PWD", "bypass_mode", "pad_token_id",
])
def test_harmless_names(name):
    assert not is_secret_name(name)


def test_verl_config_keys_are_not_secret():
    """No key of verl's own trainer config looks secret (its values are what we diagnose)."""
    import importlib.util
    from pathlib import Path

    import yaml

    verl = importlib.util.find_spec("verl")  # located, not imported: importing verl takes seconds
    assert verl is not None and verl.origin
    cfg = yaml.safe_load((Path(verl.origin).parent / "trainer/config/_generated_ppo_trainer.yaml").read_text())

    def keys(d, prefix=""):
        for k, v in d.items():
            full = f"{prefix}.{k}" if prefix else str(k)
            yield full
            if isinstance(v, dict):
                yield from keys(v, full)

    flagged = [k for k in keys(cfg) if is_secret_name(k)]
    assert flagged == []


def test_env_values_vanish_from_text_wherever_they_appear():
    env = {"HF_TOKEN": HF, "WANDB_API_KEY": WANDB, "DB_PASSWORD": PASSWORD, "PATH": "/usr/bin"}
    log = (f"loading with token {HF}\n"
           f"wandb: using key={WANDB[:39]}{WANDB[39]} for run\n"
           f"pasted {PASSWORD} by mistake; PATH=/usr/bin\n")
    out = redact_text(log, env)
    for secret in (HF, WANDB, PASSWORD):
        assert secret not in out
    assert "PATH=/usr/bin" in out  # harmless content survives
    assert out.count(REDACTED) >= 3


@pytest.mark.parametrize("line, secret, keep", [
    ("export HF_TOKEN=abc123def", "abc123def", "export HF_TOKEN="),
    ("MLFLOW_TRACKING_URI=http://bob:s3cr3tPw@mlflow.internal:5000/x", "s3cr3tPw", "mlflow.internal:5000"),
    ("Authorization: Bearer eyAbc.def-ghi123456789", "eyAbc.def-ghi123456789", "Authorization"),
    ("{'api_key': 'zz-top-9', \"password\": \"two words\"}", "zz-top-9", "api_key"),
    ("{'api_key': 'zz-top-9', \"password\": \"two words\"}", "two words", "password"),
    ("python train.py --token abcdef12 --lr 1e-5", "abcdef12", "--lr 1e-5"),
    ("aws configure set AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "aws configure"),
    ("git clone https://ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@github.com/x/y",
     "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "github.com/x/y"),
    ("wandb login 9f8e7d6c5b4a39281706f5e4d3c2b1a098765432", "9f8e7d6c5b4a39281706f5e4d3c2b1a098765432", "wandb login"),
    ("key material XyZ12345678901234567890abcdefghijKL end", "XyZ12345678901234567890abcdefghijKL", "end"),
])
def test_secrets_inside_log_lines(line, secret, keep):
    out = redact_text(line, env={})
    assert secret not in out
    assert keep in out


@pytest.mark.parametrize("line", [
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "KeyError: 'actor_rollout_ref'",
    "Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.",
    "ppo_max_token_len_per_gpu: 16384, data.prompt_key=prompt",
    "step:3 - actor/pg_loss:0.012 - response_length/mean:128.0",
    "commit 4b825dc642cb6eb9a060e54bf8d69288fbee4904",
    "    full_key: actor_rollout_ref.actor.ppo_micro_batch_size",
    "    out = model(input_ids=token[:, None], past_key_values=cache, use_cache=True)",
])
def test_diagnostic_lines_are_untouched(line):
    assert redact_text(line, env={}) == line


def test_mapping_redacts_secret_keys_and_hunts_their_values_elsewhere():
    doc = {"env": {"HF_TOKEN": HF, "HOME": "/root"},
           "config": {"trainer.logger": ["console", "wandb"], "data.prompt_key": "prompt"},
           "lines": [f"the token {HF} was printed"], "auth": True, "n": 3}
    out = redact_mapping(doc, env={})
    assert out["env"]["HF_TOKEN"] == REDACTED and out["env"]["HOME"] == "/root"
    assert out["config"] == doc["config"]
    assert HF not in out["lines"][0]
    assert out["auth"] is True and out["n"] == 3
    assert HF in doc["env"]["HF_TOKEN"]  # the input is not modified


def test_everything_under_a_secret_key_is_redacted():
    doc = {"+trainer.wandb_api_key": {"value": "nested-V4lue-1", "default": None},
           "credentials": ["list-V4lue-22", 7], "other": "mentions nested-V4lue-1"}
    out = redact_mapping(doc, env={})
    assert out["+trainer.wandb_api_key"] == {"value": REDACTED, "default": None}
    assert out["credentials"] == [REDACTED, REDACTED]
    assert "nested-V4lue-1" not in out["other"]


def test_remembered_secrets_reach_every_later_redaction(monkeypatch):
    planted = "script-only-S3cret-77"
    assert planted in redact_text(f"value {planted}")
    remember_secrets({"OSS_ACCESS_KEY_SECRET": planted})
    assert planted not in redact_text(f"value {planted}")
    assert planted not in str(redact_mapping({"x": [f"a {planted} b"]}))


def test_default_uses_the_process_environment(monkeypatch):
    monkeypatch.setenv("SOME_SERVICE_TOKEN", "Zq9-process-env-token")
    assert "Zq9-process-env-token" not in redact_text("got Zq9-process-env-token back")


@settings(max_examples=60, deadline=None)
@given(secret=st.text(alphabet=string.ascii_letters + string.digits + "-_.+/=!@%", min_size=8, max_size=48),
       before=st.text(max_size=40), after=st.text(max_size=40))
def test_any_env_secret_never_survives(secret, before, after):
    redactor = Redactor({"WANDB_API_KEY": secret})
    assert secret not in redactor.text(before + secret + after)
    filler = "step:1 - actor/pg_loss:0.1\n" * 1000  # the large-text path (RE2 prefilter)
    assert secret not in redactor.text(filler + before + secret + after + filler)


def test_anonymizer_is_stable_and_keeps_nodes_apart():
    a = Anonymizer(hosts=["node-a.corp.example", "node-b"], users=["alice"])
    text = ("node-a.corp.example 10.1.2.3 talks to node-b at 10.1.2.4; node-a again 10.1.2.3; "
            "loopback 127.0.1.1; /home/bob/run.sh by alice; fe80::1:2 at 12:34:56")
    out = a.text(text)
    for planted in ("node-a", "node-b", "corp.example", "10.1.2.3", "10.1.2.4", "alice", "bob", "fe80::1:2"):
        assert planted not in out
    assert out.count("host-1") == 2 and "host-2" in out
    assert out.count("ip-1") == 2 and "ip-2" in out
    assert "127.0.1.1" in out and "12:34:56" in out  # a diagnosis, and a time, stay
    assert "/home/user-" in out
    assert a.text("node-b") == "host-2"  # same value, same placeholder, later too
    assert a.mapping({"node-a": {"ip": "10.1.2.4"}}) == {"host-1": {"ip": "ip-2"}}


def test_anonymizer_for_this_machine_hides_local_identity():
    import socket

    a = Anonymizer.for_this_machine({"USER": "carol", "HOME": "/home/carol"})
    out = a.text(f"{socket.gethostname()} ran by carol in /home/carol/work")
    assert socket.gethostname() not in out and "carol" not in out


def test_large_text_prefilter_gives_the_same_result():
    """Above LARGE_TEXT, RE2 picks the lines to redact: the result equals redacting everything."""
    from matching import redact

    lines = []
    for i in range(4000):
        lines.append(f"(WorkerDict pid={i}, ip=10.0.0.{i % 9}) step:{i} - actor/pg_loss:0.{i} - mask: {i}")
        if i % 97 == 0:
            lines.append(f"Authorization: Bearer Zm9vYmFyLWJl{i}YXJlci10b2tlbi0xMjM0NTY3 and {HF}")
        if i % 131 == 0:
            lines.append(f"export WANDB_API_KEY={WANDB} # https://u:p4ss{i}@host/x")
    text = "\n".join(lines)
    assert len(text) > redact.LARGE_TEXT
    r = Redactor({"HF_TOKEN": HF})
    fast = r.text(text)
    assert fast == r._text(text)
    assert HF not in fast and WANDB not in fast and "p4ss" not in fast


def test_paths_are_not_mistaken_for_keys():
    from matching.redact import redact_text

    path = "/data/Shared2024/projects/RunAlpha7/vllm"
    assert redact_text(f"mv {path} /tmp/x") == f"mv {path} /tmp/x"
    home = "~/Work2024/MyProjectAlpha/config/run12345.yaml"
    assert redact_text(f"see {home}") == f"see {home}"
    # a base64-style cloud secret with slashes is still a key
    assert "K7MDENG" not in redact_text("secret wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY1 end")


def test_a_bare_key_field_is_a_config_key_name_not_a_secret():
    from matching.redact import is_secret_name, redact_mapping

    assert not is_secret_name("key")
    assert is_secret_name("api_key") and is_secret_name("wandb.key")
    assert redact_mapping({"key": "data.train_files"}) == {"key": "data.train_files"}
