"""Atomic batch publishing (nats-server 2.12+, stream flag allow_atomic) on nats-py.

One AtomicBatch is one batch: add() messages, then commit() (store the last message),
commit_eob() (commit without storing a marker) or discard(). By default only the first message
and the commit wait for the server; every `wait_every` messages can also wait, so that a
staging failure surfaces before the commit.
"""

from __future__ import annotations

from typing import Mapping

import nats.errors
from nats.aio.client import Client

from console.broker.holds import Holds
from console.broker.replies import error_of, reply_of
from console.broker.wire_out import AtomicOutgoing
from console.domain.atomic_tracker import BATCH_COMMIT, BATCH_ID, BATCH_SEQUENCE, REQUIRED_API_LEVEL
from console.domain.fast_ingest import check_batch_id, new_batch_id
from console.domain.replies import ApiError, PubAck, Reply, Staged
from console.domain.server_versions import first_message_over_the_limit
from console.errors import (BatchClosedError, BatchError, BatchRefusedError, BatchTimeoutError, NoRespondersError,
                            TooManyInflightError)

EOB_API_LEVEL = "4"  # the API level of 2.14, the first release that takes an eob commit
UNSUPPORTED_HEADERS = ("Nats-Expected-Last-Msg-Id",)
SERVER_MAX_MSGS = 1000


class AtomicBatch:
    def __init__(
        self,
        nc: Client,
        *,
        batch_id: str | None = None,
        timeout: float = 5.0,
        wait_every: int = 0,
        max_msgs: int = SERVER_MAX_MSGS,
        holds: Holds | None = None,
    ):
        self.batch_id = batch_id or new_batch_id()
        try:
            check_batch_id(self.batch_id)
        except ValueError as e:
            raise BatchRefusedError(str(e)) from None
        if wait_every < 0 or max_msgs < 1:
            raise BatchRefusedError("wait_every must be >= 0 and max_msgs >= 1")
        self._nc = nc
        self.timeout = timeout
        self.wait_every = wait_every
        self.max_msgs = max_msgs
        self.seq = 0  # messages sent so far
        self.closed = False
        self._last_subject: str | None = None
        self._out = AtomicOutgoing(nc, self.batch_id)
        self._holds = holds  # followed: the first message waits while a maintenance hold covers its subject
        self._settled = False  # its outcome known (committed, refused, unanswered) or dropped by its publisher
        self.held = 0.0  # seconds the batch waited for a hold to end

    def _headers(self, seq: int, extra: Mapping[str, str] | None, commit: str | None = None) -> dict[str, str]:
        headers = {BATCH_ID: self.batch_id, BATCH_SEQUENCE: str(seq)}
        if extra:
            for key in extra:
                if key in UNSUPPORTED_HEADERS:
                    raise BatchRefusedError(f"{key} cannot be used in an atomic batch (the server answers 10177)")
                if key.startswith("Nats-Batch-"):
                    raise BatchRefusedError(f"{key} is set by the publisher")
            headers.update(extra)
        if commit:
            headers[BATCH_COMMIT] = commit
        return headers

    async def _begin(self, subject: str) -> None:
        """Before the first message: no batch begins while a maintenance hold covers its subject."""
        if self.seq == 0 and not self.closed and self._holds is not None:
            self.held = await self._holds.clear(subject, self)

    @property
    def in_flight(self) -> bool:
        """Begun, and its outcome not known yet (a follower of holds leaves a server in lame duck mode
        once none of its batches is)."""
        return self.seq > 0 and not self._settled

    def _next_seq(self) -> int:
        if self.closed:
            raise BatchClosedError(f"batch {self.batch_id} is closed")
        if self.seq >= self.max_msgs:
            raise BatchRefusedError(f"batch {self.batch_id} already has {self.seq} messages, the server allows {self.max_msgs}")
        self.seq += 1
        return self.seq

    async def add(self, subject: str, payload: bytes = b"", headers: Mapping[str, str] | None = None) -> None:
        """Stage one message. The first one (and every wait_every-th) waits for the server."""
        await self._begin(subject)
        seq = self._next_seq()
        hdrs = self._headers(seq, headers)
        self._last_subject = subject
        if seq == 1 or (self.wait_every and seq % self.wait_every == 0):
            reply = await self._request(subject, payload, hdrs)
            if not isinstance(reply, Staged):
                self.closed = True
                raise BatchError(f"unexpected reply to staging message {seq}: {reply}")
        else:
            await self._out.send(subject, payload, seq, hdrs)

    async def commit(self, subject: str, payload: bytes = b"", headers: Mapping[str, str] | None = None) -> PubAck:
        """Send the last message with `Nats-Batch-Commit: 1`: it is stored, then the batch."""
        await self._begin(subject)
        seq = self._next_seq()
        return await self._finish(subject, payload, self._headers(seq, headers, commit="1"))

    async def commit_eob(self) -> PubAck:
        """Commit what was staged with an end-of-batch marker that is not stored nor counted."""
        if self.closed:
            raise BatchClosedError(f"batch {self.batch_id} is closed")
        if self.seq == 0 or self._last_subject is None:
            raise BatchRefusedError("an EOB commit needs at least one staged message (the server answers 10176)")
        # The marker is a message too: it takes the next sequence but is not bound by max_msgs.
        self.seq += 1
        # ADR-50 (rev. 5) asks an eob commit to require API level 3; 2.12.8 is at 3 and refuses eob (10200),
        # so the level that has it, 4 (2.14): an older server refuses with 10185, and says why.
        return await self._finish(self._last_subject, b"", self._headers(self.seq, {REQUIRED_API_LEVEL: EOB_API_LEVEL},
                                                                          commit="eob"))

    def skip_seq(self, count: int = 1) -> None:
        """Fault injection: use up sequences without sending them, so the server sees a gap."""
        if self.seq == 0:
            raise BatchRefusedError("cannot skip the first message")
        self.seq += count

    def discard(self) -> None:
        """Stop here. Nothing is sent: the server abandons the batch after its batch timeout."""
        self.closed = self._settled = True

    async def _finish(self, subject: str, payload: bytes, headers: dict[str, str]) -> PubAck:
        self.closed = True
        try:
            reply = await self._request(subject, payload, headers)
        finally:
            self._settled = True
        if not isinstance(reply, PubAck):
            raise BatchError(f"commit of batch {self.batch_id} got {reply} instead of a PubAck")
        return reply

    async def _request(self, subject: str, payload: bytes, headers: dict[str, str]) -> Reply:
        try:
            return await self._answer(subject, payload, headers)
        except BaseException:
            self._settled = True  # refused, unanswered or cancelled: nothing more comes of it
            raise

    async def _answer(self, subject: str, payload: bytes, headers: dict[str, str]) -> Reply:
        try:
            msg = await self._nc.request(subject, payload, timeout=self.timeout, headers=headers)
        except nats.errors.NoRespondersError:
            self.closed = True
            raise NoRespondersError(f"no stream listens on {subject}") from None
        except nats.errors.TimeoutError:
            self.closed = True
            raise BatchTimeoutError(
                f"no reply to message {headers[BATCH_SEQUENCE]} of batch {self.batch_id} within {self.timeout}s"
                " (a no_ack stream never replies)"
            ) from None
        reply = reply_of(msg)
        if isinstance(reply, ApiError):
            self.closed = True
            if headers[BATCH_SEQUENCE] == "1" and BATCH_COMMIT not in headers and \
                    first_message_over_the_limit(reply.err_code):  # 2.12 calls it incomplete: the same refusal
                raise TooManyInflightError(reply.err_code, reply.description, reply.code, reply.stream)
            raise error_of(reply)
        return reply
