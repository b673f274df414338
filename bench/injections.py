"""Losses the probe cannot stage, for bench/manifests.py: each is a real publisher taking part in the repair
protocol (a SentWindow and a Repairer, as `probe --repair` has), losing messages the way production does.

- `dropped_connection`: a fast batch (ok mode) whose TCP connection dies with messages in flight. The
  publisher talks to the server through `Cut`, a loopback proxy that, asked to, swallows what the publisher
  writes and then closes both sides; nats-py reconnects through it and the batch goes on past a gap.
- `over_committed`: a fast batch (ok mode) whose publisher never waits for its flow acks, on a server whose
  queue for the stream holds `max_buffered_msgs`: refused with 429 10167 per message, then gap acks.
- `leader_changed`: an atomic batch open while its R3 stream's leader steps down: the commit is refused with
  10176 (incomplete), no advisory is raised (the collector taps the publish side to see it).

Each returns an `Injected`: the batch, when its publisher saw the loss, and the Repairer to stop once the
console's last word on it is in."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import nats
from nats.aio.client import Client

from console.broker.atomic import AtomicBatch
from console.broker.fast import FastBatch, connection_inbox
from console.broker.repair import MSG_ID, Repairer, SentWindow, message_id
from console.domain.fast_ingest import GapMode, new_batch_id, reply_prefix
from console.domain.manifests import Span
from console.domain.replies import FlowGap
from console.errors import BatchError


@dataclass
class Injected:
    kind: str
    stream: str
    batch: str
    count: int  # messages the publisher meant to send
    lost_at: float  # time.monotonic() when its publisher had the loss in hand
    nc: Client
    repairer: Repairer
    cut: Cut | None = None

    async def close(self) -> None:
        await self.repairer.stop()
        await self.nc.close()
        if self.cut is not None:
            await self.cut.stop()


class Cut:
    """A loopback TCP proxy to one server; `cut()` swallows what the client writes from now on, `close_all()`
    then closes every connection (the client reconnects: later connections are forwarded whole)."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.swallowing = False
        self._writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"nats://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(self.host, self.port)
        self._writers += [client_w, server_w]

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter, upstream: bool) -> None:
            try:
                while data := await r.read(65536):
                    if not (upstream and self.swallowing):
                        w.write(data)
                        await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()

        try:
            await asyncio.gather(pipe(client_r, server_w, True), pipe(server_r, client_w, False))
        except asyncio.CancelledError:
            pass  # the bench is over

    def cut(self) -> None:
        self.swallowing = True

    def close_all(self) -> None:
        for w in self._writers:
            w.close()
        self._writers.clear()
        self.swallowing = False

    async def stop(self) -> None:
        self.close_all()
        if self._server is not None:
            self._server.close()


async def _taking_part(url: str | list[str], stream: str, key: bytes | None, **connect) -> tuple[Client, SentWindow, Repairer]:
    nc = await nats.connect(url, **connect)
    window = SentWindow()
    repairer = Repairer(nc, window, key, (stream,))
    await repairer.start()
    return nc, window, repairer


async def dropped_connection(server_url: str, stream: str, key: bytes | None, count: int = 20,
                             cut_after: int = 7, swallowed: int = 3) -> Injected:
    host, port = server_url.removeprefix("nats://").rsplit(":", 1)
    cut = Cut(host, int(port))
    proxied = await cut.start()
    back = asyncio.Event()

    async def reconnected() -> None:
        back.set()

    async def expected(e: Exception) -> None:
        pass  # the cut itself (an unexpected EOF to nats-py)

    nc, window, repairer = await _taking_part(proxied, stream, key, reconnect_time_wait=0.1, max_reconnect_attempts=-1,
                                              reconnected_cb=reconnected, error_cb=expected)
    batch = FastBatch(nc, flow=100, gap_mode=GapMode.OK, ack_timeout=5,
                      on_problem=lambda p: window.lost(batch.batch_id, Span(p.first_lost_seq, p.seq - 1))
                      if isinstance(p, FlowGap) else window.lost(batch.batch_id, Span(p.seq, p.seq)))
    subject = f"{stream.lower()}.x"
    try:
        for seq in range(1, count):
            headers = {MSG_ID: message_id(batch.batch_id, seq)}
            window.keep(batch.batch_id, seq, subject, b"d" * 64, headers, stream)
            if seq == cut_after + 1:
                await asyncio.sleep(0.05)  # what came before is on the wire
                cut.cut()
            await batch.add(subject, b"d" * 64, headers)
            if seq == cut_after + swallowed:
                await asyncio.sleep(0.05)  # written into the proxy, which swallows it
                cut.close_all()
                # what is written before nats-py sees the socket closed is lost too, and may be the commit: its
                # publisher would wait for a reply that cannot come. Wait for the new connection instead.
                await asyncio.wait_for(back.wait(), 10)
        headers = {MSG_ID: message_id(batch.batch_id, count)}
        window.keep(batch.batch_id, count, subject, b"d" * 64, headers, stream)
        await batch.commit(subject, b"d" * 64, headers)
    except BatchError:
        window.lost(batch.batch_id, Span(batch.ack_seq + 1, None))
    finally:
        window.settle(batch.batch_id)
        await batch.close()
    return Injected("fast_dropped_conn", stream, batch.batch_id, count, time.monotonic(), nc, repairer, cut)


async def over_committed(server_url: str, stream: str, key: bytes | None, count: int = 2000) -> Injected:
    """Raw: every message published without waiting for an ack; the replies say what was refused."""
    nc, window, repairer = await _taking_part(server_url, stream, key)
    batch = new_batch_id()
    head = reply_prefix(connection_inbox(nc), batch, 10, GapMode.OK)
    ended = asyncio.Event()

    async def replied(msg) -> None:
        seq, op = (int(t) for t in msg.subject.split(".")[-3:-1])
        body = json.loads(msg.data)
        if body.get("type") == "gap":
            window.lost(batch, Span(body["last_seq"], body["seq"] - 1))
        elif "error" in body and body.get("type") in (None, "err"):
            window.lost(batch, Span(body.get("seq") or seq, body.get("seq") or seq))
        if op == 2 and ("batch" in body or "error" in body):
            ended.set()

    sub = await nc.subscribe(f"{head}>", cb=replied)
    subject = f"{stream.lower()}.x"
    for seq in range(1, count + 1):
        headers = {MSG_ID: message_id(batch, seq)}
        window.keep(batch, seq, subject, b"o" * 64, headers, stream)
        op = 0 if seq == 1 else 2 if seq == count else 1
        await nc.publish(subject, b"o" * 64, reply=f"{head}{seq}.{op}.$FI", headers=headers)
        if seq == 1:
            await nc.flush()
    await asyncio.wait_for(ended.wait(), 30)
    await asyncio.sleep(0.2)  # a gap ack the commit's reply overtook
    window.settle(batch)
    await sub.unsubscribe()
    return Injected("fast_overcommit", stream, batch, count, time.monotonic(), nc, repairer)


async def leader_changed(urls: list[str], stream: str, key: bytes | None, step_down, count: int = 5) -> Injected:
    """`step_down(stream)`: the stream's leader steps down and another is elected (awaited)."""
    nc, window, repairer = await _taking_part(urls, stream, key, reconnect_time_wait=0.2, max_reconnect_attempts=-1)
    batch = AtomicBatch(nc, timeout=10)
    subject = f"{stream.lower()}.x"
    for seq in range(1, count):
        headers = {MSG_ID: message_id(batch.batch_id, seq)}
        window.keep(batch.batch_id, seq, subject, b"a" * 64, headers, stream)
        await batch.add(subject, b"a" * 64, headers)
    await asyncio.sleep(0.3)  # the collector's tap has seen the batch open
    await step_down(stream)
    headers = {MSG_ID: message_id(batch.batch_id, count)}
    window.keep(batch.batch_id, count, subject, b"a" * 64, headers, stream)
    try:
        await batch.commit(subject, b"a" * 64, headers)
        window.committed(batch.batch_id)
    except BatchError:
        window.lost(batch.batch_id, Span(1, None))
    window.settle(batch.batch_id)
    return Injected("atomic_leader_change", stream, batch.batch_id, count, time.monotonic(), nc, repairer)
