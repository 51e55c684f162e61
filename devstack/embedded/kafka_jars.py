"""The Apache Kafka jars, pinned and checked: ``apache/jars.lock`` names every jar of the
broker's classpath with its SHA-256 and size. The first use fetches them over HTTPS from Maven
Central (no Maven) into the user's cache (``$TICKERWIRE_KAFKA_CACHE``, else
``$XDG_CACHE_HOME/tickerwire`` or ``~/.cache/tickerwire``), one process at a time under a file
lock; every start checks every jar against its line again, so a changed or truncated file is
fetched anew (or refused, offline) and never run.

A warm cache needs no network. For a machine with none, ``$TICKERWIRE_KAFKA_LIBS`` names a
folder holding the lock's jars (copied from a cache elsewhere): they are checked the same way,
never fetched. ``$TICKERWIRE_MAVEN_REPOSITORY`` points the fetch at a mirror of Maven Central.

``python -m tickerwire.devstack.embedded.kafka_jars fetch`` fills the cache;
``... lock`` rewrites the lock from ``apache/pom.xml`` (a maintainer's step, the one that
needs Maven).
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .errors import EmbeddedError

log = logging.getLogger(__name__)

HERE = Path(__file__).parent / "apache"
LOCK = HERE / "jars.lock"
POM = HERE / "pom.xml"
CACHE_ENV = "TICKERWIRE_KAFKA_CACHE"
LIBS_ENV = "TICKERWIRE_KAFKA_LIBS"
REPOSITORY_ENV = "TICKERWIRE_MAVEN_REPOSITORY"
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
#: One file's fetch: connecting, and each read, is bounded by this; so is the whole file (below).
FETCH_TIMEOUT_S = 30.0
FETCH_FILE_TIMEOUT_S = 600.0
FETCH_THREADS = 4
CHUNK = 1 << 20
#: The artifact whose version names the Kafka release.
KAFKA_ARTIFACT = "org.apache.kafka:kafka_2.13"


@dataclass(frozen=True, slots=True)
class Artifact:
    """One file of a Maven repository, pinned: its coordinates, SHA-256 and size."""

    group: str
    name: str
    version: str
    sha256: str
    size: int
    classifier: str = ""
    extension: str = "jar"

    @classmethod
    def parse(cls, line: str) -> Artifact:
        """``group:name:version[:extension[:classifier]] SHA256 SIZE``, as the lock writes it."""
        try:
            coordinates, sha256, size = line.split()
            group, name, version, *rest = coordinates.split(":")
            artifact = cls(group, name, version, sha256.lower(), int(size), *reversed(rest[:2]))
        except ValueError:
            raise EmbeddedError(f"not a pinned artifact line: {line!r}") from None
        if len(artifact.sha256) != 64 or any(c not in "0123456789abcdef" for c in artifact.sha256):
            raise EmbeddedError(f"not a SHA-256 in {line!r}")
        return artifact

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.name}"

    @property
    def file_name(self) -> str:
        suffix = f"-{self.classifier}" if self.classifier else ""
        return f"{self.name}-{self.version}{suffix}.{self.extension}"

    @property
    def path(self) -> str:
        """Where it lives in a Maven repository's layout."""
        return f"{self.group.replace('.', '/')}/{self.name}/{self.version}/{self.file_name}"

    def matches(self, file: Path) -> bool:
        """Whether ``file`` is this artifact, byte for byte (its size, then its SHA-256)."""
        try:
            if file.stat().st_size != self.size:
                return False
            digest = hashlib.sha256()
            with open(file, "rb") as f:
                while chunk := f.read(CHUNK):
                    digest.update(chunk)
        except OSError:
            return False
        return digest.hexdigest() == self.sha256


def locked(lock: Path = LOCK) -> tuple[Artifact, ...]:
    """The jars of the lock, in its order."""
    lines = [line.strip() for line in lock.read_text().splitlines()]
    return tuple(Artifact.parse(line) for line in lines if line and not line.startswith("#"))


def kafka_version() -> str:
    """The Kafka release the lock pins (the version of ``kafka_2.13``)."""
    for artifact in locked():
        if artifact.coordinates == KAFKA_ARTIFACT:
            return artifact.version
    raise EmbeddedError(f"{LOCK} pins no {KAFKA_ARTIFACT}")


def cache_root() -> Path:
    if override := os.environ.get(CACHE_ENV):
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tickerwire"


def repository() -> str:
    return os.environ.get(REPOSITORY_ENV, MAVEN_CENTRAL).rstrip("/")


def kafka_libs() -> Path:
    """The folder the Kafka jars are run from: ``$TICKERWIRE_KAFKA_LIBS`` or the cache's."""
    if override := os.environ.get(LIBS_ENV):
        return Path(override)
    return cache_root() / f"apache-kafka-{kafka_version()}" / "libs"


def classpath() -> str:
    """The broker's classpath: every locked jar, checked (and fetched once when missing)."""
    provided = os.environ.get(LIBS_ENV)
    files = ensure(locked(), kafka_libs(), what=f"the Apache Kafka {kafka_version()} jars", fetch=not provided)
    return os.pathsep.join(str(file) for file in files)


def ensure(artifacts: Sequence[Artifact], folder: Path, *, what: str, fetch: bool = True) -> list[Path]:
    """The files of ``artifacts`` in ``folder``, each checked against its pin; a missing or
    changed one is fetched again (``fetch``) or refused. Raises EmbeddedError in one line
    naming what is missing and how to provide it."""
    if fetch:
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching: wait for it
            failed = _fetch_missing(artifacts, folder)
    else:
        failed = [(a, "missing" if not (folder / a.file_name).exists() else "changed") for a in artifacts]
        failed = [(a, why) for a, why in failed if not a.matches(folder / a.file_name)]
    if failed:
        raise EmbeddedError(_refusal(what, folder, failed, fetched=fetch, total=len(artifacts)))
    return [folder / a.file_name for a in artifacts]


def _fetch_missing(artifacts: Sequence[Artifact], folder: Path) -> list[tuple[Artifact, str]]:
    wanted = []
    for artifact in artifacts:
        file = folder / artifact.file_name
        if artifact.matches(file):
            continue
        if file.exists():
            log.warning("%s does not match its pinned SHA-256 (a changed or truncated file): fetching it again", file)
            file.unlink()
        wanted.append(artifact)
    if not wanted:
        return []
    log.info("fetching %d file(s) from %s into %s", len(wanted), repository(), folder)
    with ThreadPoolExecutor(max_workers=FETCH_THREADS, thread_name_prefix="fetch-jar") as pool:
        reasons = list(pool.map(lambda artifact: _fetch(artifact, folder), wanted))
    return [(artifact, reason) for artifact, reason in zip(wanted, reasons) if reason is not None]


def _fetch(artifact: Artifact, folder: Path) -> str | None:
    """Fetch one artifact into ``folder``, checked before it takes its name; the reason it
    could not be, or None."""
    url = f"{repository()}/{artifact.path}"
    fd, tmp = tempfile.mkstemp(prefix=".fetch-", dir=folder)
    try:
        digest, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as answer:
            deadline = time.monotonic() + FETCH_FILE_TIMEOUT_S
            while chunk := answer.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                size += len(chunk)
                if size > artifact.size or time.monotonic() > deadline:
                    break
        if size != artifact.size or digest.hexdigest() != artifact.sha256:
            return f"{url} did not match its pinned SHA-256 ({size} of {artifact.size} bytes)"
        os.replace(tmp, folder / artifact.file_name)
        return None
    except (OSError, urllib.error.URLError, ValueError) as exc:
        return f"{url}: {getattr(exc, 'reason', None) or exc}"
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _refusal(what: str, folder: Path, failed: list[tuple[Artifact, str]], *, fetched: bool, total: int) -> str:
    first, reason = failed[0]
    if fetched:
        return (
            f"{what} are not all in {folder} ({len(failed)} of {total} could not be fetched; first "
            f"{first.file_name}: {reason}): connect to the network once, or set {LIBS_ENV} to a folder "
            f"holding the jars that {LOCK} pins (docs/operations.md#apache-kafka-without-a-network)"
        )
    return (
        f"{LIBS_ENV}={folder} lacks {len(failed)} of the {total} jars that {LOCK} pins, or holds them "
        f"changed (first {first.file_name}: {reason}): copy them there from a machine whose cache has them "
        f"(docs/operations.md#apache-kafka-without-a-network)"
    )


def write_lock(pom: Path = POM, lock: Path = LOCK) -> int:
    """Rewrite the lock from Maven's resolution of ``pom``, each jar hashed as Maven Central
    serves it (a maintainer's step; needs ``mvn``). Returns the number of jars."""
    listing = Path(tempfile.mkdtemp()) / "deps.txt"
    argv = ["mvn", "-q", "-B", "-f", str(pom), "dependency:list", "-DincludeScope=runtime"]
    argv += [f"-DoutputFile={listing}", "-DoutputAbsoluteArtifactFilename=true"]
    subprocess.run(argv, check=True, timeout=600)
    header = [line for line in lock.read_text().splitlines() if line.startswith("#")]
    rows = []
    for line in listing.read_text().splitlines():
        fields = line.strip().split(":")
        if len(fields) < 6 or fields[2] != "jar":
            continue
        file = Path(":".join(fields[5:]))
        digest = hashlib.sha256(file.read_bytes()).hexdigest()
        rows.append(f"{fields[0]}:{fields[1]}:{fields[3]} {digest} {file.stat().st_size}")
    lock.write_text("\n".join(header + sorted(rows)) + "\n")
    return len(rows)


def _command(argv: list[str]) -> int:
    if argv == ["fetch"]:
        print(classpath().count(os.pathsep) + 1, "jars ready in", kafka_libs())
        return 0
    if argv == ["lock"]:
        print(write_lock(), "jars pinned in", LOCK)
        return 0
    print("usage: python -m tickerwire.devstack.embedded.kafka_jars fetch|lock", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(_command(sys.argv[1:]))
    except EmbeddedError as exc:
        print(f"kafka_jars: {exc}", file=sys.stderr)
        sys.exit(1)
