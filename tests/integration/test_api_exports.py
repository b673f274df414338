"""/api/v1's exports, its audit verification and its checks against a real console with its alerts part:
each export is the page's download (masked, the filters in it) and an audited action; `verify` says what
`audit --verify` says; the checks are the CLI's; a tokens file that is not one refuses every token
(503, a problem) and is read again once it is mended."""

from __future__ import annotations

import io
import json
import subprocess
from datetime import datetime, timezone

import pyarrow.parquet as pq
import pytest

from tests.api_console import PROBLEM, SECRET, call, running_console
from tests.processes import CLI
from tests.waits import poll_until


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    with running_console(tmp_path_factory.mktemp("api-exports"), alerts=True) as found:
        yield found


def test_a_search_export_is_masked_in_every_format_and_audited(console):
    job = call(console, "POST", "/searches", "viewer", json={"stream": "TEAM_A"}).json()["id"]
    poll_until(lambda: call(console, "GET", f"/searches/{job}", "viewer").json()["state"] == "done", 30, "the search")
    csv = call(console, "GET", f"/searches/{job}/export?format=csv", "viewer")
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    assert "attachment" in csv.headers["content-disposition"] and SECRET not in csv.text
    assert csv.text.count("team_a") == 3 and "# filters" in csv.text
    lines = call(console, "GET", f"/searches/{job}/export?format=jsonl", "viewer").text.splitlines()
    assert json.loads(lines[0])["filters"]["stream"] == "TEAM_A" and len(lines) == 4 and SECRET not in "".join(lines)
    parquet = call(console, "GET", f"/searches/{job}/export?format=parquet", "viewer")
    table = pq.read_table(io.BytesIO(parquet.content))
    assert table.num_rows == 3 and SECRET not in str(table.to_pylist())
    assert call(console, "GET", f"/searches/{job}/export?format=xlsx", "viewer").status_code == 422
    assert call(console, "GET", f"/searches/{job}/export", "admin").status_code == 404  # another caller's job
    records = call(console, "GET", "/audit?limit=1000").json()["records"]
    assert sum(r["action"] == "export.search" and r["user"] == "token:viewer-bot" and r["outcome"] == "accepted"
               for r in records) == 3  # each written ahead, then its outcome


def test_the_audit_export_and_verify_say_what_the_trail_and_the_cli_say(console):
    for allow in (False, True):
        assert call(console, "PATCH", "/streams/TEAM_A", "admin", json={"allow_batched": allow}).status_code == 200
    verified = call(console, "GET", "/audit/verify").json()
    cli = subprocess.run([CLI, "audit", "--verify", "--server", console.nats, "--data-dir", str(console.data)],
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and verified["intact"] is True and verified["breaks"] == []
    assert f"{verified['records']:,} record(s)" in cli.stderr.splitlines()[-1]
    assert verified["first"] <= verified["last"]
    exported = call(console, "GET", "/exports/audit?format=jsonl").text.splitlines()
    rows = [json.loads(line) for line in exported[1:]]
    assert json.loads(exported[0])["filters"]["table"] == "audit"
    assert any(r["user"] == "token:admin-bot" and r["action"] == "stream.edit" for r in rows)
    assert call(console, "GET", "/exports/audit?since=1969-12-31T00:00:00Z").status_code == 200
    assert call(console, "GET", "/exports/audit?since=2999-01-01T00:00:00Z&format=jsonl").text.count("\n") == 1
    assert call(console, "GET", "/exports/history/abandoned_batches?format=csv").status_code in (200, 404)
    assert call(console, "GET", "/exports/history/nope").status_code == 422


def test_the_checks_are_the_clis_on_the_same_console(console):
    started = datetime.now(timezone.utc)
    done = subprocess.run([CLI, "check", "--format", "json", "--server", console.nats, "--data-dir", str(console.data)],
                          capture_output=True, text=True, timeout=60)
    cli = json.loads(done.stdout)
    api = poll_until(lambda: (c := call(console, "GET", "/checks").json())["evaluated"] and
                     datetime.fromisoformat(c["evaluated"]) > started and c, 60, "the alerts' run after the CLI's")
    assert api["findings"], "the console's streams fire no check: nothing compared"
    assert sorted((f["code"], f["stream"], f["severity"]) for f in api["findings"]) == \
        sorted((f["code"], f["stream"], f["severity"]) for f in cli["findings"])
    assert api["status"] == cli["status"]
    team = call(console, "GET", "/checks", "team").json()["findings"]
    assert team and all(f["stream"] in (None, "TEAM_A") for f in team)


@pytest.mark.parametrize("text", ["{", "[1, 2]", '[{"name": "x"}]', '"tokens"', "[" + '{"name": 5}, ' * 3 + "{}]",
                                  json.dumps([{"name": "a", "role": "admin", "digest": "0" * 64, "created": "yesterday"}]),
                                  json.dumps([{"name": "a", "role": "admin", "digest": "0" * 64,
                                               "created": "2026-01-01T00:00:00+00:00", "rate": 1e300}]),
                                  json.dumps([{"name": "a\x1b[2J", "role": "admin", "digest": "0" * 64,
                                               "created": "2026-01-01T00:00:00+00:00"}])])
def test_a_tokens_file_that_is_not_one_refuses_every_token_until_it_is_mended(console, text):
    path = console.data / "api-tokens.json"
    kept = path.read_bytes()
    try:
        path.write_text(text)
        answer = call(console, "GET", "/systems", "viewer")
        assert answer.status_code == 503 and answer.headers["content-type"].startswith(PROBLEM), answer.text
        assert "api-tokens.json" in answer.json()["detail"] and "\x1b" not in answer.text
        listed = subprocess.run([CLI, "token", "list", "--data-dir", str(console.data)], capture_output=True,
                                text=True, timeout=60)
        assert listed.returncode != 0 and "api-tokens.json" in listed.stderr and "Traceback" not in listed.stderr
    finally:
        path.write_bytes(kept)
    assert call(console, "GET", "/systems", "viewer").status_code == 200
