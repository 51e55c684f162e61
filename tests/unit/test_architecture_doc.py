"""docs/architecture.md held to the tree: it names every process (one per service with a
``services/<name>/app.py``: the api, the stream, the projector and the webhook dispatcher) with
the right count, and every folder under tests/ with what it holds."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).parents[2]
DOC = REPO / "docs" / "architecture.md"

#: Each service that runs as a process (it has an app.py), and the word the docs call it by.
PROCESSES = {"api": "api", "stream": "stream", "projector": "projector", "webhooks": "dispatcher"}
COUNTS = {2: "Two", 3: "Three", 4: "Four", 5: "Five", 6: "Six"}


def test_it_names_every_process_and_how_many_there_are():
    services = {path.parent.name for path in (REPO / "services").glob("*/app.py")}
    assert services == set(PROCESSES), (
        "a process was added or removed: name it in PROCESSES and in docs/architecture.md"
    )
    text = DOC.read_text()
    opening = text.split("\n## ", 1)[0]
    assert opening.count(f"{COUNTS[len(PROCESSES)]} processes") == 1, "the opening does not count the processes right"
    wrong = [word for n, word in COUNTS.items() if n != len(PROCESSES) and f"{word} processes" in text]
    assert wrong == [], f"docs/architecture.md still counts {wrong} processes"
    missing = [f"**{word}**" for word in PROCESSES.values() if f"**{word}**" not in opening]
    missing += [f"`services/{name}`" for name in PROCESSES if f"`services/{name}`" not in text]
    assert missing == [], f"docs/architecture.md does not name {missing}"


def test_it_names_every_test_folder_with_what_it_holds():
    folders = sorted(p.name for p in (REPO / "tests").iterdir() if p.is_dir() and (p / "__init__.py").exists())
    text = DOC.read_text()
    # Each named in backticks and followed by words saying what it holds.
    unnamed = [f for f in folders if not re.search(rf"`tests/{f}/` [a-zA-Z]", text)]
    assert len(folders) >= 11 and unnamed == [], f"docs/architecture.md does not say what these hold: {unnamed}"
