"""What ``tickerwire up`` says on its output: timestamped lines, and the one-line reasons it
refuses to start."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .broker import OwnBroker


def say(message: str) -> None:
    """A line on up's output (what a developer watching the terminal needs to know)."""
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


class UpError(Exception):
    """A reason ``up`` refuses to start, told in one line."""


def one_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def ready_lines(info: dict[str, Any], own: OwnBroker | None, state_file: Path) -> list[str]:
    """What ``up`` prints once the stack is up: where everything is (``info``, as in ``up.json``)."""
    lines = [
        "Tickerwire is up.",
        f"  base URL:   {info['base_url']}",
        f"  stream URL: {info['stream_url']}",
        f"  docs:       {info['docs_url']}",
    ]
    if own is not None:
        kept = "an earlier start's, kept" if own.found_log else "new"
        lines.append(f"  broker:     {own.label} on {info['kafka_bootstrap_servers']}, log {own.data_dir} ({kept})")
    if info["api_key"]:
        lines.append(f"  API key:    {info['api_key']}")
    else:
        lines.append(
            "  API key:    none (no demo data on a configured broker; pass --demo, or issue one: tickerwire key issue)"
        )
    if info.get("traces_url"):
        lines.append(
            f'  traces:     {info["traces_url"]} (Phoenix UI, project "default"; kept in the state directory, '
            "--fresh clears them)"
        )
    lines.append(f"  admin:      {', '.join(f'{n} {u}' for n, u in info['admin'].items())} (/healthz /readyz /metrics)")
    parts = ", ".join(f"{name} {part['state']}" for name, part in info.get("parts", {}).items())
    lines.append(f"  parts:      {parts} (each change is said here and kept in up.json)")
    lines.append(f"  state:      {state_file}")
    if info["api_key"]:
        lines.append(f"Try: curl -H 'Authorization: Bearer {info['api_key']}' {info['base_url']}/posts")
        lines.append(
            f"Webhooks: run a receiver on this machine (say on port 9999), then: tickerwire webhooks register "
            f"--workspace {info['workspace_id']} --url http://127.0.0.1:9999/hook (prints its secret once; docs/webhooks.md)"
        )
    lines.append("Ctrl-C stops everything.")
    return lines
