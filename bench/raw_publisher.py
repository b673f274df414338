"""An atomic-batch publisher written on the NATS protocol itself (CONNECT, HPUB, SUB, MSG/HMSG, PING/PONG),
as a client in a language with no JetStream library would: ADR-50's headers by hand, the first message and
the commit waiting for the server's reply, the others sent without one. It knows nothing of maintenance
holds. For bench/maintain.py: what a non-cooperating publisher loses across leadership moves.

Each batch's outcome is kept with its time: (time.perf_counter(), committed)."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from urllib.parse import urlparse


class Outcomes:
    """A publisher's batches, each (time.perf_counter(), committed): counted by window; and each one's
    outcome by its batch id, where the id is known (to hold the loss ledger's against): (time, committed,
    opened), opened False for a batch whose first message no server answered (nothing of it was stored)."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[float, bool]] = []
        self.by_id: dict[str, tuple[float, bool, bool]] = {}

    def ended(self, batch_id: str | None, committed: bool, opened: bool = True) -> None:
        self.outcomes.append((time.perf_counter(), committed))
        if batch_id:
            self.by_id[batch_id] = (*self.outcomes[-1], opened)

    def between(self, start: float, end: float) -> tuple[int, int]:
        """(lost, committed) of the batches that ended between the two times."""
        inside = [ok for t, ok in self.outcomes if start <= t <= end]
        return inside.count(False), inside.count(True)


class RawAtomicPublisher(Outcomes):
    def __init__(self, urls: list[str], subject: str, open_s: float, idle_s: float, size: int = 5):
        super().__init__()
        self.urls, self.subject, self.open_s, self.idle_s, self.size = urls, subject, open_s, idle_s, size
        self.acks: list[float] = []
        self.stopped = False
        self._replies: dict[str, asyncio.Future[bytes]] = {}
        self._inbox = "_RAW." + secrets.token_hex(6)
        self._writer: asyncio.StreamWriter | None = None

    async def run(self) -> None:
        turn = 0
        while not self.stopped:
            url = urlparse(self.urls[turn % len(self.urls)])
            turn += 1
            try:
                reader, self._writer = await asyncio.wait_for(asyncio.open_connection(url.hostname, url.port), 5)
                await reader.readline()  # INFO
                self._writer.write(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true,'
                                   b'"protocol":1,"name":"raw-bench"}\r\n' + f"SUB {self._inbox}.* 1\r\n".encode())
                reading = asyncio.create_task(self._read(reader))
                try:
                    while not self.stopped and not reading.done():
                        batch = secrets.token_hex(8)
                        self.ended(batch, *await self._batch(batch))
                        await asyncio.sleep(self.idle_s)
                finally:
                    reading.cancel()
                    self._writer.close()
            except (OSError, asyncio.TimeoutError, ConnectionError):
                await asyncio.sleep(0.2)  # its server restarting: the next one

    async def _batch(self, batch: str) -> tuple[bool, bool]:
        """(committed, opened)."""
        try:
            for seq in range(1, self.size + 1):
                last = seq == self.size
                headers = f"NATS/1.0\r\nNats-Batch-Id: {batch}\r\nNats-Batch-Sequence: {seq}\r\n" + (
                    "Nats-Batch-Commit: 1\r\n" if last else "") + "\r\n"
                payload = b"m" * 64
                waits = seq == 1 or last
                reply = f"{self._inbox}.{batch}{seq}" if waits else ""
                future = asyncio.get_running_loop().create_future()
                if waits:
                    self._replies[reply] = future
                head = headers.encode()
                assert self._writer is not None
                self._writer.write(f"HPUB {self.subject} {reply} {len(head)} {len(head) + len(payload)}\r\n".encode()
                                   + head + payload + b"\r\n")
                if waits:
                    answer = json.loads(await asyncio.wait_for(future, 5.0) or b"{}")
                    if "error" in answer:
                        return False, seq > 1
                    self.acks.append(time.perf_counter())
                if not last:
                    await asyncio.sleep(self.open_s / self.size)
            return True, True
        except (asyncio.TimeoutError, ValueError, ConnectionError):
            return False, seq > 1
        finally:
            for key in [k for k in self._replies if k.startswith(f"{self._inbox}.{batch}")]:
                self._replies.pop(key, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            line = await reader.readline()
            if not line:
                return
            parts = line.split()
            if not parts:
                continue
            if parts[0] == b"PING":
                assert self._writer is not None
                self._writer.write(b"PONG\r\n")
            elif parts[0] in (b"MSG", b"HMSG"):
                size = int(parts[-1])
                body = await reader.readexactly(size + 2)
                header_size = int(parts[-2]) if parts[0] == b"HMSG" else 0
                status = body[:header_size]
                future = self._replies.pop(parts[1].decode(), None)
                if future is not None and not future.done():
                    # a 503 no-responders status is a refusal too
                    future.set_result(b'{"error": {}}' if b" 503" in status else body[header_size:size])

    def stop(self) -> None:
        self.stopped = True
