"""deploy/Dockerfile, read by BuildKit's own parser (the ``dockerfile`` package wraps the Go
parser ``docker build`` uses), checked for what the image promises: built in a stage of its
own, the final image holds the environment and a non-root user and nothing to build with, it
starts ``tickerwire`` and exposes the ports the configuration listens on, and its build
context (deploy/Dockerfile.dockerignore) carries what the build copies and nothing else."""

from __future__ import annotations

import dataclasses
import fnmatch
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path

import dockerfile
import pytest

from tickerwire.services.cli.settings import FullConfig
from tickerwire.services.common.runtime.config import PREFIX, variable

ROOT = Path(__file__).parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / "deploy" / "Dockerfile.dockerignore"
VENV = "/opt/tickerwire"


@dataclass
class Stage:
    name: str
    base: str
    commands: list[dockerfile.Command]

    def all(self, cmd: str) -> list[dockerfile.Command]:
        return [c for c in self.commands if c.cmd == cmd]

    def env(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for c in self.all("ENV"):
            out |= dict(zip(c.value[::2], c.value[1::2]))
        return out

    def shell_commands(self) -> list[list[str]]:
        """Every command of every RUN, split at ``&&`` and ``;``, as argv lists."""
        out = []
        for run in self.all("RUN"):
            lexer = shlex.shlex(run.value[0], posix=True, punctuation_chars=";&|")
            lexer.whitespace_split = True
            argv: list[str] = []
            for token in lexer:  # quoted text stays one word, however many ; and && it holds
                if token in ("&&", ";"):
                    if argv:
                        out.append(argv)
                    argv = []
                else:
                    argv.append(token)
            if argv:
                out.append(argv)
        return out


def stages(commands: tuple[dockerfile.Command, ...]) -> list[Stage]:
    out: list[Stage] = []
    for c in commands:
        if c.cmd == "FROM":
            base, *rest = c.value
            out.append(Stage(rest[1] if len(rest) == 2 and rest[0].upper() == "AS" else str(len(out)), base, []))
        elif out:
            out[-1].commands.append(c)
    return out


@pytest.fixture(scope="module")
def parsed() -> tuple[dockerfile.Command, ...]:
    return dockerfile.parse_file(str(DOCKERFILE))


@pytest.fixture(scope="module")
def build(parsed) -> Stage:
    return stages(parsed)[0]


@pytest.fixture(scope="module")
def final(parsed) -> Stage:
    return stages(parsed)[-1]


def test_the_image_is_built_in_a_stage_of_its_own_from_one_pinned_base(parsed):
    *earlier, last = stages(parsed)
    assert earlier, "a build stage before the final one"
    args = dict(c.value[0].split("=", 1) for c in parsed if c.cmd == "ARG")
    assert {s.base for s in (*earlier, last)} == {"${PYTHON_IMAGE}"}  # build and run on the same interpreter
    assert args["PYTHON_IMAGE"].startswith("python:3.") and "-slim" in args["PYTHON_IMAGE"]
    names = [s.name for s in earlier]
    for copy in last.all("COPY"):
        sources = [f.split("=", 1)[1] for f in copy.flags if f.startswith("--from=")]
        assert sources and sources[0] in names, copy.original  # the final stage takes only built files


def test_the_build_installs_the_package_into_a_venv_from_wheels_only(build):
    argv = build.shell_commands()
    assert ["python", "-m", "venv", VENV] in argv
    (install,) = [a for a in argv if a[:2] == [f"{VENV}/bin/pip", "install"]]
    assert "--only-binary=:all:" in install and install[-1] == "."  # no compiler: wheels only
    assert [f"{VENV}/bin/pip", "uninstall", "-y", "pip", "setuptools", "wheel"] in argv


def test_the_final_image_runs_as_a_user_it_creates_that_is_not_root(final):
    *_, user = final.all("USER")
    uid, _, gid = user.value[0].partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0  # numeric: runAsNonRoot can check it
    argv = final.shell_commands()
    (useradd,) = [a for a in argv if a[0] == "useradd"]
    (groupadd,) = [a for a in argv if a[0] == "groupadd"]
    assert useradd[useradd.index("--uid") + 1] == uid and useradd[useradd.index("--gid") + 1] == gid
    assert groupadd[groupadd.index("--gid") + 1] == gid
    assert useradd[useradd.index("--shell") + 1].endswith("nologin")
    assert final.commands.index(user) > max(
        final.commands.index(r) for r in final.all("RUN")
    )  # nothing runs as root after


def test_the_final_image_installs_nothing_and_keeps_no_installer(final):
    for argv in final.shell_commands():
        assert argv[0] in {"groupadd", "useradd", "python"}, argv  # no apt-get, apk, gcc, make, curl
        if argv[0] == "python":
            assert argv[1:4] == ["-m", "pip", "uninstall"] and {"pip", "setuptools", "wheel"} <= set(argv), argv
    (copy,) = final.all("COPY")
    assert copy.value == (VENV, VENV)  # the environment, and nothing else from the build


def test_it_starts_the_tickerwire_command_of_the_environment(final):
    (entrypoint,) = final.all("ENTRYPOINT")
    assert entrypoint.json and entrypoint.value == ("tickerwire",)  # exec form: signals reach the process
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "tickerwire" in scripts
    assert final.env()["PATH"].split(":")[0] == f"{VENV}/bin"


def test_it_exposes_the_ports_the_configuration_listens_on_on_every_interface(final):
    defaults = {f.name: f.default for f in dataclasses.fields(FullConfig)}
    ports = {v for k, v in defaults.items() if k.endswith("_port")}
    exposed = {int(p) for c in final.all("EXPOSE") for p in c.value}
    assert exposed == ports
    env = final.env()
    assert env[PREFIX + "HOST"] == "0.0.0.0"  # a container is reached through its own interface
    settings = {variable(f) for f in dataclasses.fields(FullConfig)}
    assert {k for k in env if k.startswith(PREFIX)} <= settings  # no misspelt setting


def admitted(path: str, patterns: list[str]) -> bool:
    """Whether the build context holds ``path`` (the last matching pattern decides; a pattern
    matches a path or any folder above it; ``!`` admits again)."""
    keep = True
    parts = path.split("/")
    for pattern in patterns:
        negated = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatchcase("/".join(parts[:n]), pattern) for n in range(1, len(parts) + 1)):
            keep = negated
    return keep


def test_the_build_context_holds_what_the_build_copies_and_nothing_else(build):
    patterns = [
        line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
    copied = [src for c in build.all("COPY") if not c.flags for src in c.value[:-1]]
    assert copied
    for source in copied:
        assert (ROOT / source).exists(), source
        assert admitted(source, patterns), source
        assert admitted(f"{source}/x.py" if (ROOT / source).is_dir() else source, patterns), source
    for kept_out in (
        "tests/conftest.py",
        ".venv/bin/python",
        ".git/HEAD",
        "clients/python/README.md",
        "services/__pycache__/x.pyc",
    ):
        assert not admitted(kept_out, patterns), kept_out
