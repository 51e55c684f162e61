"""The TypeScript client tests' hands on the Python side, run with the repository's virtualenv.

One line of JSON in, one line of JSON out (stdout); everything else goes to stderr. Operations:

- ``posts``: publish post events (``id``, ``version``, ``langs``, ``status``, ``age_s``,
  ``tickers``) to a running ``tickerwire up``'s broker with one long-lived producer, as
  ``tickerwire publish`` does;
- ``cli``: run a ``tickerwire`` command (workspace, key, embed, heartbeat, sweep) against it;
- ``python_resume``: follow the stream with the Python client's ``ResumingStream`` from a saved
  ``ResumePoint`` JSON for ``count`` items; answers the items and the position JSON.

The ``up`` is named by ``TICKERWIRE_STATE_DIR`` (its ``up.json``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "clients" / "python" / "src"))
sys.path.insert(0, str(REPO))  # tests.support

from tests.support import events  # noqa: E402
from tickerwire.schemas.models import PostEvent  # noqa: E402
from tickerwire.services.cli.publish import send_events  # noqa: E402
from tickerwire.services.cli.running import cli_config  # noqa: E402
from tickerwire.services.common.kafka import started_producer  # noqa: E402
from tickerwire_client import AsyncClient, ResumePoint  # noqa: E402

NOW = datetime.now(timezone.utc)


def post_event(spec: dict) -> PostEvent:
    return events.post_event(
        int(spec["id"]),
        int(spec.get("version", 1)),
        spec["langs"],
        now=NOW,
        status=spec.get("status", "published"),
        age_s=float(spec.get("age_s", 0)),
        tickers=spec.get("tickers", ["BTC"]),
    )


async def python_resume(request: dict) -> dict:
    up = json.loads((Path(os.environ["TICKERWIRE_STATE_DIR"]) / "up.json").read_text())
    saved = request.get("resume")
    items = []
    async with AsyncClient(up["base_url"], up["api_key"], stream_url=up["stream_url"]) as client:
        stream = client.resuming_stream(
            resume_from=ResumePoint.from_json(saved) if saved else None, langs=request.get("langs")
        )
        async with stream:

            async def take() -> None:
                async for item in stream:
                    items.append({"id": item.post.id, "lang": item.post.lang, "source": item.source})
                    if len(items) >= int(request["count"]):
                        return

            await asyncio.wait_for(take(), float(request.get("timeout", 30)))
            return {"ok": True, "items": items, "position": stream.position.to_json()}


async def main() -> None:
    config = cli_config()
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    async with started_producer(config) as producer:
        print(json.dumps({"ok": True, "ready": True}), flush=True)
        while line := await reader.readline():
            request = json.loads(line)
            try:
                if request["op"] == "posts":
                    await send_events(producer, config.topic_prefix, [post_event(p) for p in request["posts"]])
                    answer: dict = {"ok": True}
                elif request["op"] == "cli":
                    done = await asyncio.to_thread(
                        subprocess.run,
                        [sys.executable, "-m", "tickerwire.services.cli.main", *request["args"]],
                        capture_output=True,
                        text=True,
                        timeout=60,
                    )
                    answer = {"ok": done.returncode == 0, "stdout": done.stdout, "stderr": done.stderr}
                elif request["op"] == "python_resume":
                    answer = await python_resume(request)
                else:
                    answer = {"ok": False, "error": f"unknown op {request['op']!r}"}
            except Exception as exc:  # the test reads the failure from the answer
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
