"""Finding the Jaeger binary (devstack/embedded/jaeger_build.py): the variable first, then the
cache; without either and without Go one line says how to get it; two starts at once build it
once. The build's ``go`` here is a stand-in script that records its calls (the real build, minutes
of CPU, is tests/integration/test_jaeger.py's, on demand)."""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from tickerwire.devstack.embedded.errors import EmbeddedError
from tickerwire.devstack.embedded.jaeger_build import BIN_ENV, VERSION, cached_binary, ensure_binary, find_binary

SLEEP, CHMOD = shutil.which("sleep"), shutil.which("chmod")
GO = """#!/bin/sh
echo "$@" >> "{calls}"
if [ "$1" = build ]; then
  {sleep} 1
  printf '#!/bin/sh\\n' > "$3" && {chmod} +x "$3"
fi
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache, no variable, and a PATH with no ``go`` on it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(BIN_ENV, raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))  # the stand-in names its tools by their full paths
    return tmp_path


def executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_without_binary_and_go_one_line_says_how_to_get_it(home: Path):
    assert find_binary() is None
    with pytest.raises(EmbeddedError) as refused:
        ensure_binary()
    said = str(refused.value)
    assert "\n" not in said
    assert VERSION in said and "`go`" in said and BIN_ENV in said and str(cached_binary()) in said


def test_the_variable_comes_first_and_must_name_a_runnable_file(home: Path, monkeypatch: pytest.MonkeyPatch):
    executable(cached_binary())
    named = executable(home / "elsewhere" / "jaeger")
    monkeypatch.setenv(BIN_ENV, str(named))
    assert ensure_binary() == named
    named.chmod(0o644)
    with pytest.raises(EmbeddedError, match=BIN_ENV):
        ensure_binary()
    monkeypatch.delenv(BIN_ENV)
    assert ensure_binary() == cached_binary()


def test_two_starts_at_once_build_it_once_into_the_cache(home: Path):
    calls = home / "go-calls"
    executable(home / "bin" / "go", GO.format(calls=calls, sleep=SLEEP, chmod=CHMOD))
    found: list[Path] = []
    starts = [threading.Thread(target=lambda: found.append(ensure_binary())) for _ in range(2)]
    for start in starts:
        start.start()
    for start in starts:
        start.join(timeout=30)
    assert found == [cached_binary(), cached_binary()]
    assert os.access(cached_binary(), os.X_OK)
    said = calls.read_text().splitlines()
    assert [line.split()[0] for line in said] == ["mod", "get", "build"], said
    assert said[1] == f"get -tool github.com/jaegertracing/jaeger/cmd/jaeger@{VERSION}"
    assert not [p for p in cached_binary().parent.iterdir() if p.name.startswith(".build-")]  # no leftovers


def test_a_failed_build_is_said_in_one_line_and_leaves_no_binary(home: Path):
    executable(home / "bin" / "go", "#!/bin/sh\necho 'go: module lookup disabled' >&2\nexit 1\n")
    with pytest.raises(EmbeddedError) as refused:
        ensure_binary()
    assert "\n" not in str(refused.value) and "module lookup disabled" in str(refused.value)
    assert find_binary() is None
