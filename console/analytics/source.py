"""A Spark data source for the console's event log in JetStream, registered as "jetstream".

    spark.dataSource.register(JetStreamDataSource)
    spark.read.format("jetstream").option("servers", url).option("start_seq", 1).load()

Batch reads cover a sequence range; the streaming reader's offsets are stream sequences
({"seq": last sequence read}). A range is split into `partitions` sub-ranges that executors
read in parallel, each with its own connection and an ordered consumer starting at its first
sequence. Options: servers, stream, subject_filter (a suffix of `<prefix>.`, default ">"),
subject_prefix, start_seq, end_seq, partitions, connect_timeout, idle_timeout, event_secret (the
console's event key: records it does not verify are skipped; named so Spark redacts it) and the
credentials creds, nkey, token, user, password, tls_ca, tls_cert, tls_key.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from console.analytics.schema import EVENT_SCHEMA, skipped_row, to_row
from console.config import ConnectionSettings
from console.errors import EventLogMissingError


@dataclass(frozen=True)
class SeqRange(InputPartition):
    first: int
    last: int


@dataclass(frozen=True)
class SourceOptions:
    connection: ConnectionSettings
    stream: str
    subject: str
    start_seq: int
    end_seq: int | None
    partitions: int
    idle_timeout: float
    event_key: bytes | None = field(default=None, repr=False)  # records it does not verify are skipped

    @classmethod
    def parse(cls, options: dict) -> SourceOptions:
        get = options.get
        servers = tuple(s.strip() for s in (get("servers") or "nats://127.0.0.1:4222").split(",") if s.strip())
        connection = ConnectionSettings(
            servers=servers, name="batch-console-spark", creds_file=get("creds"), nkey_seed_file=get("nkey"),
            token=get("token"), user=get("user"), password=get("password"), tls_ca=get("tls_ca"),
            tls_cert=get("tls_cert"), tls_key=get("tls_key"), connect_timeout=float(get("connect_timeout") or 5),
        )
        prefix = get("subject_prefix") or "batch_console.events"
        end = get("end_seq")
        return cls(
            connection=connection,
            stream=get("stream") or "BATCH_CONSOLE_EVENTS",
            subject=f"{prefix}.{get('subject_filter') or '>'}",
            start_seq=max(1, int(get("start_seq") or 1)),
            end_seq=int(end) if end not in (None, "") else None,
            partitions=max(1, int(get("partitions") or 2)),
            idle_timeout=float(get("idle_timeout") or 5),
            event_key=get("event_secret").encode() if get("event_secret") else None,
        )


def split(first: int, last: int, parts: int) -> list[SeqRange]:
    """[first, last] in up to `parts` contiguous ranges; none when the range is empty."""
    if last < first:
        return []
    size = -(-(last - first + 1) // parts)
    return [SeqRange(lo, min(lo + size - 1, last)) for lo in range(first, last + 1, size)]


async def _connect(options: SourceOptions):
    from console.broker.connection import connect  # imported on the executor, where it runs

    return await connect(options.connection, give_up_after=options.connection.connect_timeout + 1,
                         allow_reconnect=False)  # NatsUnreachableError names the URL


async def _stream_bounds(options: SourceOptions) -> tuple[int, int]:
    """(first, last) sequence of the event log; EventLogMissingError when there is none."""
    import nats.js.errors

    nc = await _connect(options)
    try:
        state = (await nc.jetstream().stream_info(options.stream)).state
        return state.first_seq, state.last_seq
    except nats.js.errors.NotFoundError:
        raise EventLogMissingError(options.stream) from None
    finally:
        await nc.close()


async def _read_range(options: SourceOptions, part: SeqRange) -> list[tuple]:
    import nats.errors
    import nats.js.errors
    from nats.js.api import ConsumerConfig, DeliverPolicy

    from console.domain.events import MalformedEvent, event_from_json
    from console.domain.signing import forgery

    nc = await _connect(options)
    rows: list[tuple] = []
    try:
        js = nc.jetstream()
        try:  # the first matching message at or after `first`, without a consumer
            head = await js.get_msg(options.stream, seq=part.first, subject=options.subject, next=True)
        except nats.js.errors.NotFoundError:
            return rows
        if head.seq > part.last:
            return rows
        sub = await js.subscribe(
            options.subject, stream=options.stream, ordered_consumer=True,
            config=ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=head.seq),
        )
        try:
            while True:
                try:
                    msg = await sub.next_msg(timeout=options.idle_timeout)
                except nats.errors.TimeoutError:
                    raise RuntimeError(
                        f"jetstream source: no message for {options.idle_timeout}s while reading "
                        f"{options.stream} {part.first}..{part.last}"
                    ) from None
                seq = msg.metadata.sequence.stream
                if seq > part.last:
                    break
                forged = options.event_key and forgery(options.event_key, msg.data, msg.headers)
                try:
                    if forged:
                        raise MalformedEvent(forged)
                    rows.append(to_row(seq, event_from_json(msg.data)))
                except MalformedEvent as e:  # not the collector's event: the job counts and drops the marker
                    rows.append(skipped_row(seq, e.reason, msg.metadata.timestamp))
                if seq == part.last or msg.metadata.num_pending == 0:
                    break
        finally:
            await sub.unsubscribe()
    finally:
        await nc.close()
    return rows


class JetStreamBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[SeqRange]:
        first, last = asyncio.run(_stream_bounds(self.options))
        end = last if self.options.end_seq is None else min(self.options.end_seq, last)
        return split(max(first, self.options.start_seq), end, self.options.partitions)

    def read(self, partition: SeqRange) -> Iterator[tuple]:
        # An executor's own process: no event loop is running here.
        yield from asyncio.run(_read_range(self.options, partition))


class JetStreamStreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def initialOffset(self) -> dict:
        return {"seq": self.options.start_seq - 1}

    def latestOffset(self, start: dict, limit=None) -> dict:
        _, last = asyncio.run(_stream_bounds(self.options))
        return {"seq": max(last, start["seq"])}

    def partitions(self, start: dict, end: dict) -> list[SeqRange]:
        return split(start["seq"] + 1, end["seq"], self.options.partitions)

    def read(self, partition: SeqRange) -> Iterator[tuple]:
        yield from asyncio.run(_read_range(self.options, partition))


class JetStreamDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "jetstream"

    def schema(self) -> StructType:
        return EVENT_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return JetStreamBatchReader(SourceOptions.parse(dict(self.options)))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return JetStreamStreamReader(SourceOptions.parse(dict(self.options)))
