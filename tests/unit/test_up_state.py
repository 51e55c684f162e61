"""The state file of ``tickerwire up`` holds the demo key and the database URL: it is readable by
its owner only. (That the temporary file is created 0600, so no byte is ever readable by others,
is by construction, ``os.open(..., 0o600)``: a window between a write and a chmod cannot be seen
from a test.)"""

from __future__ import annotations

import os
import stat

import orjson

from tickerwire.services.cli.up.children import Stack
from tickerwire.services.cli.up.state import write_state


def test_the_state_file_is_owner_only_even_over_a_left_over_readable_temporary(tmp_path):
    state = tmp_path / "up.json"
    left_over = state.with_suffix(".tmp")
    left_over.write_text("old")
    left_over.chmod(0o644)
    old_umask = os.umask(0o022)
    try:
        write_state(state, {"api_key": "tw_live_x"}, Stack(tmp_path))
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert orjson.loads(state.read_bytes())["api_key"] == "tw_live_x"
    assert not left_over.exists()
