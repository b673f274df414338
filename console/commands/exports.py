"""Searches and exports: a bounded search of a stream, and the files of a search, a table or a report."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from console.decoders.rules import one_decoder
from console.export import SEARCH_COLUMNS, Exporter, export_bytes, format_named, found_row, search_schema, typed_row
from console.commands.base import Asker, Command, Services, bounded, required

if TYPE_CHECKING:
    from console.domain.search import Found, SearchProgress, SearchQuery


@dataclass
class RunSearch(Command[tuple[list["Found"], "SearchProgress"]]):
    """A bounded search of any stream; it reads, so read-only allows it. (matches, how it ended)."""

    name, role, changes_server = "search.run", "viewer", False
    records = "the stream and the whole query (filter, window, expression, limits)"
    query: SearchQuery
    progress: Callable[[SearchProgress], None] | None = None
    cancelled: Callable[[], bool] = lambda: False
    on_match: Callable[[Found], None] | None = None

    @property
    def on_stream(self) -> str:
        return self.query.stream

    @property
    def target(self) -> str:
        return bounded(f"{self.query.stream} {json.dumps(self.query.describe(), default=str)}")

    async def execute(self, services: Services, asker: Asker) -> tuple[list[Found], SearchProgress]:
        return await required(services.search, "search")(asker, self.query, self.progress, self.cancelled, self.on_match)


@dataclass
class ExportSearch(Command[Any]):
    """Matches with the query that found them, masked as shown: those a page holds (the file's bytes),
    or, given a path, a search's matches streamed into that file as they are found ((matches, how it
    ended), as RunSearch)."""

    name, role, changes_server = "export.search", "viewer", False
    records = "the stream, the format, how many matches and the query"
    query: SearchQuery
    fmt: str
    matches: list[Found] | None = None
    path: Path | None = None
    progress: Callable[[SearchProgress], None] | None = None

    def __post_init__(self) -> None:
        format_named(self.fmt)
        if (self.matches is None) == (self.path is None):
            raise ValueError("an export of a search is of the matches held or into a file: one of them")

    @property
    def on_stream(self) -> str:
        return self.query.stream

    @property
    def target(self) -> str:
        held = f" {len(self.matches)} matches" if self.matches is not None else f" to {self.path}"
        return bounded(f"{self.query.stream} {self.fmt}{held} {json.dumps(self.query.describe(), default=str)}")

    async def execute(self, services: Services, asker: Asker) -> Any:
        payloads, stream = services.payloads(asker.payloads), self.query.stream
        one = one_decoder(payloads.decoders, stream) if self.fmt == "parquet" else None
        payload_type = one.arrow_type() if one is not None else None
        schema = search_schema(payload_type) if self.fmt == "parquet" else None
        columns = (*SEARCH_COLUMNS, "raw") if payload_type is not None else SEARCH_COLUMNS

        def row(f: Found) -> dict[str, Any]:  # the payload as its stream's decoder reads it, where it has one
            decoded = payloads.decoded(stream, f.subject, f.headers, f.data)
            if payload_type is None:
                return found_row(f, decoded)
            return typed_row(f, decoded, payload_type)

        if self.matches is not None:
            return export_bytes(self.fmt, (row(f) for f in self.matches), columns, self.query.describe(), schema)
        assert self.path is not None
        exporter = Exporter(self.path, self.fmt, self.query.describe(), columns, schema)
        try:
            oldest_first = self.query.direction != "newest"
            found, state = await required(services.search, "search")(asker, self.query, self.progress, lambda: False,
                                                         (lambda f: exporter.write(row(f))) if oldest_first else None)
            if not oldest_first:  # newest first: kept to be ordered, written now
                for f in found:
                    exporter.write(row(f))
            return found, state
        finally:
            exporter.close()


@dataclass
class ExportTable(Command[bytes]):
    """A table as a page shows it (History's, the Audit trail's), in a format of the registry."""

    name, role, changes_server = "export.csv", "viewer", False  # named when CSV was its one format
    records = "the table and the dates"
    table: str
    period: str  # the dates, as the page chose them
    fmt: str
    rows: Sequence[Mapping[str, Any]]
    columns: Sequence[str]
    filters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        format_named(self.fmt)

    @property
    def target(self) -> str:
        return f"{self.table} {self.period}" + ("" if self.fmt == "csv" else f" {self.fmt}")

    async def execute(self, services: Services, asker: Asker) -> bytes:
        return export_bytes(self.fmt, self.rows, self.columns, self.filters)


@dataclass
class ExportReport(Command[str]):
    """One incident as a Markdown report."""

    name, role, changes_server = "export.report", "viewer", False
    records = "the incident's batch"
    batch_id: str
    stream: str | None
    report: Callable[[], str]

    @property
    def target(self) -> str:
        return self.batch_id

    @property
    def on_stream(self) -> str | None:
        return self.stream

    async def execute(self, services: Services, asker: Asker) -> str:
        return self.report()


def as_file(content: bytes | str) -> io.BytesIO:
    return io.BytesIO(content.encode() if isinstance(content, str) else content)
