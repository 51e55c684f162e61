"""``tickerwire up --traces``: a local trace viewer (Arize Phoenix,
:mod:`tickerwire.devstack.embedded.phoenix`) started before the service processes, which send it
their spans over OTLP/HTTP. Its traces are kept in the state directory, as the rest of up's
state is (``--fresh`` removes them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...common import tracing
from .children import Stack
from .embedded import start_server
from .output import UpError, one_line, say
from .timings import Timings

if TYPE_CHECKING:  # imported lazily, by `up --traces` only
    from tickerwire.devstack.embedded.phoenix import Phoenix

#: The sampler up's processes get unless the environment names one: every trace, as its parent decides.
SAMPLER = "parentbased_always_on"
#: The state directory's folder of the viewer's database (its log, phoenix.log, is beside it).
FOLDER = "phoenix"


#: What ``--traces`` says when the processes could not send spans (the ``tracing`` extra missing).
NEEDS_EXTRA = f"--traces needs the tracing extra in this environment: {tracing.EXTRA}"


def start_viewer(stack: Stack, timings: Timings) -> Phoenix:
    """Phoenix, started (installed first when this machine has none: minutes, once) and stopped with the stack."""
    if not tracing.sdk_available():
        raise UpError(NEEDS_EXTRA)  # before minutes of installing a viewer nothing would send to
    from tickerwire.devstack.embedded.errors import EmbeddedError
    from tickerwire.devstack.embedded.phoenix import DEFAULT_PORT, Phoenix
    from tickerwire.devstack.embedded.phoenix_install import VERSION, ensure_installed, home, installed

    try:
        if not installed(home()):
            say(f"--traces: installing Phoenix {VERSION} into {home()}; about 3 minutes and 860 MB, once")
        with timings.step("traces"):
            install = ensure_installed()
            viewer, _ = start_server(
                lambda port: Phoenix(stack.state_dir / FOLDER, port, stack.state_dir / "phoenix.log", install=install),
                DEFAULT_PORT,
            )
    except EmbeddedError as exc:
        raise UpError(one_line(exc)) from None
    stack.embedded.append(viewer)
    return viewer


def tracing_env(env: dict[str, str], viewer: Phoenix) -> None:
    """Every child sends its spans to ``viewer``: the endpoint is set (the viewer is what
    ``--traces`` asks for), a traces-only endpoint that would win over it is dropped, and the
    sampler is set unless the environment names one."""
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = viewer.otlp_endpoint
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    env.setdefault("OTEL_TRACES_SAMPLER", SAMPLER)


def viewer_info(viewer: Phoenix) -> dict[str, Any]:
    """What ``up.json`` says of the viewer."""
    return {
        "traces_url": viewer.url,
        "traces_otlp_endpoint": viewer.otlp_endpoint,
        "traces_ui": True,
        "traces_data": str(viewer.database),
        "traces_log": str(viewer.log_path),
    }
