"""Exports: a cell a spreadsheet would run as a formula is written as text, in every export."""

import csv
import json
from datetime import datetime, timezone

from console.domain.search import Found
import io

import pyarrow.parquet as pq

from console.export import FORMATS, Exporter, export_bytes, found_row


def test_a_formula_from_the_wire_is_text_in_a_csv_export(tmp_path):
    out = tmp_path / "x.csv"
    exporter = Exporter(out, "csv", {"stream": "S", "where": "=1+1"})
    exporter.write(found_row(Found(1, "=cmd|' /C calc'!A0", datetime(2026, 1, 1, tzinfo=timezone.utc),
                                   (("kind", "+order"),), b"@SUM(1)")))
    exporter.close()
    lines = out.read_text().splitlines()
    assert json.loads(filters_of(out))["where"] == "=1+1"
    [row] = list(csv.DictReader(lines[1:]))
    assert (row["subject"], row["payload"]) == ("'=cmd|' /C calc'!A0", "'@SUM(1)")
    assert json.loads(row["headers"]) == {"kind": "+order"}  # JSON text: starts with '{', safe as it is


def filters_of(path) -> str:
    first = next(csv.reader(path.open(newline="")))
    assert first[0] == "# filters" and len(first) == 2, first
    return first[1]


def test_every_cell_of_a_csv_export_the_filters_line_included_is_formula_safe(tmp_path):
    """Before, the filters line was written raw: a comma in the query split it into cells, one `=2+3`."""
    out = tmp_path / "x.csv"
    query = {"stream": "S", "where": 'size > 0 || text == ",=2+3," || text == "\",@x"', "subject": "a,\n=1",
             "quote": '"', "newline": "x\n=cmd"}
    exporter = Exporter(out, "csv", query)
    exporter.write(found_row(Found(1, "-2+3", datetime(2026, 1, 1, tzinfo=timezone.utc), (("a", "=1"),), b"=,=")))
    exporter.close()
    cells = [cell for row in csv.reader(out.open(newline="")) for cell in row]
    assert not [c for c in cells if c.startswith(("=", "+", "-", "@", "\t", "\r"))], cells
    assert json.loads(filters_of(out)) == query


def test_a_payload_that_is_not_utf8_is_base64():
    row = found_row(Found(1, "s", datetime(2026, 1, 1, tzinfo=timezone.utc), (), b"\xff\xfe"))
    assert (row["payload"], row["encoding"]) == ("//4=", "base64")


def test_a_table_in_every_format_keeps_its_rows_and_filters_and_csv_cells_a_spreadsheet_would_run_are_text():
    """History's and the Audit trail's tables go through the same formats as Search: a new format is one class."""
    import pandas as pd

    frame = pd.DataFrame({"batch_id": ['=HYPERLINK("http://e")', "+1", "-2", "@x", "ok"], "count": [1, 2, 3, 4, 5],
                          "time": pd.to_datetime(["2026-11-26T10:00:00Z"] * 5), "gap": [1.5, None, 2.0, None, 0.0]})
    rows, columns, filters = frame.to_dict("records"), list(frame.columns), {"table": "t", "from": "2026-11-26"}
    written = {fmt: export_bytes(fmt, rows, columns, filters) for fmt in FORMATS}
    assert set(written) == {"csv", "jsonl", "parquet"}
    lines = written["csv"].decode().splitlines()
    assert json.loads(next(csv.reader(lines[:1]))[1]) == filters
    table = list(csv.DictReader(lines[1:]))
    assert [r["batch_id"] for r in table] == ["'=HYPERLINK(\"http://e\")", "'+1", "'-2", "'@x", "ok"]
    assert [r["count"] for r in table] == ["1", "2", "3", "4", "5"] and table[1]["gap"] == ""
    first, *jsonl = written["jsonl"].decode().splitlines()
    assert json.loads(first) == {"filters": filters}
    assert [json.loads(line)["batch_id"] for line in jsonl] == list(frame.batch_id)  # text as it is: not a sheet
    assert json.loads(jsonl[0])["time"] == "2026-11-26T10:00:00+00:00" and json.loads(jsonl[1])["gap"] is None
    parquet = pq.read_table(io.BytesIO(written["parquet"]))
    assert json.loads(parquet.schema.metadata[b"batch-console.filters"]) == filters
    assert parquet.column("count").to_pylist() == [1, 2, 3, 4, 5] and str(parquet.schema.field("count").type) == "int64"
