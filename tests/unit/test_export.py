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
    assert json.loads(lines[0].removeprefix("# filters: "))["where"] == "=1+1"
    [row] = list(csv.DictReader(lines[1:]))
    assert (row["subject"], row["payload"]) == ("'=cmd|' /C calc'!A0", "'@SUM(1)")
    assert json.loads(row["headers"]) == {"kind": "+order"}  # JSON text: starts with '{', safe as it is


def test_a_payload_that_is_not_utf8_is_base64():
    row = found_row(Found(1, "s", datetime(2026, 1, 1, tzinfo=timezone.utc), (), b"\xff\xfe"))
    assert (row["payload"], row["encoding"]) == ("//4=", "base64")
