"""Redaction hides only the secret part: paths, versions, hashes, node ids and the names of
variables are evidence (tests/data/redact_benign.txt), and come out unchanged, while the secrets
planted beside them stay hidden."""
from __future__ import annotations

from pathlib import Path

import pytest

from matching.redact import REDACTED, redact_mapping, redact_text

BENIGN = [ln for ln in (Path(__file__).parent / "data" / "redact_benign.txt").read_text().splitlines()
          if ln.strip() and not ln.startswith("#")]
PLANTED = {"WANDB_API_KEY": "3f9a1c7e5b2d4f6a8c0e1b3d5f7a9c2e4b6d8f01",
           "HF_TOKEN": "hf_QxTzVbNmLkJhGfDsAaPoIuYtReWq12",
           "MY_SERVICE_SECRET": "Zr8Kq2Lm5Np9Xw3Vb7Cd1Fg6Hj4Ty0Ue"}


def test_the_corpus_is_large_enough_to_mean_something():
    assert len(BENIGN) >= 50


@pytest.mark.parametrize("text", BENIGN)
def test_benign_diagnostic_string_is_unchanged(text):
    assert redact_text(text, env=PLANTED) == text


@pytest.mark.parametrize("text", BENIGN)
def test_benign_string_is_unchanged_as_a_json_value_too(text):
    assert redact_mapping({"message": text, "evidence": {"line": text}}, env=PLANTED) == \
        {"message": text, "evidence": {"line": text}}


@pytest.mark.parametrize("name,value", sorted(PLANTED.items()))
def test_a_secret_beside_the_evidence_loses_its_value_and_keeps_its_name(name, value):
    line = f"export {name}={value}; ASCEND_HOME_PATH=/usr/local/Ascend/ascend-toolkit/8.3.RC1"
    out = redact_text(line, env=PLANTED)
    assert value not in out
    assert out == f"export {name}={REDACTED}; ASCEND_HOME_PATH=/usr/local/Ascend/ascend-toolkit/8.3.RC1"


def test_an_unnamed_key_shaped_value_is_still_hidden():
    key = "AbCdEf0123456789GhIjKl0123456789MnOp"
    assert redact_text(f"MY_VAR={key}", env={}) == f"MY_VAR={REDACTED}"
    assert key not in redact_text(f"token={key} in /usr/local/Ascend/driver", env={})
