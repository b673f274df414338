"""How well a search keeps its time limit and leaves its process free, whatever its predicate, side by
side in one run against one embedded nats-server:

    .venv/bin/python bench/search_bounds.py [--messages 500] [--limit 1.0] [--runs 5]

Over 100 KiB messages, for the adversarial report's predicates (a pattern over a literal list, twenty
chained patterns) and one whose single evaluation takes about a second: the search's time past its
limit (target <= 0.5 s) and how late a 50 ms ticker in the same process ran meanwhile (what another
user's page waits for in the web; target < 1 s), against a search with no predicate. Medians of the
runs, with the spread. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
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

LIST = "[" + ",".join(["0"] * 64) + "]"
SIXTEEN = "(" + "+".join(["text"] * 16) + ")"
PREDICATES = {
    "no predicate": "",
    "pattern over a literal list": '[0,0,0,0,0].exists(x, text.matches("\\\\w{200}z"))',
    "twenty chained patterns": " || ".join(['text.matches("\\\\w{200}z")'] * 20),
    "an evaluation of ~1 s": f'{LIST}.exists(x, ({SIXTEEN} + {SIXTEEN}).contains("z"))',
}


async def one(nc, where: str, limit: float) -> tuple[float, float, str]:
    """(seconds past the limit, the ticker's worst lateness, how the search ended)."""
    late, running = [0.0], [True]

    async def ticker() -> None:
        while running[0]:
            asked = time.monotonic()
            await asyncio.sleep(0.05)
            late[0] = max(late[0], time.monotonic() - asked - 0.05)

    tick = asyncio.ensure_future(ticker())
    started = time.monotonic()
    _, state = await search(nc, SearchQuery("BOUNDS", where=where, max_seconds=limit, max_bytes=1 << 40))
    took = time.monotonic() - started
    running[0] = False
    await tick
    return took - limit, late[0], state.stopped_by or "?"


async def run(url: str, n: int, limit: float, runs: int) -> None:
    nc = await nats.connect(url)
    await nc.jetstream().add_stream(StreamConfig(name="BOUNDS", subjects=["bounds.>"]))
    body = b"ab" * (50 * 1024)
    for i in range(n):
        await nc.publish("bounds.x", body)
        if i % 50 == 0:
            await nc.flush()
    await nc.flush()
    print(f"{n} messages of 100 KiB, a limit of {limit:g} s, medians of {runs} runs [min..max]")
    print(f"  {'predicate':<30} {'past the limit':>22} {'ticker late at most':>26}  ended by")
    for name, where in PREDICATES.items():
        found = [await one(nc, where, limit) for _ in range(runs)]
        past, late = [f[0] for f in found], [f[1] for f in found]
        print(f"  {name:<30} {statistics.median(past):>8.2f}s [{min(past):.2f}..{max(past):.2f}]"
              f" {statistics.median(late) * 1000:>10.0f} ms [{min(late) * 1000:.0f}..{max(late) * 1000:.0f}]"
              f"  {', '.join(sorted({f[2] for f in found}))}")
    await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=500)
    parser.add_argument("--limit", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store, EmbeddedServer(store) as server:
        asyncio.run(run(server.url, args.messages, args.limit, args.runs))


if __name__ == "__main__":
    main()
