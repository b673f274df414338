"""Reading a stream for a search: an ephemeral pull consumer (no acks, in memory) per range, fetched
500 messages at a time (a push consumer outruns the search and its buffer grows with the stream), the
subject filtered and the start placed by the server; the predicate, the limits and the progress are the
domain's (console/domain/search.py). Newest first reads the range backwards in chunks of sequences,
each chunk oldest first. Nothing stays on the server: each consumer is deleted when its range is read,
or the search stopped."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime, timezone
from typing import Any, Awaitable, Callable

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.client import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from console.broker.nats_internals import connection_if_any, consumer_of
from console.domain.masking import MASKED_AS, Shown
from console.domain.search import NEWEST, Found, Predicate, SearchProgress, SearchQuery, SearchRefused
from console.errors import StreamMissingError
from console.predicate_worker import Evaluated, Message, PredicateWorker

CHUNK = 20_000  # sequences a newest-first pass reads at a time
PROGRESS_EVERY = 1.0  # seconds
IDLE = 2.0  # seconds without a message: the range holds no more for the filter
FETCH = 500  # messages a pull asks for at most: what the search holds at once (its memory stays flat)...
FIRST_FETCH = 100  # before the messages' size is known
FETCH_BYTES = 4 << 20  # ...and about this many bytes: large messages are asked for fewer at a time (50 MB of
# 100 KiB messages a pull held the shared connection's other requests behind it for seconds)
INACTIVE = 30.0  # seconds: the server removes a consumer the search lost (a crash) by itself

Progress = Callable[[SearchProgress], Awaitable[None] | None]


async def search(nc: Client, query: SearchQuery, progress: Progress | None = None,
                 cancelled: Callable[[], bool] = lambda: False, shown: Shown | None = None,
                 on_match: Callable[[Found], None] | None = None,
                 decoders: str | None = None) -> tuple[list[Found], SearchProgress]:
    """The matches (in the query's direction) and how the search ended. `shown`: what may be shown of a
    message (masking): the predicate sees only that too, so it cannot find out what is hidden.
    `on_match`: each match handed on as it is found (oldest first only) and none kept: an export's
    memory stays flat whatever it writes. The predicate runs in a worker process of its own
    (console/predicate_worker.py), killed when the search ends however it ends; `decoders` (the
    operator's file) says how it reads each message's payload."""
    if on_match is not None and query.direction == NEWEST:
        raise SearchRefused("an export reads oldest first")
    js = nc.jetstream()
    try:
        info = await js.stream_info(query.stream)
    except nats.js.errors.NotFoundError:
        raise StreamMissingError(f"no stream {query.stream} on this server (or this account)") from None
    first, last = max(info.state.first_seq, query.start_seq or 1), min(info.state.last_seq,
                                                                          query.end_seq or info.state.last_seq)
    predicate = Predicate(query.where)
    worker = await PredicateWorker.start(predicate.text, query.stream, decoders) if predicate.text else None
    try:
        search = _Search(js, query, worker, progress, cancelled, shown)
        if last >= first and query.direction != NEWEST:
            await search.read(first, last, search.found, on_match=on_match)
        high = last
        while query.direction == NEWEST and high >= first:
            # A chunk of the newest sequences not read yet, never more than the scan limit leaves: the
            # messages scanned are the newest ones; its matches are kept newest first, up to the limit.
            state = search.state
            low = max(first, high - min(CHUNK, query.max_scanned - state.scanned) + 1)
            chunk: list[Found] = []
            stop = await search.read(low, high, chunk, all_matches=True)
            search.found += reversed(chunk)
            if len(search.found) >= query.max_matches:
                state.stopped_by, state.matched = "max_matches", query.max_matches
                break
            if stop or state.scanned >= query.max_scanned:
                state.stopped_by = state.stopped_by or "max_scanned"
                break
            high = low - 1
    finally:
        if worker is not None:
            await worker.close()
    state = search.state
    state.elapsed = time.monotonic() - search.started
    state.stopped_by = state.stopped_by or "end"
    await search.tell()
    return search.found[:query.max_matches], state


class _Search:
    """One search's reading: its ranges, its progress, its clock."""

    def __init__(self, js: JetStreamContext, query: SearchQuery, worker: PredicateWorker | None, progress: Progress | None,
                 cancelled: Callable[[], bool], shown: Shown | None):
        self.js, self.query, self.worker, self.progress, self.cancelled, self.shown = \
            js, query, worker, progress, cancelled, shown
        self.since = _ns(query.since) if query.since is not None else None
        self.until = _ns(query.until) if query.until is not None else None
        self.state = SearchProgress()
        self.found: list[Found] = []
        self.started = time.monotonic()
        self.told = self.started
        self.fetch = FIRST_FETCH

    async def tell(self) -> None:
        self.state.elapsed = time.monotonic() - self.started
        if self.progress is not None:
            done = self.progress(self.state)
            if done is not None:
                await done

    def _time_up(self) -> bool:
        self.state.elapsed = time.monotonic() - self.started
        return self.state.elapsed >= self.query.max_seconds

    async def read(self, low: int, high: int, out: list[Found], all_matches: bool = False,
                   on_match: Callable[[Found], None] | None = None) -> bool:
        """One range, oldest first; True when the search is to stop (a limit, a cancel). all_matches: the
        match limit is the caller's (newest first keeps the newest of a chunk)."""
        query, state = self.query, self.state
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=query.since) \
            if query.since and query.direction != NEWEST and low == (query.start_seq or low) and not query.start_seq \
            else ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=low)
        config.ack_policy, config.inactive_threshold, config.mem_storage = AckPolicy.NONE, INACTIVE, True
        sub = await self.js.pull_subscribe(query.subject or ">", stream=query.stream, config=config)
        puller = await _Pull.open(self.js, query.stream, consumer_of(sub))
        try:
            while True:
                if self.cancelled():
                    state.stopped_by = "cancelled"
                    return True
                if self._time_up():
                    state.stopped_by = "max_seconds"
                    return True
                try:
                    wait = min(IDLE, max(0.05, query.max_seconds - state.elapsed))
                    batch = await (puller.fetch(self.fetch, wait) if puller else sub.fetch(self.fetch, timeout=wait))
                except asyncio.TimeoutError:  # nats-py's own subclass, or the plain one past its deadline
                    if self._time_up() or (await sub.consumer_info()).num_pending:
                        continue  # slow, not done: a loaded machine took longer than IDLE to deliver a pull
                    return False  # nothing more in the range for the filter
                size = sum(len(m.data) for m in batch) // max(1, len(batch))
                self.fetch = max(1, min(FETCH, FETCH_BYTES // max(1, size)))
                stop, ended = await self._batch(batch, high, out, all_matches, on_match)
                if time.monotonic() - self.told >= PROGRESS_EVERY:
                    self.told = time.monotonic()
                    await self.tell()
                if stop:
                    return True
                if ended:
                    return False
        finally:
            if puller is not None:
                await puller.close()
            await _gone(self.js, sub, query.stream)

    async def _batch(self, batch: list[Msg], high: int, out: list[Found], all_matches: bool,
                     on_match: Callable[[Found], None] | None) -> tuple[bool, bool]:
        """One fetch's messages: (stop the search, the range is read)."""
        query, state = self.query, self.state
        candidates: list[tuple[Message, int, int]] = []  # (message, scanned then, bytes then)
        before = (state.scanned, state.bytes)
        stop = ended = False
        for msg in batch:
            # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>: read here,
            # not through nats-py's metadata (a third of the time per message went there)
            tokens = msg.reply.rsplit(".", 4)
            seq, ns, pending = int(tokens[1]), int(tokens[3]), int(tokens[4])
            if seq > high:
                ended = True
                break
            if self.until is not None and ns > self.until:
                ended, stop = True, query.direction != NEWEST  # oldest first: past the window, done
                break
            if self._time_up():
                state.stopped_by, stop = "max_seconds", True
                break
            state.scanned += 1
            state.reached = seq
            headers, data = msg.headers, msg.data
            if headers and MASKED_AS in headers:  # the console's own mark: never a publisher's
                headers = {k: v for k, v in headers.items() if k != MASKED_AS}
            if self.shown is not None:  # before anything counts it: the progress line never tells a hidden size
                masked, data = self.shown(tuple((headers or {}).items()), data, msg.subject)
                headers = dict(masked)
            state.bytes += len(data)
            if self.since is None or ns >= self.since:
                candidates.append(((msg.subject, seq, ns, headers, data), state.scanned, state.bytes))
            if state.scanned >= query.max_scanned or state.bytes >= query.max_bytes:
                state.stopped_by, stop = state.limit_hit(query), True
                break
            if seq >= high or pending == 0:  # the range read, or nothing more for the filter
                ended = True
                break
        if self.worker is None:
            evaluated = Evaluated(len(candidates), frozenset(range(len(candidates))), ())
        elif candidates:
            left = query.max_seconds - (time.monotonic() - self.started)
            found = await self.worker.evaluate([c[0] for c in candidates], left, self.cancelled)
            if found is None:  # killed: past the limit, or cancelled; what it got through is not known
                state.scanned, state.bytes = before
                state.stopped_by = "cancelled" if self.cancelled() else "max_seconds"
                return True, ended
            evaluated = found
        else:
            return stop, ended
        for index, why in evaluated.errors:
            state.errors += 1
            if len(state.error_sample) < 5:
                state.error_sample.append(f"seq {candidates[index][0][1]}: {why}")
        for index in range(evaluated.evaluated):
            if index not in evaluated.matched:
                continue
            (subject, seq, ns, headers, data), scanned, read = candidates[index]
            state.matched += 1
            match = Found(seq, subject, datetime.fromtimestamp(ns / 1e9, timezone.utc),
                          tuple((headers or {}).items()), data)
            if on_match is None:
                out.append(match)
            else:
                on_match(match)
            if state.matched >= query.max_matches and not all_matches:
                state.scanned, state.bytes, state.reached = scanned, read, seq  # what was read to find it
                state.stopped_by = "max_matches"
                return True, ended
        if evaluated.evaluated < len(candidates):  # the worker's clock ran out first
            state.scanned, state.bytes = candidates[evaluated.evaluated - 1][1:] if evaluated.evaluated else before
            state.stopped_by = "max_seconds"
            return True, ended
        return stop, ended


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1e9)


class _Pull:
    """Pull requests on the search's consumer, answered on one subscription of its own: nats-py's fetch
    waits for each message with a timer task of its own, five event-loop turns a message, which was the
    search's largest cost. A request asks for what is there now (no_wait); one that finds nothing asks
    again, waiting for up to `wait` seconds (the server's 408, or 404 at once: nothing there)."""

    def __init__(self, nc: Client, subject: str):
        self.nc, self.subject = nc, subject
        self.inbox = nc.new_inbox()
        self.got: list[Msg] = []
        self.want = 0
        self.done = asyncio.Event()
        self.sub: Any = None

    @classmethod
    async def open(cls, js: JetStreamContext, stream: str, consumer: str | None) -> _Pull | None:
        nc = connection_if_any(js)
        if consumer is None or nc is None:  # not as nats-py names them: its own fetch
            return None
        pull = cls(nc, f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}")
        pull.sub = await nc.subscribe(pull.inbox, cb=pull._on)
        return pull

    async def _on(self, msg: Msg) -> None:
        if not msg.data and msg.headers and msg.headers.get("Status"):  # 404 nothing there, 408 waited, 409
            self.done.set()
            return
        if not (msg.reply or "").startswith("$JS.ACK."):  # not the consumer's: anyone may publish to an inbox
            return
        self.got.append(msg)
        if len(self.got) >= self.want:
            self.done.set()

    async def fetch(self, batch: int, wait: float) -> list[Msg]:
        """Up to `batch` messages: those there now, else the first to come within `wait` seconds
        (nats.errors.TimeoutError when none came, as nats-py's fetch says it)."""
        for request in ({"batch": batch, "no_wait": True}, {"batch": batch, "expires": int(wait * 1e9)}):
            if self.got:  # an earlier request's, come late: in the consumer's order, before any new one
                break
            self.want = batch
            self.done.clear()
            await self.nc.publish(self.subject, json.dumps(request).encode(), reply=self.inbox)
            try:
                await asyncio.wait_for(self.done.wait(), wait + 1.0)
            except asyncio.TimeoutError:
                pass
        if not self.got:
            raise nats.errors.TimeoutError
        got, self.got = self.got, []
        return got

    async def close(self) -> None:
        try:
            await self.sub.unsubscribe()
        except nats.errors.Error:
            pass


async def _gone(js: JetStreamContext, sub: JetStreamContext.PullSubscription, stream: str) -> None:
    """The consumer deleted now, not after its inactivity threshold."""
    name = consumer_of(sub)
    try:
        await sub.unsubscribe()
    except nats.errors.Error:
        pass
    if name:
        try:
            await js.delete_consumer(stream, name)
        except (nats.js.errors.Error, nats.errors.Error, asyncio.TimeoutError):
            pass
