"""Exports, streamed: rows are written as they come, a few thousand held at most, so memory stays flat
whatever the size. CSV (its cells safe against spreadsheet formulas, its first line the filters that
made it: a cell '# filters' and the filters' JSON in one cell), JSON lines (its first line the filters), Parquet (the filters in its metadata).
What is exported has been masked as it would be shown."""

from __future__ import annotations

import base64
import csv
import json
from pathlib import Path
from typing import IO, Any

from console.domain.display import spreadsheet_cell
from console.domain.search import Found

FORMATS = ("csv", "jsonl", "parquet")
COLUMNS = ("seq", "subject", "time", "batch", "headers", "payload", "encoding")
ROW_GROUP = 10_000


def found_row(f: Found) -> dict[str, Any]:
    """A match as an export row: the payload as text when it is UTF-8, else base64."""
    try:
        payload, encoding = f.data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(f.data).decode(), "base64"
    return {"seq": f.seq, "subject": f.subject, "time": f.time.isoformat(), "batch": f.batch_id,
            "headers": json.dumps(dict(f.headers), ensure_ascii=False), "payload": payload, "encoding": encoding}


class Exporter:
    def __init__(self, path: Path | str, fmt: str, filters: dict[str, Any]):
        if fmt not in FORMATS:
            raise ValueError(f"an export is {', '.join(FORMATS)}")
        self.fmt, self.rows = fmt, 0
        self._pending: list[dict[str, Any]] = []
        filters_text = json.dumps(filters, default=str, ensure_ascii=False)
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            self._schema = pa.schema([("seq", pa.int64()), ("subject", pa.string()), ("time", pa.string()),
                                      ("batch", pa.string()), ("headers", pa.string()), ("payload", pa.string()),
                                      ("encoding", pa.string())], metadata={"batch-console.filters": filters_text})
            self._parquet = pq.ParquetWriter(str(path), self._schema)
            return
        self._file: IO[str] = open(path, "w", newline="", encoding="utf-8")
        if fmt == "csv":  # the filters line through the CSV writer too: a query's commas never split it into cells
            self._csv = csv.writer(self._file)
            self._csv.writerow(["# filters", spreadsheet_cell(filters_text)])
            self._csv.writerow(COLUMNS)
        else:
            self._file.write(json.dumps({"filters": filters}, default=str, ensure_ascii=False) + "\n")

    def write(self, row: dict[str, Any]) -> None:
        self.rows += 1
        if self.fmt == "csv":
            self._csv.writerow([spreadsheet_cell(row[c]) for c in COLUMNS])
        elif self.fmt == "jsonl":
            self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
        else:
            self._pending.append(row)
            if len(self._pending) >= ROW_GROUP:
                self._flush()

    def _flush(self) -> None:
        import pyarrow as pa

        if self._pending:
            self._parquet.write_table(pa.Table.from_pylist(self._pending, schema=self._schema))
            self._pending = []

    def close(self) -> None:
        if self.fmt == "parquet":
            self._flush()
            self._parquet.close()
        else:
            self._file.close()
