"""The launch reader: a real script like the seed article's, parsed with Hydra's grammar."""
import textwrap

import pytest

from launch.script import LaunchError, parse_launch


def write(tmp_path, text, name="run.sh"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_seed_style_script(tmp_path):
    p = write(tmp_path, """\
        #!/bin/bash
        set -x
        # comment line
        export HCCL_SOCKET_IFNAME=eth6
        export GLOO_SOCKET_IFNAME="eth6"
        cd sub
        python3 -m verl.trainer.main_ppo \\
            algorithm.adv_estimator=grpo \\
            +data.source=gsm8k \\
            data.truncation='error' \\
            trainer.logger='["console"]' \\
            ~trainer.foo \\
            trainer.nnodes=2 $@
        """)
    (tmp_path / "sub").mkdir()
    launch = parse_launch(["bash", str(p), "trainer.save_freq=5"], cwd=tmp_path)
    assert launch.env == {"HCCL_SOCKET_IFNAME": "eth6", "GLOO_SOCKET_IFNAME": "eth6"}
    assert launch.cwd == (tmp_path / "sub").resolve()
    assert launch.module == "verl.trainer.main_ppo" and launch.is_verl
    assert launch.get("algorithm.adv_estimator") == "grpo"
    assert launch.get("data.truncation") == "error"
    assert launch.get("trainer.logger") == ["console"]
    assert launch.get("trainer.save_freq") == 5  # from "$@"
    assert launch.nnodes == 2
    ops = {o.key: o.op for o in launch.overrides}
    assert ops["data.source"] == "add" and ops["trainer.foo"] == "delete"


def test_command_line_launch():
    launch = parse_launch(["python", "-m", "verl.trainer.main_ppo", "trainer.n_gpus_per_node=8",
                           "actor_rollout_ref.rollout.n=4"])
    assert launch.get("trainer.n_gpus_per_node") == 8
    assert launch.get("actor_rollout_ref.rollout.n") == 4


def test_script_without_python_is_an_error(tmp_path):
    p = write(tmp_path, "echo hello\n")
    with pytest.raises(LaunchError, match="no python command"):
        parse_launch(["bash", str(p)], cwd=tmp_path)


def test_bad_override_is_an_error():
    with pytest.raises(LaunchError, match="cannot parse override"):
        parse_launch(["python", "-m", "verl.trainer.main_ppo", "a.b=[1,2"])
