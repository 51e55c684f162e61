"""A network link a test can break: a loopback TCP forwarder to one target, one pair of pipes
per connection, on a thread of its own (its own event loop: a busy test loop adds no delay to
what passes through, and the link keeps forwarding while the test waits on something else).

- :meth:`Link.cut` is a partition: every connection through the link is dropped (both ends
  closed) and new ones are accepted but held, passing nothing, until :meth:`Link.heal`; a held
  connection is then connected to the target as if its packets had got through at last.
- :meth:`Link.slow` adds latency: every chunk, in each direction, is passed on ``delay_s``
  after it arrived (in order; at most :data:`MAX_CHUNKS` chunks in flight per direction), until :meth:`Link.heal`.

A client given :attr:`Link.address` instead of the target's sees what a real network fault
shows it: connections that break, connects that hang, answers that come late.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, Coroutine

from tickerwire.devstack.embedded.ports import free_port

CHUNK = 65536
#: Chunks one direction of a connection holds while slowed; reading waits when it is full.
MAX_CHUNKS = 256
#: How long a control call (cut, slow, heal) may take on the link's loop.
CONTROL_TIMEOUT_S = 5.0


class Link:
    def __init__(self, target: str, port: int | None = None) -> None:
        host, _, target_port = target.rpartition(":")
        self.target = (host or "127.0.0.1", int(target_port))
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.delay_s = 0.0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"link-{self.port}", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._open: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task] = set()

    def __enter__(self) -> "Link":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Listen on :attr:`address` and forward from now on."""
        self._thread.start()
        self._call(self._listen())

    def stop(self) -> None:
        """Stop listening and close every connection; the thread ends."""
        if not self._thread.is_alive():
            if self._thread.ident is None:  # never started
                self._loop.close()
            return
        with contextlib.suppress(Exception):
            self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(CONTROL_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()

    def cut(self) -> None:
        """A partition: drop every connection, hold new ones until :meth:`heal`."""
        self._call(self._cut())

    def slow(self, delay_s: float) -> None:
        """Pass every chunk on ``delay_s`` after it arrived, until :meth:`heal`."""
        self.delay_s = delay_s

    def heal(self) -> None:
        """Forward as before: held connections go through, chunks are passed on at once."""
        self.delay_s = 0.0
        self._call(self._heal())

    # ------------------------------------------------------------------ on the link's loop

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(CONTROL_TIMEOUT_S)

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _cut(self) -> None:
        assert self._open is not None
        self._open.clear()
        for writer in list(self._writers):
            writer.transport.abort()

    async def _heal(self) -> None:
        assert self._open is not None
        self._open.set()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _track(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # a connection that broke: nobody's to retrieve

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            assert self._open is not None
            await self._open.wait()  # held while the link is cut
            if writer.transport.is_closing():
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._writers.add(up_writer)
            try:
                pipes = [self._track(self._pipe(reader, up_writer)), self._track(self._pipe(up_reader, writer))]
                # Either direction ending (a close, a cut) ends the connection.
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
                for pipe in pipes:
                    pipe.cancel()
            finally:
                self._writers.discard(up_writer)
                up_writer.transport.abort()
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        """Pass what ``src`` sends to ``dst``, each chunk ``delay_s`` after it arrived."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(MAX_CHUNKS)

        async def deliver() -> None:
            while True:
                due, data = await chunks.get()
                if not data:
                    return
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                dst.write(data)
                await dst.drain()

        sender = self._track(deliver())
        try:
            while True:
                data = await src.read(CHUNK)
                await chunks.put((loop.time() + self.delay_s, data))
                if not data:
                    break
            await sender  # the rest, then the end
            if dst.can_write_eof():
                dst.write_eof()
        except (ConnectionError, OSError):
            pass
        finally:
            sender.cancel()
