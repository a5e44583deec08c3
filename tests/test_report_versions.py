"""The versions table of a report across nodes: real facts of two interpreters' views (one with an
older verl on its import path), differences marked, node names anonymized to distinct placeholders."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from markdown_it import MarkdownIt

from checks.context import CheckContext
from probes.facts import gather_facts
from doctor import report
from doctor.report_markdown import _versions
from matching.redact import Anonymizer


def facts(cwd: Path, pythonpath: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return gather_facts(CheckContext(cwd=cwd, python=sys.executable, env=env))


def old_verl(site: Path) -> Path:
    """A site directory holding an installed verl 0.7.0 (package + dist-info), as pip leaves it."""
    (site / "verl").mkdir(parents=True)
    (site / "verl" / "__init__.py").write_text("__version__ = '0.7.0'\n")
    info = site / "verl-0.7.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.7.0\n")
    (info / "top_level.txt").write_text("verl\n")
    (info / "RECORD").write_text("verl/__init__.py,,\n")
    return site


def test_versions_per_node_mark_the_difference_and_anonymize_apart(tmp_path):
    a, b = "node-a7.corp.example", "node-b9.corp.example"
    nodes = {a: facts(tmp_path), b: facts(tmp_path, str(old_verl(tmp_path / "site")))}
    ctx = CheckContext(cwd=tmp_path, python=sys.executable, env={}, options={"cluster_nodes": nodes})
    table = report._nodes_section(ctx)
    assert table[b]["verl"].startswith("0.7.0")
    assert table[a]["verl"] != table[b]["verl"] and table[a]["python"] == table[b]["python"]
    diff = report._differences(table)
    assert diff == ["verl"]

    anon = Anonymizer()
    for label in table:
        anon.host(label)
    doc = anon.mapping({"nodes": table, "version_differences": diff})
    md = "\n".join(_versions(doc))
    assert a not in md and b not in md and "node-a7" not in md
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    header = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "th_open"]
    assert header[1:] == ["host-1", "host-2"]
    rows = {}
    cells: list[str] = []
    for i, t in enumerate(tokens):
        if t.type == "tr_open":
            cells = []
        elif t.type == "inline" and tokens[i - 1].type == "td_open":
            cells.append(t.content)
        elif t.type == "tr_close" and cells:
            rows[cells[0]] = cells[1:]
    assert "**verl ≠**" in rows and rows["**verl ≠**"][1].startswith("0.7.0")
    assert "python" in rows  # equal rows are not marked
