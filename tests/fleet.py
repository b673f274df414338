"""What the tests of several NATS systems share: a systems file naming servers, and a loss on one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import urllib.request

from console.broker.atomic import AtomicBatch


def systems_text(**urls: str) -> str:
    """A systems file naming each system with its one server."""
    return "".join(f'[[system]]\nname = "{name}"\nservers = ["{url}"]\n\n' for name, url in urls.items())


async def abandon(nc, stream: str, batch_id: str) -> None:
    """An atomic batch started and never committed: the server abandons it after its 1 s timeout."""
    await nc.jetstream().add_stream(name=stream, subjects=[stream.lower()], allow_atomic=True)
    batch = AtomicBatch(nc, batch_id=batch_id)
    await batch.add(stream.lower(), b"x")
    batch.discard()


def run_apart(coroutine):
    """A coroutine run to its end on a loop of its own thread (a browser test's thread has Playwright's)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


class Link:
    """A TCP link on loopback between the console and one system's server, that a test cuts (every
    connection through it closed, new ones refused) and mends: the system is away from the console
    while it goes on serving its own clients."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="link", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._listen())
        self._ready.set()
        self._loop.run_forever()

    async def _listen(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._pipe, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._open |= {writer, up_writer}

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                dst.close()
                self._open.discard(dst)

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer))

    def cut(self) -> None:
        async def cut() -> None:
            assert self._server is not None
            self._server.close()
            for writer in list(self._open):
                writer.transport.abort()
            self._open.clear()
        asyncio.run_coroutine_threadsafe(cut(), self._loop).result(10)

    def mend(self) -> None:
        asyncio.run_coroutine_threadsafe(self._listen(self.port), self._loop).result(10)


def metrics_text(url: str) -> str:
    """A /metrics page's text, or "" while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.read().decode()
    except OSError:
        return ""
