"""The explain corpus (bench/corpus): split once by thread, and the held-out part never a fixture.

The held-out figure of bench/explain_accuracy.py means something only while no rule was written
from those logs: a fixture that came from a held-out thread, or that carries its lines, would
turn it into a figure measured on fixtures.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.corpus_split import (CATEGORIES, CORPUS, FIXTURES, boilerplate, distinct_lines,  # noqa: E402
                                 fixture_sharing, part_of, read_header, recorded)

ROWS = recorded()


def test_corpus_meets_its_floor():
    failures = [r for r in ROWS.values() if r["kind"] == "failures"]
    assert len([r for r in failures if r["part"] == "heldout"]) >= 60  # issue 12's floor
    assert len([r for r in ROWS.values() if r["kind"] == "clean"]) >= 40
    assert {r["category"] for r in failures} <= set(CATEGORIES)


def test_composition_counts_what_each_slice_lacks_of_a_third():
    from bench.explain_accuracy import composition

    rows = ([{"platform": "npu", "multinode": "yes"}] * 2 + [{"platform": "gpu", "multinode": "no"}] * 5
            + [{"platform": "npu", "multinode": "no"}])
    c = composition(rows, 3)
    assert (c["failures"], c["npu"], c["multinode"], c["clean"]) == (8, 3, 2, 3)
    assert c["npu_short"] == 0
    # 2 of 8 multi-node: one more makes 3 of 9, a third
    assert c["multinode_short"] == 1
    rows += [{"platform": "gpu", "multinode": "no"}]  # 2 of 9: two more make 4 of 11, not 3 of 10
    assert composition(rows, 3)["multinode_short"] == 2


def test_every_log_is_recorded_in_the_part_its_thread_decides():
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*/*.log")}
    assert files == {r["file"] for r in ROWS.values()}
    for thread, row in ROWS.items():
        assert row["part"] == part_of(thread), thread
        head, _ = read_header(CORPUS / row["file"])
        assert head["thread"] == thread and head["source"] == row["source"]


def test_the_split_rule_is_by_thread_and_not_by_file():
    # the same thread always lands in the same part, whatever else it is added with
    assert part_of("verl-project/verl#1763") == part_of("Verl-Project/verl#1763 ")
    parts = {part_of(f"o/r#{n}") for n in range(200)}
    assert parts == {"heldout", "tuning"}


HELDOUT = [CORPUS / r["file"] for r in ROWS.values() if r["part"] == "heldout"]


BOILERPLATE = boilerplate(CORPUS / r["file"] for r in ROWS.values())


@pytest.mark.parametrize("held", HELDOUT, ids=lambda p: p.stem)
def test_a_heldout_log_is_never_a_fixture(held):
    head, _ = read_header(held)
    mine = distinct_lines(held) - BOILERPLATE
    for fixture in FIXTURES.rglob("*.log"):
        text = fixture.read_text(errors="replace")
        source = text.split("\n", 1)[0].removeprefix("# source:").strip().rstrip("/")
        assert source != head["source"].rstrip("/"), f"{fixture.name} comes from held-out {head['thread']}"
        shared = mine & distinct_lines(fixture)
        assert len(shared) < 2, f"{fixture.name} carries lines of held-out {held.name}: {sorted(shared)[:2]}"


def test_threads_that_differ_only_in_cjk_words_get_files_of_their_own(tmp_path, monkeypatch):
    import bench.corpus_split as cs

    a, b = "Ascend/MindSpeed:docs/zh/FAQ.md#Torch extensions卡住", "Ascend/MindSpeed:docs/zh/FAQ.md#Torch extensions报错"
    assert cs.slug(a) != cs.slug(b)
    assert cs.slug("verl-project/verl#123") == "verl_project_verl_123"  # ASCII names stay as recorded
    monkeypatch.setattr(cs, "CORPUS", tmp_path / "corpus")
    monkeypatch.setattr(cs, "SPLIT", tmp_path / "corpus" / "split.toml")
    monkeypatch.setattr(cs, "fixture_sources", lambda: set())
    incoming = tmp_path / "in"
    incoming.mkdir()
    for i, thread in enumerate((a, b)):
        (incoming / f"{i}.log").write_text(
            f"# source: https://example.org/{i}\n# thread: {thread}\n# category: other\n"
            f"# platform: npu\n# multinode: no\nline one {i}\nline two\nline three\n")
    cs.add([str(incoming)])
    logs = sorted(p.read_text() for p in (tmp_path / "corpus").rglob("*.log"))
    assert len(logs) == 2 and "line one 0" in logs[0] and "line one 1" in logs[1]


def test_a_log_that_carries_a_fixtures_lines_is_refused_whatever_its_source_says(tmp_path, monkeypatch):
    # a documentation section's fixture, gathered again with the section's anchor in its URL: the
    # same failure, so not one doctor has never seen
    import bench.corpus_split as cs

    monkeypatch.setattr(cs, "CORPUS", tmp_path / "corpus")
    monkeypatch.setattr(cs, "SPLIT", tmp_path / "corpus" / "split.toml")
    fixture = FIXTURES / "hccl-comm-resource-exhausted--3.log"
    head, body = read_header(fixture)
    assert len(distinct_lines(fixture)) >= 2
    incoming = tmp_path / "in"
    incoming.mkdir()
    (incoming / "again.log").write_text(
        f"# source: {head['source']}#ei0011\n# thread: hicann/hccl:param_link_stage.md#EI0011\n"
        "# category: memory\n# platform: npu\n# multinode: no\n" + "\n".join(body) + "\n")
    (incoming / "other.log").write_text(
        "# source: https://example.org/2\n# thread: example/x#2\n# category: other\n"
        "# platform: npu\n# multinode: no\nline one of another failure\nline two\nline three\n")
    assert fixture_sharing(distinct_lines(incoming / "again.log"), set()) == fixture
    cs.add([str(incoming)])
    assert [r["thread"] for r in cs.recorded().values()] == ["example/x#2"]


def test_the_benchmark_gives_doctor_the_log_without_our_header(tmp_path):
    # the header's cause is the answer in our words: read, it would name the category for doctor
    from bench.corpus_split import body_bytes
    from bench.explain_accuracy import findings

    body = b"# a comment the run printed itself\r\nstep:1 - loss:0.1\n"
    log = tmp_path / "x.log"
    log.write_bytes(b"# source: https://example.org/1\n# category: memory\n"
                    b"# cause: torch.OutOfMemoryError: CUDA out of memory in the rollout\n" + body)
    assert body_bytes(log) == body
    assert findings(log) == []
    log.write_bytes(body)  # a log with no header: all of it
    assert body_bytes(log) == body
