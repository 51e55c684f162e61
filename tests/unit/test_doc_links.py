"""Every relative link in the repository's markdown (README.md, docs/, and every other .md file)
resolves to a file inside the repository, and its #anchor, when it names one, to a heading (or an
explicit ``<a id>``) of that file; no document points at a path outside the repository (a reader
who clones it has nothing else).

What the docs and the code's comments and docstrings write in backticks is checked against the
tree too: a repository path exists, a dotted module of the product resolves to its file, and
``module.name`` (or ``module.Class.name``) to a name bound in that module. One failure lists every
broken reference as ``file:line: reference``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doclinks import (
    PACKAGES,
    ROOT,
    broken_links,
    broken_reference,
    broken_references,
    markdown_files,
    names_in_files,
)


def test_the_repository_has_its_documents():
    names = {str(p.relative_to(ROOT)) for p in markdown_files()}
    assert {
        "README.md",
        "docs/architecture.md",
        "docs/api.md",
        "docs/configuration.md",
        "docs/operations.md",
        "docs/testing.md",
        "docs/benchmarks.md",
        "docs/reliability.md",
    } <= names


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_inside_the_repository(path: Path):
    assert broken_links(path) == []


def test_a_broken_link_is_found(tmp_path: Path):
    """The check itself can fail: a missing file, a path out of the repository, a wrong anchor."""
    doc = ROOT / "docs" / "architecture.md"
    bad = doc.with_name("_link_check_probe.md")
    bad.write_text(
        "# Probe\n\n[a](missing.md) [b](../../outside.md) [c](architecture.md#no-such-heading) "
        "[d](#probe) see ../shared/spec.md\n"
    )
    try:
        assert broken_links(bad) == [
            "missing.md: no such file",
            "../../outside.md: outside the repository",
            "architecture.md#no-such-heading: no heading #no-such-heading in docs/architecture.md",
            "../../outside.md: a path outside the repository",
            "../shared/spec.md: a path outside the repository",
        ]
    finally:
        bad.unlink()


def test_every_path_module_and_name_in_backticks_exists():
    """Docs, READMEs, comments and docstrings name only paths, modules and names that exist."""
    problems = broken_references()
    assert not problems, f"{len(problems)} broken references:\n" + "\n".join(problems)


def test_a_broken_reference_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The check itself can fail: a renamed file, module, function or method, relative or not;
    and it leaves wire names, fields, settings, routes and third-party modules alone. (The
    probe package lives in tmp_path, so renames in the product never break this test.)"""
    package = tmp_path / "probe" / "sub"
    package.mkdir(parents=True)
    (tmp_path / "probe" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(
        "class Watcher:\n    def fresh(self):\n        self.seen = 1\n\n\ndef gated():\n    pass\n"
    )
    (package / "other.py").write_text("")
    monkeypatch.setitem(PACKAGES, "probe", tmp_path / "probe")
    source = ROOT / "docs" / "architecture.md"
    broken = [
        "services/api/access.py",
        "docs/no-such-page.md",
        "gone_module.py",
        "probe.sub.gone",
        "probe.sub.mod.gone",
        "probe.sub.mod.Watcher.gone",
        "tests.unit.test_doc_links.no_such_function",
        ".ci/no-such-script",
        # A bare name or a tail is not a path, even where some tracked file ends with it.
        "unit/test_doc_links.py",
        "test_doc_links.py",
        "readmodel.py",
    ]
    fine = [
        "tests/unit/test_doc_links.py",
        "api.md",  # docs/architecture.md's sibling
        "docs/api.md",
        "probe.sub.mod",
        "probe.sub.mod.gated",
        "probe.sub.mod.Watcher.fresh",
        "probe.sub.mod.Watcher.seen",
        "tests.support.doclinks.broken_reference",
        "post.created",
        "ready.resumed",
        "checks.feed.detail",
        "TICKERWIRE_DATABASE_URL",
        "/api/v1/developer/posts",
        "application/json",
        "asyncpg.Record",
        "<prefix>.posts.v1",
        "tickerwire projector rebuild",
    ]
    assert [ref for ref in broken if not broken_reference(ref, source)] == []
    assert [ref for ref in fine if broken_reference(ref, source)] == []
    module = package / "other.py"
    assert broken_reference(".gone.gated", module, "probe.sub.other")
    assert broken_reference(".mod.gone", module, "probe.sub.other")
    assert not broken_reference(".mod.gated", module, "probe.sub.other")
    assert not broken_reference("..sub.mod.Watcher", module, "probe.sub.other")
    assert names_in_files("`mod.py`, `gone` and `mod.py` (`gated`, `Watcher` or `lost`)", module) == [
        "mod.py: gone",
        "mod.py: lost",
    ]
    assert names_in_files("`mod.py:gated`, `mod.py:vanished`, `gone.py:gated`", module) == [
        "mod.py: vanished",
        "gone.py:gated",
    ]
