"""Fast-ingest batch publishing (nats-server 2.14+, stream flag allow_batched) on nats-py.

Control state travels in the reply subject (see console.domain.fast_ingest). The publisher waits
for the first flow ack, then keeps at most `max_outstanding_acks` windows of `flow` messages
unacknowledged, following the flow the server grants in each ack (up and down). A later ack
covers lost earlier ones; while stalled it pings (op 4) so a lost ack cannot hang it, and every
wait has a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Awaitable, Callable, TypeVar

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from console.broker.holds import Holds
from console.broker.replies import error_of, reply_of
from console.broker.wire_out import FastOutgoing
from console.domain.fast_ingest import FastOp, GapMode, check_batch_id, new_batch_id, reply_prefix
from console.domain.replies import ApiError, FlowAck, FlowError, FlowGap, MalformedReply, PubAck
from console.errors import (  # BatchEndedError is raised here
    BatchClosedError,
    BatchEndedError,
    BatchError,
    BatchRefusedError,
    BatchTimeoutError,
    NoRespondersError,
)

log = logging.getLogger(__name__)

Problem = TypeVar("Problem", FlowGap, FlowError)
KEEP_PROBLEMS = 1000  # gaps and errors kept in full; counters go on past it


_INBOXES: weakref.WeakKeyDictionary[Client, str] = weakref.WeakKeyDictionary()
_ROUTERS: weakref.WeakKeyDictionary[Client, dict[str, _Replies]] = weakref.WeakKeyDictionary()


def connection_inbox(nc: Client) -> str:
    """One reply prefix per connection (each batch's replies are under its batch id)."""
    if nc not in _INBOXES:
        _INBOXES[nc] = nc.new_inbox()
    return _INBOXES[nc]


class _Replies:
    """One subscription per connection and reply prefix, `<prefix>.>`, kept while the connection lives,
    handing each reply to the batch it names. The server names a connection by its subscriptions:
    with this one standing, the collector can ask who publishes under the prefix at any time (a
    per-batch subscription is gone within milliseconds of a short batch's end), once per connection."""

    def __init__(self, nc: Client, prefix: str):
        self.nc, self.prefix = nc, prefix
        self.batches: dict[str, Callable[[Msg], Awaitable[None]]] = {}
        self._sub: Subscription | None = None
        self._lock = asyncio.Lock()

    @classmethod
    def of(cls, nc: Client, prefix: str) -> _Replies:
        by_prefix = _ROUTERS.setdefault(nc, {})
        if prefix not in by_prefix:
            by_prefix[prefix] = cls(nc, prefix)
        return by_prefix[prefix]

    async def add(self, batch_id: str, on_reply: Callable[[Msg], Awaitable[None]]) -> None:
        self.batches[batch_id] = on_reply
        async with self._lock:
            if self._sub is None:
                self._sub = await self.nc.subscribe(f"{self.prefix}.>", cb=self._route)

    def remove(self, batch_id: str) -> None:
        self.batches.pop(batch_id, None)

    async def _route(self, msg: Msg) -> None:
        batch_id = msg.subject[len(self.prefix) + 1:].split(".", 1)[0]
        if (on_reply := self.batches.get(batch_id)) is not None:
            await on_reply(msg)


class FastBatch:
    def __init__(
        self,
        nc: Client,
        *,
        flow: int = 500,  # the most the server grants: fewer acks, less of its CPU per message
        max_outstanding_acks: int = 2,
        gap_mode: GapMode | str = GapMode.FAIL,
        ack_timeout: float = 5.0,
        ping_interval: float | None = None,
        inbox_prefix: str | None = None,
        batch_id: str | None = None,
        on_problem: Callable[[FlowGap | FlowError], None] | None = None,
        holds: Holds | None = None,
    ):
        if not 1 <= max_outstanding_acks <= 3:
            raise BatchRefusedError("max_outstanding_acks must be 1, 2 or 3")
        if not 1 <= flow <= 65535:
            raise BatchRefusedError("flow must be 1..65535")
        self.batch_id = batch_id or new_batch_id()
        try:
            check_batch_id(self.batch_id)
        except ValueError as e:
            raise BatchRefusedError(str(e)) from None
        self.gap_mode = GapMode(gap_mode)
        self.requested_flow = flow
        self.max_outstanding_acks = max_outstanding_acks
        self.ack_timeout = ack_timeout
        # A stalled batch must ping well inside the server's batch timeout (default 10 s), or the
        # server drops it while we wait for an ack that was lost.
        self.ping_interval = ping_interval or min(ack_timeout / 4, 0.5)
        self.on_problem = on_problem
        self._holds = holds  # followed: the first message waits while a maintenance hold covers its subject
        self._released = False  # closed by its publisher
        self.held = 0.0  # seconds the batch waited for a hold to end
        self._nc = nc
        self._inbox = inbox_prefix or connection_inbox(nc)
        self._reply_head = reply_prefix(self._inbox, self.batch_id, flow, self.gap_mode)
        self._out = FastOutgoing(nc, self._reply_head)
        self._sub: _Replies | None = None
        self._progress = asyncio.Event()
        self._final: asyncio.Future[PubAck] | None = None
        self._final_op = FastOp.COMMIT
        self._failure: BatchError | None = None
        self._last_problem: FlowGap | FlowError | None = None
        self._subject: str | None = None
        self.seq = 0  # highest sequence sent
        self.ack_seq = 0  # highest sequence acknowledged
        self.flow = flow  # as granted by the server once the first ack arrives
        self.closed = False
        self.acks = 0
        self.pings = 0
        self.stalls = 0
        self.malformed = 0
        self.flow_changes: list[tuple[int, int, int]] = []  # (ack seq, old flow, new flow)
        self.gaps: list[FlowGap] = []
        self.errors: list[FlowError] = []
        self.gap_count = 0
        self.lost = 0
        self.error_count = 0

    # -- sending ---------------------------------------------------------------------------

    async def add(self, subject: str, payload: bytes = b"", headers: dict[str, str] | None = None) -> tuple[int, int]:
        """Send one message; returns (batch_seq, ack_seq): its sequence in the batch and the highest
        sequence the server has acknowledged so far (a plain tuple: this is the hot path).

        The first message waits for the server's first flow ack; later ones wait only when
        `max_outstanding_acks` windows are unacknowledged."""
        if self._failure is not None:
            raise self._failure
        if self.closed:
            raise BatchClosedError(f"batch {self.batch_id} is closed")
        seq = self.seq + 1
        if seq == 1:
            await self._start(subject, payload, headers)
            return 1, self.ack_seq
        self.seq = seq
        await self._out.send(subject, payload, seq, 1, headers)
        if self.ack_seq + self.flow * self.max_outstanding_acks <= seq:
            await self._wait_for_window()
        elif seq % self.flow == 0:
            # Hand each full window to nats-py's flusher now, so the server stores it while we
            # build the next one instead of both sides taking turns at every stall.
            await asyncio.sleep(0)
        return seq, self.ack_seq

    async def commit(self, subject: str, payload: bytes = b"", headers: dict[str, str] | None = None) -> PubAck:
        """Send the last message, stored, and commit the batch."""
        return await self._finish(subject, payload, headers, FastOp.COMMIT)

    async def commit_eob(self) -> PubAck:
        """Commit what was sent without storing another message."""
        if self.seq == 0 or self._subject is None:
            raise BatchRefusedError("an EOB commit needs at least one message (the server refuses it at seq 1)")
        return await self._finish(self._subject, b"", None, FastOp.EOB)

    async def ping(self) -> None:
        """Ask the server to resend its last ack (and report a gap up to the highest seq sent)."""
        if self._subject is None or self.seq == 0:
            raise BatchRefusedError("nothing to ping: the batch has not started")
        self.pings += 1
        await self._out.send(self._subject, b"", self.seq, int(FastOp.PING))

    def skip_seq(self, count: int = 1) -> None:
        """Fault injection: use up sequences without sending them, so the server sees a gap."""
        if self.seq == 0:
            raise BatchRefusedError("cannot skip the first message")
        self.seq += count

    @property
    def in_flight(self) -> bool:
        """Begun, and its outcome not known yet (a follower of holds leaves a server in lame duck mode
        once none of its batches is)."""
        return self.seq > 0 and not self._released and self._failure is None and \
            not (self._final is not None and self._final.done())

    async def close(self) -> None:
        """Stop listening for replies. Does not commit: an open batch is dropped by the server when idle."""
        self.closed = self._released = True
        if self._sub is not None:
            self._sub.remove(self.batch_id)
            self._sub = None

    async def __aenter__(self) -> FastBatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _subscribe(self) -> None:
        if self._sub is None:
            self._sub = _Replies.of(self._nc, self._inbox)
            await self._sub.add(self.batch_id, self._on_reply)

    async def _start(self, subject: str, payload: bytes, headers: dict[str, str] | None) -> None:
        if self._holds is not None:
            self.held = await self._holds.clear(subject, self)
        await self._subscribe()
        self._subject = subject
        self.seq = 1
        self._progress.clear()
        await self._out.send(subject, payload, 1, int(FastOp.START), headers)
        deadline = asyncio.get_running_loop().time() + self.ack_timeout
        while self.acks == 0:
            self._raise_failure()
            if not await self._wait_progress(deadline - asyncio.get_running_loop().time()):
                self.closed = True
                raise BatchTimeoutError(f"no flow ack for the first message of batch {self.batch_id} in {self.ack_timeout}s")

    async def _finish(self, subject: str, payload: bytes, headers: dict[str, str] | None, op: FastOp) -> PubAck:
        if self._failure is not None:
            raise self._failure
        if self.closed:
            raise BatchClosedError(f"batch {self.batch_id} is closed")
        await self._subscribe()
        self.closed = True
        self._subject = self._subject or subject
        self._final = asyncio.get_running_loop().create_future()
        self._final_op = op
        self.seq += 1
        await self._out.send(subject, payload, self.seq, int(op), headers)
        try:
            final = self._final
            await self._wait_with_pings(final.done, "the commit")
            return final.result()
        finally:
            await self.close()

    # -- waiting ---------------------------------------------------------------------------

    async def _wait_for_window(self) -> None:
        self.stalls += 1
        await self._wait_with_pings(
            lambda: self.ack_seq + self.flow * self.max_outstanding_acks > self.seq, f"a flow ack after seq {self.seq}"
        )

    async def _wait_with_pings(self, done: Callable[[], bool], what: str) -> None:
        """Wait until done(); ping every ping_interval; give up at the ack timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ack_timeout
        ping_every = self.ping_interval
        while True:
            self._raise_failure()
            if done():
                return
            left = deadline - loop.time()
            if left <= 0:
                raise BatchTimeoutError(f"batch {self.batch_id}: no reply for {what} in {self.ack_timeout}s")
            if not await self._wait_progress(min(ping_every, left)) and self.seq > 0:
                await self.ping()

    async def _wait_progress(self, timeout: float) -> bool:
        self._progress.clear()
        if timeout <= 0:
            return False
        try:
            await asyncio.wait_for(self._progress.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def _raise_failure(self) -> None:
        if self._failure is not None:
            self.closed = True
            raise self._failure

    # -- replies ---------------------------------------------------------------------------

    async def _on_reply(self, msg: Msg) -> None:
        try:
            reply = reply_of(msg)
        except MalformedReply as e:
            self.malformed += 1
            log.warning("batch %s: %s", self.batch_id, e)
            return
        except NoRespondersError as e:
            self._fail(e)
            return
        match reply:
            case FlowAck():
                self.acks += 1
                if reply.seq > self.ack_seq:
                    self.ack_seq = reply.seq
                if reply.msgs != self.flow:
                    self.flow_changes.append((reply.seq, self.flow, reply.msgs))
                    self.flow = reply.msgs
            case PubAck():
                self._on_puback(reply)
            case FlowGap():
                self.gap_count += 1
                self.lost += reply.lost
                self._problem(reply, self.gaps)
            case FlowError():
                self.error_count += 1
                self._problem(reply, self.errors)
            case ApiError():
                self._fail(error_of(reply))
        self._progress.set()

    def _problem(self, problem: Problem, kept: list[Problem]) -> None:
        self._last_problem = problem
        if len(kept) < KEEP_PROBLEMS:
            kept.append(problem)
        if self.on_problem is not None:
            self.on_problem(problem)

    def _on_puback(self, puback: PubAck) -> None:
        if self._final is not None and self._final.done():
            return
        if self._final is None or self._ended_by(puback):
            # In fail mode the server ends the batch at a gap or an error with a PubAck counting what it
            # stored before: unasked for, or come while the commit waits (the commit itself the gap).
            self._fail(BatchEndedError(self.batch_id, puback, self._last_problem))
        else:
            self._final.set_result(puback)

    def _ended_by(self, puback: PubAck) -> bool:
        if self.gap_mode is not GapMode.FAIL:
            return False
        whole = self.seq if self._final_op is FastOp.COMMIT else self.seq - 1  # an EOB is not stored
        return self._last_problem is not None or (puback.count is not None and puback.count < whole)

    def _fail(self, error: BatchError) -> None:
        if self._failure is None:
            self._failure = error
        if self._final is not None and not self._final.done():
            self._final.set_exception(error)
            self._final.exception()  # retrieved here; _wait_with_pings raises self._failure instead
        self._progress.set()
