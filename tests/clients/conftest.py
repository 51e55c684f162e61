"""The client library's tests import ``tickerwire_client`` from this repository's
``clients/python/src`` (the library is its own distribution, ``pip install ./clients/python``;
the README's test command installs only the server), so they test the code next to them."""

from __future__ import annotations

import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "clients" / "python" / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
