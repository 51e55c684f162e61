"""Every relative link in the repository's markdown (README.md, docs/, and every other .md file)
resolves to a file inside the repository, and its #anchor, when it names one, to a heading of
that file; no document points at a path outside the repository (a reader who clones it has
nothing else)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Folders that are not the repository's content (environments, caches, build output).
SKIP = {
    ".git",
    ".venv",
    "build",
    "dist",
    ".pytest_cache",
    ".hypothesis",
    ".tickerwire",
    "bench-results",
    ".ruff_cache",
    ".mypy_cache",
    ".import_linter_cache",
    "node_modules",
}
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
#: A path written out in prose that climbs out of its folder (``../x``), linked or not.
CLIMB = re.compile(r"(?<![\w./-])((?:\.\./)+[\w.-][\w./-]*)")
FENCE = re.compile(r"^(```|~~~)")


def markdown_files() -> list[Path]:
    """The repository's markdown: what git tracks or would track (ignored folders such as
    .tools/, with CI's 1.5 GB of node_modules, are never walked); every file outside git."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if listed.returncode == 0:
        candidates = [ROOT / line for line in listed.stdout.splitlines() if (ROOT / line).is_file()]
    else:  # not a git checkout
        candidates = list(ROOT.rglob("*.md"))
    return sorted(
        p
        for p in candidates
        if not any(part in SKIP or part.endswith(".egg-info") for part in p.relative_to(ROOT).parts)
    )


def prose(path: Path) -> str:
    """The file without its fenced code blocks (shell examples are not links)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in prose(path).splitlines() if re.match(r"#{1,6} ", line)}


def broken_links(path: Path) -> list[str]:
    problems = []
    for target in LINK.findall(prose(path)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("//"):
            continue  # http:, https:, mailto: ...
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
        elif not resolved.exists():
            problems.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    for climb in CLIMB.findall(prose(path)):
        resolved = (path.parent / climb.rstrip(".")).resolve()
        if not resolved.is_relative_to(ROOT) or not resolved.exists():
            problems.append(f"{climb}: a path outside the repository")
    return problems


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
