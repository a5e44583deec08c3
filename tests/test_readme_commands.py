"""The README's main command, as CI can see it: read out of README.md, run on a fresh machine.

Its install part is checked against the test command's (the suite runs inside that install; a
second `pip install` here would cost minutes), and its `doctor train` part runs with this
interpreter in fresh-machine conditions (tests/fresh.py): a private empty /tmp, an empty HOME.
That is where `ray.cluster_utils.Cluster` once failed on the missing /tmp/ray.
"""
from __future__ import annotations

import re
import shlex
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.fresh import fresh_run

ROOT = Path(__file__).resolve().parents[1]
DONE = re.compile(r"\[trainer\] done: (\d+) steps, mean reward ([\d.]+) \(first 5\) -> ([\d.]+) \(last 5\)")


def readme_command(tag: str) -> str:
    """The block after `<!-- TAG-command -->` in README.md (as .ci/run and fresh-machine read it)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index(f"<!-- {tag}-command -->")
    assert lines[start + 1].startswith("```sh"), f"no ```sh fence after the {tag} command tag"
    end = lines.index("```", start + 2)
    return "\n".join(lines[start + 2:end]).strip()


def steps(command: str) -> list[list[str]]:
    return [shlex.split(part) for part in command.split(" && ")]


def editable_extras(argv: list[str]) -> tuple[list[str], set[str]]:
    """The pip command without its `-e .[extras]`, and those extras."""
    i = argv.index("-e")
    req = Requirement("verl-doctor" + argv[i + 1].removeprefix("."))
    return argv[:i] + argv[i + 2:], set(req.extras)


def expand(extras: set[str]) -> set[str]:
    """Extras with the project's own self-references (test = verl-doctor[train,...]) followed."""
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    out, todo = set(), list(extras)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        for dep in table[name]:
            req = Requirement(dep)
            if req.name == "verl-doctor":
                todo.extend(req.extras)
    return out


def test_main_command_installs_what_the_test_command_installs_and_runs_doctor_train():
    main, test = steps(readme_command("main")), steps(readme_command("test"))
    assert len(main) == 3 and len(test) == 3, (main, test)
    assert main[0] == test[0] == ["python3", "-m", "venv", ".venv"]
    main_pip, main_extras = editable_extras(main[1])
    test_pip, test_extras = editable_extras(test[1])
    assert main_pip == test_pip  # same pip, same torch, same constraints
    assert main_extras <= expand(test_extras), (main_extras, test_extras)  # the suite runs in a superset
    assert main[2][0] == ".venv/bin/doctor" and main[2][1] == "train", main[2]


@pytest.mark.slow
def test_main_command_trains_and_learns_on_a_fresh_machine(tmp_path):
    """`doctor train` of the README on an empty /tmp and HOME: two local Ray nodes start, the
    embedded task learns, and no Ray file is left in /tmp (no /tmp/ray: Ray's files stay private)."""
    argv = steps(readme_command("main"))[-1]
    with fresh_run([sys.executable, "-m", "doctor", *argv[1:]], tmp_path, timeout=900) as run:
        assert run.proc.returncode == 0, run.output[-6000:]
        assert "Traceback" not in run.output
        m = DONE.search(run.proc.stdout)
        assert m, run.output[-4000:]
        n, first, last = int(m.group(1)), float(m.group(2)), float(m.group(3))
        assert n == 30 and last > first + 0.3, (n, first, last)  # seed 0: about 0.03 -> 0.99
        assert "succeeded" in run.proc.stdout
        left = sorted(p.name for p in run.tmp.iterdir())
        assert not [name for name in left if name == "ray" or name.startswith("vd-ray-")], left
