"""Where the trace viewer's Phoenix lives and how it gets there (devstack/embedded/phoenix_install.py):
the variable, else the user's cache; an environment of its own made by this interpreter's venv and
filled by that environment's pip, never this one's; two starts at once install once; a failed pip
is said in one line. The interpreter here is a stand-in script that records its calls and makes a
stand-in environment whose ``python -m pip`` records its own (the real install, minutes and 860 MB,
is tests/integration/test_phoenix.py's, on demand)."""

from __future__ import annotations

import shutil
import stat
import sys
import threading
from pathlib import Path

import pytest

from tickerwire.devstack.embedded.errors import EmbeddedError
from tickerwire.devstack.embedded.phoenix_install import (
    HOME_ENV,
    REQUIREMENT,
    VERSION,
    ensure_installed,
    home,
    installed,
    python,
)

TOOLS = {name: shutil.which(name) for name in ("sleep", "mkdir", "touch", "dirname", "cat", "chmod")}

#: The environment's python: records its arguments; ``-m pip install`` takes a second, then leaves
#: Phoenix's metadata where pip would (or fails, saying so, while ``<calls>.fail`` exists).
PIP = """#!/bin/sh
folder=$({dirname} $({dirname} "$0"))
echo "$0 $@" >> "{calls}"
if [ -e "{calls}.fail" ]; then
  echo "Collecting arize-phoenix==20.26.1" && echo "ERROR: No matching distribution found for arize-phoenix" >&2
  exit 1
fi
{sleep} 1
{mkdir} -p "$folder/lib/python3.11/site-packages/arize_phoenix-{version}.dist-info"
{touch} "$folder/lib/python3.11/site-packages/arize_phoenix-{version}.dist-info/METADATA"
"""

#: The interpreter: records its arguments; ``-m venv FOLDER`` makes FOLDER a stand-in environment.
VENV = """#!/bin/sh
echo "$0 $@" >> "{calls}"
{mkdir} -p "$3/bin"
{touch} "$3/pyvenv.cfg"
{cat} > "$3/bin/python" <<'PIP'
{pip}PIP
{chmod} +x "$3/bin/python"
"""


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty cache, no variable; the file the stand-ins write their calls to."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(HOME_ENV, raising=False)
    return tmp_path / "calls"


@pytest.fixture
def interpreter(tmp_path: Path, calls: Path) -> str:
    pip = PIP.format(calls=calls, version=VERSION, **TOOLS)
    return str(executable(tmp_path / "interpreter", VENV.format(calls=calls, pip=pip, **TOOLS)))


def said(calls: Path) -> list[str]:
    return calls.read_text().splitlines() if calls.exists() else []


def test_it_lives_in_the_users_cache_unless_the_variable_names_a_folder(
    tmp_path: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
):
    assert home() == tmp_path / "cache" / "tickerwire" / f"phoenix-{VERSION}"
    monkeypatch.setenv(HOME_ENV, str(tmp_path / "elsewhere"))
    assert home() == tmp_path / "elsewhere"


def test_an_environment_is_installed_only_with_phoenix_of_this_version_in_it(tmp_path: Path):
    folder = tmp_path / "env"
    executable(python(folder), "#!/bin/sh\n")
    assert not installed(folder)
    other = folder / "lib/python3.11/site-packages/arize_phoenix-20.25.0.dist-info"
    other.mkdir(parents=True)
    (other / "METADATA").touch()
    assert not installed(folder)
    ours = folder / f"lib/python3.11/site-packages/arize_phoenix-{VERSION}.dist-info"
    ours.mkdir()
    (ours / "METADATA").touch()
    assert installed(folder)


def test_two_starts_at_once_install_it_once_into_its_own_environment(interpreter: str, calls: Path):
    found: list[Path] = []
    starts = [
        threading.Thread(target=lambda: found.append(ensure_installed(interpreter=interpreter))) for _ in range(2)
    ]
    for start in starts:
        start.start()
    for start in starts:
        start.join(timeout=30)
    assert found == [home(), home()] and installed(home())
    venv, pip = said(calls)  # one environment made, one pip run: the second start found the install
    assert venv == f"{interpreter} -m venv {home()}"
    assert pip.startswith(f"{python(home())} -m pip install ") and pip.endswith(f" {REQUIREMENT}")
    assert str(Path(sys.prefix)) not in pip  # this environment's pip is never the one that runs
    assert ensure_installed(interpreter=interpreter) == home() and len(said(calls)) == 2  # installed: no call


def test_a_failed_pip_is_said_in_one_line_and_the_next_start_finishes_the_job(interpreter: str, calls: Path):
    failing = calls.with_name(calls.name + ".fail")
    failing.touch()
    with pytest.raises(EmbeddedError) as refused:
        ensure_installed(interpreter=interpreter)
    message = str(refused.value)
    assert "\n" not in message and "pip install failed (exit 1)" in message
    assert "No matching distribution found for arize-phoenix" in message and str(home()) in message
    assert not installed(home())
    failing.unlink()
    assert ensure_installed(interpreter=interpreter) == home() and installed(home())
    assert [line.split()[1:3] for line in said(calls)] == [["-m", "venv"], ["-m", "pip"], ["-m", "pip"]]  # made once


def test_a_folder_that_is_not_an_environment_is_refused_and_left_alone(interpreter: str, calls: Path):
    home().mkdir(parents=True)
    (home() / "notes.txt").write_text("mine\n")
    with pytest.raises(EmbeddedError, match=HOME_ENV):
        ensure_installed(interpreter=interpreter)
    assert said(calls) == [] and (home() / "notes.txt").read_text() == "mine\n"
