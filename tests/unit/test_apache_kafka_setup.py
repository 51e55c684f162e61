"""Apache Kafka's prerequisites, each missing one said in one line with the way to get it."""

from __future__ import annotations

import os
import stat

from tickerwire.devstack.embedded import apache_kafka


def _fake_java(folder, version: str) -> None:
    java = folder / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{version}\" 2021-10-19' >&2\n")
    java.chmod(java.stat().st_mode | stat.S_IXUSR)


def test_no_java_is_named_with_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    reason = apache_kafka.available()
    assert reason is not None and "\n" not in reason
    assert "needs Java 17 or newer" in reason and "apt-get install openjdk-17" in reason


def test_an_old_java_is_refused_with_its_version(monkeypatch, tmp_path):
    _fake_java(tmp_path, "11.0.2")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert apache_kafka.available() == f"Apache Kafka needs Java 17 or newer; {tmp_path}/bin/java is Java 11"


def test_no_jars_and_no_maven_is_named(monkeypatch, tmp_path):
    _fake_java(tmp_path / "jdk", "17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    monkeypatch.setenv(apache_kafka.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(apache_kafka.LIBS_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "jdk" / "bin"))
    reason = apache_kafka.available()
    assert reason is not None and "and Maven is not installed to fetch them (install Maven" in reason
    assert apache_kafka.version() in reason


def test_a_libs_folder_without_kafka_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(apache_kafka.LIBS_ENV, str(tmp_path))
    try:
        apache_kafka.classpath()
    except apache_kafka.EmbeddedError as exc:
        assert "holds no kafka_2.13 jar" in str(exc)
    else:
        raise AssertionError("a folder without Kafka's jars was taken")
    assert os.environ[apache_kafka.LIBS_ENV] == str(tmp_path)
