"""The config problem table (knowledge/config_problems.toml) against the predicates in checks/config.py:
every id a predicate can yield has a row (so a title), a row without a title does not load, and
STARTUP_KEYS comes from the table."""
from __future__ import annotations

import ast
import inspect
import sys
import textwrap

import pytest

from checks import config
from knowledge import HERE

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _predicates():
    named = [p for p in config.STARTUP_PREDICATES + config.LATE_PREDICATES if p is not config._ray_cpus]
    return named + [config.ray_cpus]  # ray_cpus words its problem itself; _ray_cpus only calls it


def _ids_in(fn) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("config.")}


def test_every_id_a_predicate_yields_has_a_row():
    for fn in _predicates():
        ids = _ids_in(fn)
        assert ids, f"{fn.__name__} names no problem id"
        assert ids <= set(config.PROBLEMS), (fn.__name__, ids - set(config.PROBLEMS))


def test_no_predicate_builds_an_id_at_run_time():
    # an f-string id could name a row that does not exist; ids are spelled out
    for fn in _predicates():
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        built = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr)
                 and any(isinstance(v, ast.Constant) and str(v.value).startswith("config.") for v in n.values)]
        assert not built, (fn.__name__, built)


def test_every_row_is_yielded_by_some_predicate():
    named = set().union(*(_ids_in(fn) for fn in _predicates()))
    assert set(config.PROBLEMS) == named


def test_a_row_without_a_title_does_not_load():
    doc = tomllib.loads((HERE / "config_problems.toml").read_text())
    assert config.load_problem_table(doc)  # the shipped table loads
    del doc["problem"][0]["title"]
    with pytest.raises(ValueError, match="missing 'title'"):
        config.load_problem_table(doc)
    doc["problem"][0]["title"] = "x"
    doc["problem"][0]["tilte"] = "typo"
    with pytest.raises(ValueError, match="unknown field 'tilte'"):
        config.load_problem_table(doc)


def test_the_finding_takes_its_title_from_the_row():
    problem = config.PROBLEMS["config.val_temperature"].problem({})
    assert problem.message == "validation gen temperature should be greater than 0 when enabling do_sample"

    class Session:  # the two attributes _finding reads
        class composed:
            source = "verl 0.9.1 snapshot"

    f = config._finding(problem, Session)
    assert f.title == "Validation sampling with temperature <= 0"
    assert f.evidence == {"settings": ["actor_rollout_ref.rollout.temperature"]}


def test_startup_keys_are_the_startup_rows_keys_and_reads():
    rows = [r for r in config.PROBLEMS.values() if r.when == "startup"]
    assert set(config.STARTUP_KEYS) >= {k for r in rows for k in r.keys + r.reads}
    # the keys behind verl's own checks doctor does not reproduce (critic, val_batch_size notice)
    assert {"critic.enable", "algorithm.adv_estimator", "data.val_batch_size"} <= set(config.STARTUP_KEYS)
    assert len(config.STARTUP_KEYS) == len(set(config.STARTUP_KEYS))
