"""Apicurio Registry, a real schema registry, as a local process for tests: the app's
distribution from Maven Central (``io.apicurio:apicurio-registry-app``, classifier ``all``),
resolved with ``mvn`` into the same cache as the Apache Kafka jars on first use, run with its
in-memory storage. Version 2.6 is the last line that runs on Java 17 (3.x needs Java 21). Its
Confluent-compatible API (``/apis/ccompat/v7``) is what Confluent's serializers and
Tickerwire's lookup speak."""

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

from tickerwire.devstack.embedded import apache_kafka
from tickerwire.devstack.embedded.errors import EmbeddedError
from tickerwire.devstack.embedded.ports import free_port

VERSION = "2.6.13.Final"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{VERSION}:tar.gz:all"
#: Resolving (about 140 MB) and starting (about 10 s on a quiet machine) are each bounded.
RESOLVE_TIMEOUT_S = 600
START_TIMEOUT_S = 120


def _home() -> Path:
    return apache_kafka.cache_root() / f"apicurio-registry-{VERSION}"


def _runner() -> Path:
    return _home() / f"apicurio-registry-app-{VERSION}-runner.jar"


def unavailable() -> str | None:
    """Why Apicurio Registry cannot run here, or None."""
    try:
        apache_kafka.java()
    except EmbeddedError as exc:
        return str(exc)
    if not _runner().exists() and shutil.which("mvn") is None:
        return f"Apicurio Registry {VERSION} is not in {_home()} and Maven is not installed to fetch it"
    return None


def _resolve() -> Path:
    home = _home()
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / ".apicurio.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _runner().exists():
            return _runner()
        staging = Path(tempfile.mkdtemp(prefix="apicurio-", dir=home.parent))
        argv = [str(shutil.which("mvn")), "-q", "-B", "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy"]
        argv += [f"-Dartifact={ARTIFACT}", f"-DoutputDirectory={staging}"]
        try:
            subprocess.run(argv, capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S, check=True)
            (archive,) = staging.glob("*.tar.gz")
            with tarfile.open(archive) as tar:
                tar.extractall(staging / "app", filter="data")
        except (OSError, subprocess.SubprocessError, ValueError, tarfile.TarError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise EmbeddedError(f"cannot fetch Apicurio Registry {VERSION} with Maven: {exc}") from None
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
    argv = [apache_kafka.java(), "-Xmx256m", f"-Dquarkus.http.port={port}", "-Dquarkus.http.host=127.0.0.1"]
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
