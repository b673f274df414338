"""Search against a real server: a stream of 60,000 messages with headers and JSON payloads; the
counts of matches equal a plain Python scan of the same messages; each limit stops the search exactly
there and says which; a predicate that reaches for Python or the file system is refused; a cancel
stops the reading within a second; nothing stays on the server."""

import asyncio
import json
import re
import time

import pytest
from nats.js.api import StreamConfig

from console.broker.search import search
from console.domain.search import NEWEST, Predicate, SearchQuery, SearchRefused

N = 60_000
REGIONS = ("eu", "us", "ap")


def message(i: int) -> tuple[str, dict[str, str], bytes]:
    headers = {"kind": "refund" if i % 10 == 0 else "order", "n": str(i)}
    if i % 97 == 0:
        return f"search.{REGIONS[i % 3]}", headers, f"plain text {i}".encode()
    return f"search.{REGIONS[i % 3]}", headers, json.dumps({"amount": i % 1000, "customer": f"c{i % 5000}"}).encode()


@pytest.fixture(scope="module")
async def stream(nats_server):
    import nats

    nc = await nats.connect(nats_server.url)
    await nc.jetstream().add_stream(StreamConfig(name="SEARCH", subjects=["search.>"]))
    for i in range(1, N + 1):
        subject, headers, data = message(i)
        await nc.publish(subject, data, headers=headers)
        if i % 5000 == 0:
            await nc.flush()
    await nc.flush()
    while (await nc.jetstream().stream_info("SEARCH")).state.messages < N:
        await asyncio.sleep(0.1)
    yield nc
    await nc.jetstream().delete_stream("SEARCH")
    await nc.close()


def scanned_by_python(keep) -> int:
    return sum(1 for i in range(1, N + 1) if keep(i, *message(i)))


def payload(data: bytes):
    try:
        return json.loads(data)
    except ValueError:
        return None


CASES = [
    ("payload.amount > 990", "", lambda i, s, h, d: (p := payload(d)) is not None and p["amount"] > 990),
    ('headers["kind"] == "refund" && has(payload.customer) && payload.customer == "c40"', "",
     lambda i, s, h, d: h["kind"] == "refund" and (p := payload(d)) is not None and p["customer"] == "c40"),
    ('text.contains("plain")', "search.eu", lambda i, s, h, d: s == "search.eu" and b"plain" in d),
    ('text.matches("\\"c12[0-9]{2}\\"")', "", lambda i, s, h, d: re.search(rb'"c12[0-9]{2}"', d) is not None),
]


@pytest.mark.parametrize("where, subject, keep", CASES, ids=[c[0][:30] for c in CASES])
async def test_the_matches_are_those_of_a_plain_python_scan(stream, where, subject, keep):
    found, state = await search(stream, SearchQuery("SEARCH", subject=subject, where=where, max_matches=100_000,
                                                    max_seconds=600))  # the matches, not the clock, on trial
    assert state.matched == len(found) == scanned_by_python(keep)
    assert state.stopped_by == "end"
    assert state.scanned == (N if not subject else N // 3 + (1 if N % 3 >= 1 and subject == "search.eu" else 0)) \
        or subject
    assert await consumers(stream) == []


async def consumers(nc) -> list[str]:
    return [c.name async for c in _names(nc)]


async def _names(nc):
    for info in await nc.jetstream().consumers_info("SEARCH"):
        yield info.config


@pytest.mark.parametrize("limit, value, counter", [("max_matches", 7, "matched"), ("max_scanned", 1234, "scanned"),
                                                    ("max_bytes", 50_000, "bytes")])
async def test_each_limit_stops_the_search_there_and_says_so(stream, limit, value, counter):
    limits = {"max_matches": 100_000, limit: value}
    found, state = await search(stream, SearchQuery("SEARCH", where="payload.amount >= 0", **limits))
    assert state.stopped_by == limit
    if counter == "bytes":
        assert value <= state.bytes < value + 100  # stopped at the message that reached it
    else:
        assert getattr(state, counter) == value
    assert await consumers(stream) == []


async def test_the_time_limit_stops_it_too(stream):
    _, state = await search(stream, SearchQuery("SEARCH", where='text.matches("never")', max_seconds=0.3))
    assert state.stopped_by == "max_seconds" and 0.3 <= state.elapsed < 1.5


async def test_newest_first_reads_backwards(stream):
    found, state = await search(stream, SearchQuery("SEARCH", where='headers["kind"] == "refund"', direction=NEWEST,
                                                    max_matches=25))
    assert [f.seq for f in found] == list(range(N, N - 250, -10))
    assert state.stopped_by == "max_matches"


async def test_a_window_of_sequences(stream):
    found, state = await search(stream, SearchQuery("SEARCH", start_seq=1001, end_seq=2000))
    assert (state.scanned, found[0].seq, found[-1].seq) == (1000, 1001, 2000)


@pytest.mark.parametrize("where", ['__import__("os").system("id")', '__import__("os")', '_x(text)', 'open("/etc/passwd")', "os.environ",
                                   "payload.items.all(x, payload.items.exists(y, x == y))", "(" * 300 + "1" + ")" * 300,
                                   "x" * 1001, "payload.a\x1b[2J"])
def test_a_predicate_that_reaches_further_than_the_message_is_refused(where):
    with pytest.raises(SearchRefused):
        Predicate(where)


async def test_what_cannot_be_evaluated_is_counted_not_matched(stream):
    _, state = await search(stream, SearchQuery("SEARCH", where="payload.amount > 998", end_seq=1000))
    assert state.errors == 1000 // 97  # the plain-text payloads have no amount
    assert state.matched == sum(1 for i in range(1, 1001) if i % 97 and i % 1000 == 999)


async def test_a_cancel_stops_the_reading_within_a_second_and_leaves_nothing(stream):
    cancel_at = []

    async def cancel_soon():
        await asyncio.sleep(0.5)
        cancel_at.append(time.monotonic())

    canceller = asyncio.create_task(cancel_soon())
    _, state = await search(stream, SearchQuery("SEARCH", where='text.matches("never")'),
                            cancelled=lambda: bool(cancel_at))
    stopped = time.monotonic()
    await canceller
    assert state.stopped_by == "cancelled"
    assert stopped - cancel_at[0] < 1.0
    assert state.scanned < N
    assert await consumers(stream) == []


def test_the_command_prints_matches_as_json_lines_and_refuses_a_bad_query(stream, nats_server, tmp_path):
    import subprocess

    from tests.processes import CLI

    base = [CLI, "search", "SEARCH", "--server", nats_server.url, "--data-dir", str(tmp_path)]
    done = subprocess.run([*base, "--where", "payload.amount == 999", "--max-matches", "3", "--newest-first"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["seq"] for line in lines] == [N - 1, N - 1001, N - 2001]
    assert json.loads(lines[0]["payload"])["amount"] == 999
    assert "stopped at the limit max_matches: " in done.stderr
    for bad in (["--where", 'open("/etc/passwd")'], ["--subject", "a..b"], ["--from-seq", "0"],
                ["--since", "yesterday"], ["--max-seconds", "1e9"]):
        refused = subprocess.run([*base, *bad], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2, (bad, refused.stderr)


EXPORTED = 50_000  # the export's range (--to-seq): the whole stream is the matches' test above


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_an_export_is_streamed_in_each_format_with_its_filters(stream, nats_server, tmp_path, fmt):
    import csv
    import subprocess

    import pyarrow.parquet as pq

    from tests.processes import CLI

    out = tmp_path / f"refunds.{fmt}"
    where = 'headers["kind"] == "refund" && payload != null && payload.amount < 100'
    done = subprocess.run([CLI, "search", "SEARCH", "--server", nats_server.url, "--data-dir", str(tmp_path),
                           "--where", where, "--max-matches", "1000000", "--output", str(out), "--format", fmt,
                           "--to-seq", str(EXPORTED)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    expected = scanned_by_python(lambda i, s, h, d: i <= EXPORTED and h["kind"] == "refund"
                                 and (p := payload(d)) is not None and p["amount"] < 100)
    if fmt == "parquet":
        table = pq.read_table(out)
        rows, filters = table.num_rows, json.loads(table.schema.metadata[b"batch-console.filters"])
        assert table.column("seq").to_pylist()[:2] == [10, 20]
    elif fmt == "csv":
        lines = out.read_text().splitlines()
        first = next(csv.reader(out.open(newline="")))
        assert first[0] == "# filters"
        filters = json.loads(first[1])
        records = list(csv.DictReader(lines[1:]))
        rows = len(records)
        assert records[0]["seq"] == "10" and json.loads(records[0]["headers"])["kind"] == "refund"
    else:
        lines = out.read_text().splitlines()
        filters, rows = json.loads(lines[0])["filters"], len(lines) - 1
    assert rows == expected
    assert filters["where"] == where and filters["stream"] == "SEARCH" and filters["end_seq"] == EXPORTED


def test_a_stream_that_is_not_there_is_said_not_a_traceback(nats_server, tmp_path):
    import subprocess

    from tests.processes import CLI

    done = subprocess.run([CLI, "search", "NO_SUCH_STREAM", "--server", nats_server.url, "--data-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "no stream NO_SUCH_STREAM" in done.stderr and "Traceback" not in done.stderr
