"""``tickerwire up --traces``: a local trace viewer (Jaeger, :mod:`tickerwire.devstack.embedded.jaeger`)
started before the service processes, which send it their spans over OTLP/HTTP. Its traces live
in its memory only: unlike the rest of up's state they are gone when it stops."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .children import Stack
from .embedded import start_server
from .output import UpError, one_line, say
from .timings import Timings

if TYPE_CHECKING:  # imported lazily, by `up --traces` only
    from tickerwire.devstack.embedded.jaeger import Jaeger

#: The viewer's preferred port (Jaeger's usual UI port); another one when it is taken.
PREFERRED_PORT = 16686
#: The sampler up's processes get unless the environment names one: every trace, as its parent decides.
SAMPLER = "parentbased_always_on"


def start_viewer(stack: Stack, timings: Timings) -> Jaeger:
    """Jaeger, started (built first when this machine has none: minutes, once) and stopped with the stack."""
    from tickerwire.devstack.embedded.errors import EmbeddedError
    from tickerwire.devstack.embedded.jaeger import Jaeger
    from tickerwire.devstack.embedded.jaeger_build import VERSION, cached_binary, ensure_binary, find_binary

    try:
        if find_binary() is None:
            say(f"--traces: building Jaeger {VERSION} with Go into {cached_binary()}; this takes minutes, once")
        with timings.step("jaeger"):
            binary = ensure_binary()
            viewer, _ = start_server(
                lambda port: Jaeger(stack.state_dir / "jaeger", port, binary=binary), PREFERRED_PORT
            )
    except EmbeddedError as exc:
        raise UpError(one_line(exc)) from None
    stack.embedded.append(viewer)
    return viewer


def tracing_env(env: dict[str, str], viewer: Jaeger) -> None:
    """Every child sends its spans to ``viewer``: the endpoint is set (the viewer is what
    ``--traces`` asks for), a traces-only endpoint that would win over it is dropped, and the
    sampler is set unless the environment names one."""
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = viewer.otlp_endpoint
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    env.setdefault("OTEL_TRACES_SAMPLER", SAMPLER)


def viewer_info(viewer: Jaeger) -> dict[str, Any]:
    """What ``up.json`` says of the viewer."""
    return {
        "traces_url": viewer.url,
        "traces_otlp_endpoint": viewer.otlp_endpoint,
        "traces_ui": viewer.has_ui,
        "traces_log": str(viewer.log_path),
    }
