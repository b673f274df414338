"""Export formats, one class each: a new format is one class here, and History, Audit, Search and the
CLI offer it. Rows are written as they come, a few thousand held at most, so memory stays flat
whatever the size, and the filters that made an export travel with it: CSV's first line (a cell
'# filters' and their JSON in one formula-safe cell, through the CSV writer like every other line),
JSON lines' first line (`{"filters": ...}`), Parquet's metadata (`batch-console.filters`). CSV cells a
spreadsheet would run as a formula get a leading apostrophe. What is exported has been masked as it
would be shown."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any, ClassVar, Iterable, Mapping, Sequence

from console.domain.display import spreadsheet_cell
from console.decoders.rules import Decoded
from console.domain.search import Found

SEARCH_COLUMNS = ("seq", "subject", "time", "batch", "headers", "payload", "encoding")
ROW_GROUP = 10_000
FILTERS_KEY = "batch-console.filters"


def found_row(f: Found, decoded: Decoded | None = None) -> dict[str, Any]:
    """A match as an export row: the payload decoded by its stream's decoder (as JSON, `encoding` naming
    the decoder), else as text when it is UTF-8, else base64 (`encoding` saying why it was not decoded)."""
    if decoded is not None and decoded.error is None:
        payload = json.dumps(decoded.value, ensure_ascii=False, default=_bytes_as_json)
        return {"seq": f.seq, "subject": f.subject, "time": f.time.isoformat(), "batch": f.batch_id,
                "headers": json.dumps(dict(f.headers), ensure_ascii=False), "payload": payload,
                "encoding": decoded.decoder}
    try:
        payload, encoding = f.data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(f.data).decode(), "base64"
    if decoded is not None:
        encoding += f" (not decoded as {decoded.decoder}: {decoded.error})"
    return {"seq": f.seq, "subject": f.subject, "time": f.time.isoformat(), "batch": f.batch_id,
            "headers": json.dumps(dict(f.headers), ensure_ascii=False), "payload": payload, "encoding": encoding}


def _bytes_as_json(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    raise TypeError(type(value).__name__)


def _plain(value: Any) -> Any:
    """A cell as text formats write it: times in ISO 8601, a missing value (None, NaN, NaT) as None."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value) in ("NaT", "<NA>"):
        return None
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if hasattr(value, "item"):  # a numpy scalar
        return value.item()
    return value


class ExportFormat:
    """Writes rows of the given columns to a binary file; close() finishes the file (not `out`)."""

    name: ClassVar[str]  # what --format and the pages' format lists call it
    label: ClassVar[str]  # what a download button says
    media_type: ClassVar[str]

    def __init__(self, out: IO[bytes], columns: Sequence[str], filters: Mapping[str, Any]):
        self.out, self.columns, self.rows = out, tuple(columns), 0
        self.filters_text = json.dumps(filters, default=str, ensure_ascii=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        FORMATS[cls.name] = cls

    def write(self, row: Mapping[str, Any]) -> None:
        self.rows += 1
        self._write(row)

    def _write(self, row: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


FORMATS: dict[str, type[ExportFormat]] = {}  # name -> class, in the order written here


class Csv(ExportFormat):
    name, label, media_type = "csv", "CSV", "text/csv"

    def __init__(self, out: IO[bytes], columns: Sequence[str], filters: Mapping[str, Any]):
        super().__init__(out, columns, filters)
        self._text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
        self._csv = csv.writer(self._text)
        self._csv.writerow(["# filters", spreadsheet_cell(self.filters_text)])
        self._csv.writerow(self.columns)

    def _write(self, row: Mapping[str, Any]) -> None:
        self._csv.writerow([spreadsheet_cell(_plain(row.get(c))) for c in self.columns])

    def close(self) -> None:
        self._text.flush()
        self._text.detach()  # the binary file stays open for its owner


class JsonLines(ExportFormat):
    name, label, media_type = "jsonl", "JSON lines", "application/jsonl"

    def __init__(self, out: IO[bytes], columns: Sequence[str], filters: Mapping[str, Any]):
        super().__init__(out, columns, filters)
        out.write(('{"filters": ' + self.filters_text + "}\n").encode())

    def _write(self, row: Mapping[str, Any]) -> None:
        line = json.dumps({c: _plain(row.get(c)) for c in self.columns}, default=str, ensure_ascii=False)
        self.out.write((line + "\n").encode())


class Parquet(ExportFormat):
    """Typed columns: the schema given, else the one the first row group shows."""

    name, label, media_type = "parquet", "Parquet", "application/vnd.apache.parquet"

    def __init__(self, out: IO[bytes], columns: Sequence[str], filters: Mapping[str, Any], schema: Any = None):
        super().__init__(out, columns, filters)
        self._schema: Any = schema
        self._writer: Any = None  # a pyarrow.parquet.ParquetWriter once the first row group is typed
        self._pending: list[dict[str, Any]] = []

    def _write(self, row: Mapping[str, Any]) -> None:
        self._pending.append({c: row.get(c) for c in self.columns})
        if len(self._pending) >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa  # pyarrow ships no type information (pyproject.toml's mypy overrides)
        import pyarrow.parquet as pq

        if self._writer is None:
            table = pa.Table.from_pylist(self._pending, schema=self._schema)
            if not self._pending and self._schema is None:  # no row to type a column by: text
                table = pa.table({c: pa.array([], pa.string()) for c in self.columns})
            self._schema = table.schema.with_metadata({FILTERS_KEY: self.filters_text})
            self._writer = pq.ParquetWriter(self.out, self._schema)
            self._writer.write_table(table.cast(self._schema))
        elif self._pending:
            self._writer.write_table(pa.Table.from_pylist(self._pending, schema=self._schema))
        self._pending = []

    def close(self) -> None:
        self._flush()
        if self._writer is not None:
            self._writer.close()


def format_named(name: str) -> type[ExportFormat]:
    """The format called `name`; ValueError naming the formats there are."""
    if name not in FORMATS:
        raise ValueError(f"an export is {', '.join(FORMATS)}, not {name[:40]!r}")
    return FORMATS[name]


def search_schema(payload: Any = None) -> Any:
    """A search's Parquet columns: text, but the payload typed by its schema when given (and a `raw`
    column then, for the messages that did not decode)."""
    import pyarrow as pa

    if payload is None:
        return pa.schema([("seq", pa.int64()), *((c, pa.string()) for c in SEARCH_COLUMNS[1:])])
    return pa.schema([("seq", pa.int64()), *((c, payload if c == "payload" else pa.string()) for c in SEARCH_COLUMNS[1:]),
                      ("raw", pa.binary())])


def typed_row(f: Found, decoded: Decoded | None, payload: Any) -> dict[str, Any]:
    """A match as a typed Parquet row: the decoded message in the payload's columns, or its raw bytes
    (and why) where it did not decode."""
    from console.decoders.arrow import conform

    row = found_row(f, decoded)
    if decoded is not None and decoded.error is None:
        return {**row, "payload": conform(decoded.value, payload), "raw": None}
    return {**row, "payload": None, "raw": f.data}


def open_export(out: IO[bytes], fmt: str, columns: Sequence[str], filters: Mapping[str, Any],
                schema: Any = None) -> ExportFormat:
    cls = format_named(fmt)
    return Parquet(out, columns, filters, schema) if cls is Parquet else cls(out, columns, filters)


def export_bytes(fmt: str, rows: Iterable[Mapping[str, Any]], columns: Sequence[str], filters: Mapping[str, Any],
                 schema: Any = None) -> bytes:
    """A whole export in memory, for a download."""
    out = io.BytesIO()
    writer = open_export(out, fmt, columns, filters, schema)
    for row in rows:
        writer.write(row)
    writer.close()
    return out.getvalue()


class Exporter:
    """Search matches streamed to a file (the CLI's --output)."""

    def __init__(self, path: Path | str, fmt: str, filters: Mapping[str, Any],
                 columns: Sequence[str] = SEARCH_COLUMNS, schema: Any = None):
        format_named(fmt)
        self._file = open(path, "wb")
        schema = schema if schema is not None or fmt != "parquet" else search_schema()
        self._export = open_export(self._file, fmt, columns, filters, schema)

    @property
    def rows(self) -> int:
        return self._export.rows

    def write(self, row: Mapping[str, Any]) -> None:
        self._export.write(row)

    def close(self) -> None:
        self._export.close()
        self._file.close()
