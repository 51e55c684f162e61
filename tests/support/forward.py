"""A loopback TCP forwarder: a real address that refuses connections until it is opened, then
forwards every connection to a target (for example, a Kafka bootstrap address that comes back
after an outage). :meth:`Forwarder.freeze` stops it passing bytes on, in both directions, while
every connection stays open: to its clients the target looks frozen (a stopped process, a
network that drops packets)."""

from __future__ import annotations

import asyncio
import contextlib

from tickerwire.devstack.embedded.ports import free_port


class Forwarder:
    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host or "127.0.0.1", int(port))
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._server: asyncio.AbstractServer | None = None
        self._pipes: set[asyncio.Task] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    async def __aenter__(self) -> "Forwarder":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def open(self) -> None:
        """Accept connections on :attr:`address` from now on (refused until then)."""
        self._server = await asyncio.start_server(self._forward, "127.0.0.1", self.port)

    def freeze(self) -> None:
        """Hold every byte from now on (connections stay open; nothing is refused)."""
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        # Stop accepting, then end every connection (each pipe closes its destination), and only
        # then wait for the server: since Python 3.12.1 wait_closed() waits for the connections
        # it accepted, so waiting first would wait for ever.
        if self._server is not None:
            self._server.close()
        for pipe in list(self._pipes):
            pipe.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(_pipe(src, dst, self._flowing))
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, flowing: asyncio.Event) -> None:
    try:
        while data := await src.read(65536):
            await flowing.wait()
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            dst.close()
