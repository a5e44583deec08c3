"""The catalog and the generic classes are saved between runs (matching.catalog.saved): a run
reuses them only while their files and code are the same bytes, and a broken file still fails."""
from __future__ import annotations

import shutil

import pytest

import matching.catalog as cat
from matching import terminal
from matching.catalog import CatalogError, catalog

from .conftest import ROOT


@pytest.fixture
def rules_dir(tmp_path, monkeypatch):
    """A rules directory of one real rule file, and a cache of our own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    rules = tmp_path / "rules"
    rules.mkdir()
    shutil.copy(ROOT / "knowledge" / "rules" / "memory.toml", rules)
    monkeypatch.setattr(cat, "RULES_DIR", rules)
    catalog.cache_clear()
    yield rules
    catalog.cache_clear()


def test_a_saved_catalog_is_read_back_not_parsed(rules_dir, tmp_path, monkeypatch):
    first = catalog()
    assert first == tuple(cat.load_rules(rules_dir))
    assert len(list((tmp_path / "cache" / "verl-doctor").glob("catalog-*.pickle"))) == 1

    def parse(*_a, **_k):
        raise AssertionError("the saved catalog should have been used")

    monkeypatch.setattr(cat, "load_rules", parse)
    catalog.cache_clear()
    assert catalog() == first


def test_an_edited_rule_file_is_read_afresh(rules_dir):
    old = catalog()
    path = rules_dir / "memory.toml"
    title = old[0].title
    path.write_text(path.read_text().replace(title, title + " (edited)", 1))
    catalog.cache_clear()
    assert catalog()[0].title == title + " (edited)"
    path.write_text(path.read_text() + '\n[[rule]]\nid = "x"\nbogus = 1\n')
    catalog.cache_clear()
    with pytest.raises(CatalogError, match="unknown field 'bogus'"):
        catalog()


def test_the_generic_classes_are_saved_too(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    terminal.generic.cache_clear()
    try:
        fresh = terminal.generic()
        assert fresh == terminal.load_generic()
        assert list((tmp_path / "cache" / "verl-doctor").glob("generic-*.pickle"))
        monkeypatch.setattr(terminal, "load_generic", lambda *a: pytest.fail("not read back"))
        terminal.generic.cache_clear()
        assert terminal.generic() == fresh
    finally:
        terminal.generic.cache_clear()


def test_the_vocabulary_is_part_of_what_a_saved_catalog_depends_on():
    assert ROOT / "knowledge" / "vocabulary.toml" in [p.resolve() for p in cat.code_files()]
