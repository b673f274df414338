"""Search speed and memory, side by side in one run against one embedded nats-server.

    .venv/bin/python bench/search.py [--messages 1000000]

1. A stream of JSON messages with headers; the same range read by a bare nats-py ordered consumer
   (next_msg, counting) and searched with a payload predicate that matches nothing, so every message
   is evaluated: messages a second each, and the ratio (target >= 0.7).
2. Time to the first match when it lies in the first 1% of the stream (target < 1 s).
3. The search's RSS growth over the whole range (target < 50 MiB), in a process of its own.
4. An export of every message of the range to CSV and to Parquet: its RSS growth (target < 50 MiB).
5. The same number of Protobuf orders (tests/decoders/order.proto, compiled by protoc) read bare and
   searched through a decoders file with a predicate on a nested field and an enum (target >= 0.7).
A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats
from nats.js.api import StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.broker.search import search  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402
from console.domain.search import SearchQuery  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def fill_to(nc, stream: str, n: int, message) -> None:
    """Core publishes until the stream holds n messages. The server drops core publishes that outrun a
    stream's ingest, so what fell short is sent again once the count stops growing."""
    js, have, i = nc.jetstream(), 0, 0
    while have < n:
        for _ in range(n - have):
            i += 1
            subject, body, headers = message(i)
            await nc.publish(subject, body, headers=headers)
            if i % 10_000 == 0:
                await nc.flush()
                print(f"\r  filling {stream}: {i:,} sent", end="", file=sys.stderr, flush=True)
        await nc.flush()
        last = -1
        while have != last:
            last = have
            await asyncio.sleep(0.5)
            have = (await js.stream_info(stream)).state.messages
    print(f"\r  filled {stream}: {have:,} messages, {i - have:,} sent again", file=sys.stderr)


async def fill(nc, n: int) -> None:
    await nc.jetstream().add_stream(StreamConfig(name="BENCH_SEARCH", subjects=["bench.search.>"]))

    def message(i: int):
        body = json.dumps({"amount": i % 1000, "customer": f"c{i % 5000}", "note": "x" * 40}).encode()
        return f"bench.search.{i % 3}", body, {"kind": "order", "n": str(i)}

    await fill_to(nc, "BENCH_SEARCH", n, message)


async def bare(nc, n: int) -> float:
    sub = await nc.jetstream().subscribe("bench.search.>", stream="BENCH_SEARCH", ordered_consumer=True)
    start, seen = time.perf_counter(), 0
    while seen < n:
        await sub.next_msg(timeout=5)
        seen += 1
    rate = n / (time.perf_counter() - start)
    await sub.unsubscribe()
    return rate


async def run(url: str, n: int) -> None:
    nc = await nats.connect(url)
    await fill(nc, n)
    query = SearchQuery("BENCH_SEARCH", where="payload.amount > 5000", max_scanned=n, max_bytes=1 << 40,
                        max_seconds=3600)
    growth = float(subprocess.run([sys.executable, __file__, "--rss-of-a-search", url, str(n)], check=True,
                                  capture_output=True, text=True).stdout)
    exports = {fmt: json.loads(subprocess.run([sys.executable, __file__, "--rss-of-an-export", url, str(n), fmt],
                                              check=True, capture_output=True, text=True).stdout)
               for fmt in ("csv", "parquet")}
    rates = {"bare": [], "search": []}
    for _ in range(3):  # alternated: the machine's drift falls on both
        rates["bare"].append(await bare(nc, n))
        start = time.perf_counter()
        _, state = await search(nc, query)
        assert state.scanned == n, state
        rates["search"].append(n / (time.perf_counter() - start))
    pb = await protobuf_rates(nc, n)
    first = n // 100
    at_first = (await nc.jetstream().get_msg("BENCH_SEARCH", first)).headers["n"]  # resent messages shift it
    start = time.perf_counter()
    found, _ = await search(nc, SearchQuery("BENCH_SEARCH", where=f'headers["n"] == "{at_first}"', max_matches=1))
    to_first = time.perf_counter() - start
    assert found and found[0].seq == first
    await nc.close()
    best = {k: max(v) for k, v in rates.items()}
    print(f"\n{f'search of {n:,} messages (best of 3 each)':<58}{'msgs/s':>12}")
    print(f"{'  bare nats-py ordered consumer, next_msg':<58}{best['bare']:>12,.0f}")
    print(f"{'  search, payload predicate (payload.amount > 5000)':<58}{best['search']:>12,.0f}")
    print(f"{'  search / bare (target >= 0.7)':<58}{best['search'] / best['bare']:>12.3f}")
    print(f"{f'  time to the first match at seq {first:,} (target < 1 s)':<58}{to_first:>11.3f}s")
    print(f"{'  search RSS growth over the range, its own process (target < 50 MiB)':<58}{growth:>8.1f} MiB")
    print(f"{'  bare read of the Protobuf stream':<58}{pb['bare']:>12,.0f}")
    print(f"{'  search, decoded (a nested field and an enum, none match)':<58}{pb['search']:>12,.0f}")
    print(f"{'  decoded search / bare (target >= 0.7)':<58}{pb['search'] / pb['bare']:>12.3f}")
    for fmt, (rows, grew, seconds) in exports.items():
        print(f"{f'  export of {rows:,} rows to {fmt}: RSS growth (target < 50 MiB), seconds':<58}{grew:>8.1f} MiB"
              f"{seconds:>8.1f}s")


async def rss_of_a_search(url: str, n: int) -> float:
    """In a process of its own: RSS at the start of a search of the whole range, and at its peak."""
    nc = await nats.connect(url)
    query = SearchQuery("BENCH_SEARCH", where="payload.amount > 5000", max_scanned=n, max_bytes=1 << 40,
                        max_seconds=3600)
    await search(nc, SearchQuery("BENCH_SEARCH", end_seq=1000))  # imports and first allocations settled
    before = peak = rss_mib()

    def sample(_state) -> None:
        nonlocal peak
        peak = max(peak, rss_mib())

    _, state = await search(nc, query, sample)
    assert state.scanned == n, state
    await nc.close()
    return max(peak, rss_mib()) - before


async def rss_of_an_export(url: str, n: int, fmt: str) -> list[float]:
    """In a process of its own: every message of the range exported (all match), the RSS it grew."""
    from console.export import Exporter, found_row

    nc = await nats.connect(url)
    with tempfile.TemporaryDirectory() as tmp:
        # A first, small export of the same kind: what a format costs once (Parquet's writer, its threads
        # and allocator: about 70 MiB, whatever the size) is paid before the measure starts.
        warm = Exporter(Path(tmp) / f"warm.{fmt}", fmt, {})
        await search(nc, SearchQuery("BENCH_SEARCH", end_seq=20_000, max_matches=20_000),
                     on_match=lambda f: warm.write(found_row(f)))
        warm.close()
        before = peak = rss_mib()
        query = SearchQuery("BENCH_SEARCH", max_scanned=n, max_matches=n, max_bytes=1 << 40, max_seconds=3600)
        exporter = Exporter(Path(tmp) / f"export.{fmt}", fmt, query.describe())

        def sample(_state) -> None:
            nonlocal peak
            peak = max(peak, rss_mib())

        start = time.perf_counter()
        await search(nc, query, sample, on_match=lambda f: exporter.write(found_row(f)))
        exporter.close()
        seconds = time.perf_counter() - start
    await nc.close()
    return [exporter.rows, max(peak, rss_mib()) - before, seconds]


async def protobuf_rates(nc, n: int) -> dict[str, float]:
    """Best of 3 (alternated) of a bare read and a decoded search of n Protobuf orders."""
    from tests.decoders.orders import as_protobuf, descriptor_set, order, protobuf_class

    tmp = Path(tempfile.mkdtemp())
    binpb = descriptor_set(tmp)
    (tmp / "decoders.toml").write_text(f'[[decoder]]\nstreams = ["BENCH_PB"]\nencoding = "protobuf"\n'
                                       f'descriptor_set = "{binpb}"\nmessage = "shop.v1.Order"\n')
    cls, js = protobuf_class(binpb), nc.jetstream()
    await js.add_stream(StreamConfig(name="BENCH_PB", subjects=["bench.pb.>"]))
    bodies = [as_protobuf(cls, order(i)) for i in range(1, 1001)]
    await fill_to(nc, "BENCH_PB", n, lambda i: ("bench.pb.x", bodies[i % 1000], None))
    query = SearchQuery("BENCH_PB", where='payload.customer.address.city == "Paris" && payload.status == "SHIPPED"',
                        max_scanned=n, max_bytes=1 << 40, max_seconds=3600, max_matches=1000)
    rates: dict[str, list[float]] = {"bare": [], "search": []}
    for _ in range(3):
        sub = await js.subscribe("bench.pb.>", stream="BENCH_PB", ordered_consumer=True)
        start = time.perf_counter()
        for _ in range(n):
            await sub.next_msg(timeout=5)
        rates["bare"].append(n / (time.perf_counter() - start))
        await sub.unsubscribe()
        start = time.perf_counter()
        _, state = await search(nc, query, decoders=str(tmp / "decoders.toml"))
        assert state.scanned == n and state.errors == 0, state
        rates["search"].append(n / (time.perf_counter() - start))
    return {k: max(v) for k, v in rates.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rss-of-a-search", nargs=2, metavar=("URL", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--rss-of-an-export", nargs=3, metavar=("URL", "N", "FORMAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_of_an_export:
        url, n, fmt = args.rss_of_an_export
        print(json.dumps(asyncio.run(rss_of_an_export(url, int(n), fmt))))
        return
    if args.rss_of_a_search:
        print(asyncio.run(rss_of_a_search(args.rss_of_a_search[0], int(args.rss_of_a_search[1]))))
        return
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        asyncio.run(run(server.url, args.messages))


if __name__ == "__main__":
    main()
