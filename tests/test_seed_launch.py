"""tests/seed_launch.py is the seed article's launch, word for word: compared with the article itself
where it lies beside the clone (../shared/seed), so the data the other tests use cannot drift."""
from __future__ import annotations

import pytest

from launch.script import parse_launch
from tests import seed_launch
from tests.conftest import SHARED

ARTICLE = SHARED / "seed" / "000_2612502b60985506.txt"


@pytest.mark.skipif(not ARTICLE.exists(), reason="the seed article is not beside this clone (../shared/seed)")
def test_the_data_is_the_articles_script_and_exports():
    text = ARTICLE.read_text()
    start = text.index("#!/bin/bash")
    end = text.index("trainer.device=npu $@") + len("trainer.device=npu $@")
    assert seed_launch.script_text() == text[start:end] + "\n"
    for key, value in seed_launch.EXPORTS.items():
        assert f"export {key}={value}\n" in text
    for override in seed_launch.REWARD_OVERRIDES:
        assert override.split("=")[0] in text


def test_the_script_reads_as_the_two_node_launch(tmp_path):
    script = seed_launch.write_script(tmp_path / "run_grpo.sh")
    launch = parse_launch(["bash", str(script)], cwd=tmp_path)
    assert launch.module == "verl.trainer.main_ppo"
    assert len(launch.overrides) == 40 and launch.nnodes == 2
    assert launch.get("data.truncation") == "error" and launch.get("trainer.logger") == ["console"]
