"""Reading a stream for a search: an ephemeral pull consumer (no acks, in memory) per range, fetched
500 messages at a time (a push consumer outruns the search and its buffer grows with the stream), the
subject filtered and the start placed by the server; the predicate, the limits and the progress are the
domain's (console/domain/search.py). Newest first reads the range backwards in chunks of sequences,
each chunk oldest first. Nothing stays on the server: each consumer is deleted when its range is read,
or the search stopped."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from typing import Awaitable, Callable

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from console.domain.masking import Shown
from console.errors import StreamMissingError
from console.domain.search import (
    NEWEST, Found, PredicateError, Predicate, SearchProgress, SearchQuery, SearchRefused, message_context,
)

CHUNK = 20_000  # sequences a newest-first pass reads at a time
PROGRESS_EVERY = 1.0  # seconds
IDLE = 2.0  # seconds without a message: the range holds no more for the filter
CLOCK_EVERY = 64  # messages between looks at the clock (the time limit, the progress)
FETCH = 500  # messages a pull asks for: what the search holds at once (its memory stays flat)
INACTIVE = 30.0  # seconds: the server removes a consumer the search lost (a crash) by itself
EPOCH = datetime.fromtimestamp(0, timezone.utc)

Progress = Callable[[SearchProgress], Awaitable[None] | None]


async def search(nc: Client, query: SearchQuery, progress: Progress | None = None,
                 cancelled: Callable[[], bool] = lambda: False, shown: Shown | None = None,
                 on_match: Callable[[Found], None] | None = None) -> tuple[list[Found], SearchProgress]:
    """The matches (in the query's direction) and how the search ended. `shown`: what may be shown of a
    message (masking): the predicate sees only that too, so it cannot find out what is hidden.
    `on_match`: each match handed on as it is found (oldest first only) and none kept: an export's
    memory stays flat whatever it writes."""
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
    state = SearchProgress()
    found: list[Found] = []
    started = time.monotonic()
    told = [started]

    async def tell() -> None:
        state.elapsed = time.monotonic() - started
        if progress is not None:
            done = progress(state)
            if done is not None:
                await done

    if last >= first and query.direction != NEWEST:
        await _read(js, query, first, last, predicate, state, found, started, told, tell, cancelled, shown=shown,
                    on_match=on_match)
    high = last
    while query.direction == NEWEST and high >= first:
        # A chunk of the newest sequences not read yet, never more than the scan limit leaves: the
        # messages scanned are the newest ones; its matches are kept newest first, up to the limit.
        low = max(first, high - min(CHUNK, query.max_scanned - state.scanned) + 1)
        chunk: list[Found] = []
        stop = await _read(js, query, low, high, predicate, state, chunk, started, told, tell, cancelled,
                           all_matches=True, shown=shown)
        found += reversed(chunk)
        if len(found) >= query.max_matches:
            state.stopped_by, state.matched = "max_matches", query.max_matches
            break
        if stop or state.scanned >= query.max_scanned:
            state.stopped_by = state.stopped_by or "max_scanned"
            break
        high = low - 1
    state.elapsed = time.monotonic() - started
    state.stopped_by = state.stopped_by or "end"
    await tell()
    return found[:query.max_matches], state


async def _read(js, query: SearchQuery, low: int, high: int, predicate: Predicate, state: SearchProgress,
                out: list[Found], started: float, told: list[float], tell, cancelled, all_matches: bool = False,
                shown: Shown | None = None, on_match: Callable[[Found], None] | None = None) -> bool:
    """One range, oldest first; True when the search is to stop (a limit, a cancel). all_matches: the
    match limit is the caller's (newest first keeps the newest of a chunk)."""
    needs = predicate.needs
    config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_TIME, opt_start_time=query.since.isoformat()) \
        if query.since and query.direction != NEWEST and low == (query.start_seq or low) and not query.start_seq \
        else ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=low)
    config.ack_policy, config.inactive_threshold, config.mem_storage = AckPolicy.NONE, INACTIVE, True
    sub = await js.pull_subscribe(query.subject or ">", stream=query.stream, config=config)
    batch: list = []
    try:
        timed = query.since is not None or query.until is not None or "time" in needs
        while True:
            if cancelled():
                state.stopped_by = "cancelled"
                return True
            if not batch:
                try:
                    batch = await sub.fetch(FETCH, timeout=IDLE)
                except nats.errors.TimeoutError:
                    return False  # nothing more in the range for the filter
                batch.reverse()
            msg = batch.pop()
            # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>: read here,
            # not through nats-py's metadata (a third of the time per message went there)
            tokens = msg.reply.rsplit(".", 4)
            seq, pending = int(tokens[1]), int(tokens[4])
            stored = datetime.fromtimestamp(int(tokens[3]) / 1e9, timezone.utc) if timed else EPOCH
            if seq > high:
                return False
            if query.until is not None and stored > query.until:
                return query.direction != NEWEST  # oldest first: past the window, done; newest: the next chunk
            state.scanned += 1
            state.bytes += len(msg.data)
            state.reached = seq
            if query.since is None or stored >= query.since:
                headers, data = msg.headers, msg.data
                if shown is not None:
                    masked, data = shown(tuple((headers or {}).items()), data)
                    headers = dict(masked)
                try:
                    if predicate.matches(message_context(msg.subject, seq, stored, headers, data, needs)):
                        state.matched += 1
                        match = Found(seq, msg.subject, stored if timed else
                                      datetime.fromtimestamp(int(tokens[3]) / 1e9, timezone.utc),
                                      tuple((headers or {}).items()), data)
                        if on_match is None:
                            out.append(match)
                        else:
                            on_match(match)
                except PredicateError as e:
                    state.errors += 1
                    if len(state.error_sample) < 5:
                        state.error_sample.append(f"seq {seq}: {e}")
            if state.matched >= query.max_matches and not all_matches or state.scanned >= query.max_scanned \
                    or state.bytes >= query.max_bytes or state.scanned % CLOCK_EVERY == 0:
                now = time.monotonic()
                state.elapsed = now - started
                if (hit := state.limit_hit(query)) is not None and not (all_matches and hit == "max_matches"):
                    state.stopped_by = hit
                    return True
                if now - told[0] >= PROGRESS_EVERY:
                    told[0] = now
                    await tell()
            if seq >= high or pending == 0:  # the range read, or nothing more for the filter
                return False
    finally:
        await _gone(js, sub, query.stream)


async def _gone(js, sub, stream: str) -> None:
    """The consumer deleted now, not after its inactivity threshold."""
    name = getattr(sub, "_consumer", None)
    try:
        await sub.unsubscribe()
    except nats.errors.Error:
        pass
    if name:
        try:
            await js.delete_consumer(stream, name)
        except (nats.js.errors.Error, nats.errors.Error, asyncio.TimeoutError):
            pass
