"""Exports: a cell a spreadsheet would run as a formula is written as text, in every export."""

import csv
import json
from datetime import datetime, timezone

from console.domain.search import Found
from console.export import Exporter, found_row


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
