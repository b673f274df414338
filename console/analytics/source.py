"""A Spark data source for the console's event log in JetStream, registered as "jetstream".

    spark.dataSource.register(JetStreamDataSource)
    spark.read.format("jetstream").option("servers", url).option("start_seq", 1).load()

Batch reads cover a sequence range; the streaming reader's offsets are stream sequences
({"seq": last sequence read}). A range is split into `partitions` sub-ranges that executors
read in parallel, each with its own connection and an ordered consumer starting at its first
sequence. Options: stream, subject_filter (a suffix of `<prefix>.`, default ">"), subject_prefix,
start_seq, end_seq, partitions, idle_timeout, event_secret (the console's event key: records it
does not verify are skipped; named so Spark redacts it) and every connection setting by its name
in console.config.ConnectionSettings (servers, creds, token, tls_ca, ...; see spark_options there).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from console.analytics.schema import EVENT_SCHEMA, skipped_row, to_row
from console.config import SPARK_EVENT_KEY, SPARK_EVENT_SYSTEM, SPARK_KEY_SOURCE, ConnectionSettings
from console.errors import ConfigError


@dataclass(frozen=True)
class SeqRange(InputPartition):
    first: int
    last: int


def _range(partition: InputPartition) -> SeqRange:
    """Spark hands a reader back the partitions it made: ours, each a SeqRange."""
    if not isinstance(partition, SeqRange):
        raise TypeError(f"not a partition of the event log's source: {partition!r}")
    return partition


@dataclass(frozen=True)
class SourceOptions:
    """The data source's options, typed: what the job is given and what an executor reads back from
    Spark's text options (to_options and parse are each other's inverse)."""

    connection: ConnectionSettings = field(default_factory=lambda: ConnectionSettings(name="batch-console-spark"))
    stream: str = "BATCH_CONSOLE_EVENTS"
    prefix: str = "batch_console.events"
    subject_filter: str = ">"
    start_seq: int = 1
    end_seq: int | None = None
    partitions: int = 2
    idle_timeout: float = 5.0
    event_key: bytes | None = field(default=None, repr=False)  # records it does not verify are skipped
    key_source: str = ""  # where the key came from, for the error a wrong key makes
    event_system: str | None = None  # a systems file's system whose log it reads: records signed for another skipped

    @property
    def subject(self) -> str:
        return f"{self.prefix}.{self.subject_filter}"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        get = options.get
        try:
            connection = ConnectionSettings.from_options(options, name="batch-console-spark")
            end = get("end_seq")
            return cls(
                connection=connection,
                stream=get("stream") or cls.stream,
                prefix=get("subject_prefix") or cls.prefix,
                subject_filter=get("subject_filter") or cls.subject_filter,
                start_seq=max(1, int(get("start_seq") or 1)),
                end_seq=int(end) if end not in (None, "") else None,
                partitions=max(1, int(get("partitions") or cls.partitions)),
                idle_timeout=float(get("idle_timeout") or cls.idle_timeout),
                event_key=key.encode() if (key := get(SPARK_EVENT_KEY)) else None,
                key_source=get(SPARK_KEY_SOURCE) or "",
                event_system=get(SPARK_EVENT_SYSTEM) or None,
            )
        except ValueError as e:
            raise ConfigError(f"jetstream source: {e}") from None

    def to_options(self) -> dict[str, str]:
        """Spark's text options (it redacts the secret ones in its plans)."""
        options = {**self.connection.options(), "stream": self.stream, "subject_prefix": self.prefix,
                   "subject_filter": self.subject_filter, "start_seq": str(self.start_seq),
                   "partitions": str(self.partitions), "idle_timeout": str(self.idle_timeout),
                   SPARK_KEY_SOURCE: self.key_source}
        if self.end_seq is not None:
            options["end_seq"] = str(self.end_seq)
        if self.event_key:
            options[SPARK_EVENT_KEY] = self.event_key.decode()
        if self.event_system:
            options[SPARK_EVENT_SYSTEM] = self.event_system
        return options


def split(first: int, last: int, parts: int) -> list[SeqRange]:
    """[first, last] in up to `parts` contiguous ranges; none when the range is empty."""
    if last < first:
        return []
    size = -(-(last - first + 1) // parts)
    return [SeqRange(lo, min(lo + size - 1, last)) for lo in range(first, last + 1, size)]


async def _stream_bounds(options: SourceOptions) -> tuple[int, int]:
    from console.broker.log_reader import stream_bounds  # imported where it runs (the driver)

    return await stream_bounds(options.connection, options.stream)


async def _first_history_seq(options: SourceOptions, first: int) -> int | None:
    """The first sequence >= `first` of an event other than the collector's heartbeat, or None."""
    from console.broker.log_reader import first_seq_on
    from console.domain.events import NOT_HISTORY, EventKind

    subjects = [f"{options.prefix}.{kind.value}.>" for kind in EventKind if kind not in NOT_HISTORY]
    return await first_seq_on(options.connection, options.stream, subjects, first)


async def _read_range(options: SourceOptions, part: SeqRange) -> list[tuple[Any, ...]]:
    """A partition's rows on an executor: each record decoded, or a marker the job counts and drops when
    it is not an event the collector signed."""
    from console.broker.log_reader import read_range
    from console.domain.events import MalformedEvent, verified_event

    rows = []
    for record in await read_range(options.connection, options.stream, options.subject, part.first, part.last,
                                   options.idle_timeout):
        try:
            rows.append(to_row(record.seq, verified_event(options.event_key, record.data, record.headers,
                                                                   options.event_system)))
        except MalformedEvent as e:
            rows.append(skipped_row(record.seq, e.reason, record.stored))
    return rows


class JetStreamBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> list[SeqRange]:
        first, last = asyncio.run(_stream_bounds(self.options))
        end = last if self.options.end_seq is None else min(self.options.end_seq, last)
        return split(max(first, self.options.start_seq), end, self.options.partitions)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        # An executor's own process: no event loop is running here.
        yield from asyncio.run(_read_range(self.options, _range(partition)))


class JetStreamStreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def initialOffset(self) -> dict[str, Any]:
        return {"seq": self.options.start_seq - 1}

    def latestOffset(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        _, last = asyncio.run(_stream_bounds(self.options))
        return {"seq": max(last, start["seq"])}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[SeqRange]:
        return split(start["seq"] + 1, end["seq"], self.options.partitions)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        yield from asyncio.run(_read_range(self.options, _range(partition)))


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
