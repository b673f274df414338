"""The collector's cost and speed, side by side in one run against one embedded nats-server.

    .venv/bin/python bench/collector.py [--rounds 100] [--messages 40000] [--abandonments 1000]
    .venv/bin/python bench/collector.py --rounds 0 --floods "forged acks"   # one flood alone, quickly

1. A fast-ingest publisher at flow 10 (the most acks per message), with and without the
   collector (`batch-console collect`, its own process) tapping it: the publisher's msgs/s,
   the ratio, and whether the collector's ack count equals the publisher's. The collector (its
   default CPU priority), a collector with `--cpu low` (nice 10 only) and a bare nats-py tap run
   throughout, each tapping its own inbox prefix; every round publishes once on an inbox nobody
   taps and once on each tap's, in a rotating order, so the machine's drift over the run falls on
   all alike, and the next segment starts only once the collector has stored the last one's acks.
   The median of the rounds' own ratios is printed with its 95% interval (a segment's speed
   varies by 10-15% on a shared machine: a handful of rounds cannot tell 0.93 from 0.97), and the
   cores each process used. A collector with `--no-conformance` taps an inbox of its own too: the
   CPU each collector spent per 1,000 tapped acks, grading publishers (the default) and not, is
   compared round by round; and the grader's memory after 10,000 and 100,000 publishers.
2. A burst of abandoned atomic batches: time until a bare nats-py subscriber has received every
   advisory, and until every event is in the event log.
3. Floods of `$FI` replies (malformed, one body repeated or each different; forged acks), the same number to the collector's inbox and to the bare
   tap's: each one's seconds to get through them and messages per CPU-second (the collector parses,
   counts, quarantines at its bounded rate and skips each one).
The collector signs every event it writes (its event key in the run's data directory).
A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import nats
from nats.js.api import StorageType, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.broker.atomic import AtomicBatch  # noqa: E402
from console.config import EventLogSettings  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402
from console.domain.events import EventKind, event_from_json  # noqa: E402
from console.domain.status import CollectorStatus  # noqa: E402
from console.errors import BatchError  # noqa: E402
from measure import cpu_seconds, median_interval  # noqa: E402

PAYLOAD = b"x" * 128
PACE = 0.010  # the collector's default --pace-ms, for the bare reference tap
CLI = str(Path(sys.executable).parent / "batch-console")
UNTAPPED_PREFIX = "_ALONE"  # an inbox no tap subscribes to: the publisher alone
BARE_PREFIX = "_BARE"
LOW_PREFIX = "_LOW"
UNGRADED_PREFIX = "_UNGRADED"


async def publish_fast(nc, n: int, inbox_prefix: str = "_INBOX") -> tuple[float, FastBatch]:
    batch = FastBatch(nc, flow=10, max_outstanding_acks=2, inbox_prefix=f"{inbox_prefix}.{uuid.uuid4().hex}")
    start = time.perf_counter()
    for _ in range(n - 1):
        await batch.add("fast.bench", PAYLOAD)
    ack = await batch.commit("fast.bench", PAYLOAD)
    assert ack.count == n
    return n / (time.perf_counter() - start), batch




class EventWatch:
    """Counts the collector's events as the log stores them: a core subscription on the log's
    subjects, so measuring adds no JetStream API calls (each of those raises an advisory)."""

    def __init__(self, nc, prefix: str):
        self.nc, self.prefix = nc, prefix
        self.acks: Counter[str] = Counter()
        self.committed: dict[str, asyncio.Event] = {}
        self.abandoned = 0
        self.abandoned_ids: set[str] = set()
        self.all_abandoned = asyncio.Event()
        self.expect_abandoned = 0
        self.tapped: dict[str, int] = {}  # collector instance -> replies tapped, from its status
        self.gaps: dict[str, asyncio.Future] = {}  # batch id -> when its gap reached the log
        self.kinds: Counter[str] = Counter()  # events stored, by kind

    async def start(self):
        self.sub = await self.nc.subscribe(f"{self.prefix}.>", cb=self._on_event)

    async def _on_event(self, msg):
        event = event_from_json(msg.data)
        self.kinds[event.kind.value] += 1
        if event.kind is EventKind.FAST_PROGRESS:
            self.acks[event.batch_id] += event.acks
        elif event.kind is EventKind.FAST_COMMITTED:
            self.committed.setdefault(event.batch_id, asyncio.Event()).set()
        elif event.kind is EventKind.COLLECTOR_STATUS:
            status = CollectorStatus.from_json(event.detail)
            self.tapped[status.instance] = status.replies_tapped
        elif event.kind is EventKind.FAST_GAP and event.batch_id:
            found = self.gaps.setdefault(event.batch_id, asyncio.get_running_loop().create_future())
            if not found.done():
                found.set_result(time.perf_counter())
        elif event.kind is EventKind.ATOMIC_ABANDONED and event.stream == "BURST" \
                and event.event_id not in self.abandoned_ids:  # each collector publishes it; the log keeps one
            self.abandoned_ids.add(event.event_id)
            self.abandoned += 1
            if self.abandoned >= self.expect_abandoned:
                self.all_abandoned.set()

    async def acks_of(self, batch_id: str, timeout: float = 60) -> int:
        done = self.committed.setdefault(batch_id, asyncio.Event())
        await asyncio.wait_for(done.wait(), timeout)
        return self.acks[batch_id]


async def bare_tap(url: str, pace: float) -> None:
    """The floor for any tap written on nats-py: subscribe to the same $FI patterns (under the
    BARE_PREFIX inbox), only count, paced and niced like the collector. Its own process (--bare-tap)."""
    os.nice(10)
    nc = await nats.connect(url)
    received = 0

    async def count(msg):
        nonlocal received
        received += 1

    for depth in (5, 6):
        await nc.subscribe(".".join([BARE_PREFIX] + ["*"] * depth + ["$FI"]), cb=count)
    await nc.flush()
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, lambda: print(received, flush=True))
    while not stop.is_set():
        time.sleep(pace)
        await asyncio.sleep(0)
    print(received, flush=True)


async def wait_collector_ready(js, proc) -> None:
    while True:
        try:
            await js.consumer_info("BATCH_CONSOLE_ADVISORIES", "batch-console-collector")
            return
        except nats.js.errors.NotFoundError:
            if proc.poll() is not None:
                raise RuntimeError("collector exited")
            await asyncio.sleep(0.05)


async def abandonment_burst(nc, watch: EventWatch, count: int, limit: float = 120) -> tuple[float, float, int, int]:
    """Seconds until a bare subscriber has every advisory, and until the log has stored every event."""
    received = asyncio.Event()
    seen = 0

    async def on_advisory(msg):
        nonlocal seen
        seen += 1
        if seen >= count:
            received.set()

    sub = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.BURST", cb=on_advisory)
    watch.expect_abandoned = watch.abandoned + count
    start = time.perf_counter()
    refused = Counter()
    for _ in range(count):
        batch = AtomicBatch(nc)
        try:
            await batch.add("burst.x", b"1")
            batch.skip_seq()
            await batch.commit("burst.x", b"3")
        except BatchError as e:
            refused[type(e).__name__] += 1
    if set(refused) - {"BatchIncompleteError"}:
        print(f"  burst: the server refused {dict(refused)}", file=sys.stderr)

    async def timed(event: asyncio.Event) -> float:
        try:
            await asyncio.wait_for(event.wait(), limit)
            return time.perf_counter() - start
        except asyncio.TimeoutError:
            return float("nan")

    bare, logged = await asyncio.gather(timed(received), timed(watch.all_abandoned))
    await sub.unsubscribe()
    return bare, logged, seen, watch.abandoned


# Who taps the publisher in a segment -> the inbox prefix its replies use there.
INBOXES = {"alone": UNTAPPED_PREFIX, "bare tap": BARE_PREFIX, "collector": "_INBOX", "collector --cpu low": LOW_PREFIX,
           "collector --no-conformance": UNGRADED_PREFIX}
COLLECTORS = [("collector", []), ("collector --cpu low", ["--cpu", "low", "--inbox-prefix", LOW_PREFIX]),
              ("collector --no-conformance", ["--no-conformance", "--inbox-prefix", UNGRADED_PREFIX])]


async def real_gap(nc, watch: EventWatch) -> tuple[float, float]:
    """A real fast batch's gap: when its publisher heard it, and when its FAST_GAP reached the event log."""
    from console.broker.fast import FastBatch
    from console.errors import BatchError

    heard = asyncio.get_running_loop().create_future()
    batch = FastBatch(nc, flow=10, gap_mode="fail",
                      on_problem=lambda _: heard.done() or heard.set_result(time.perf_counter()))
    logged = watch.gaps.setdefault(batch.batch_id, asyncio.get_running_loop().create_future())
    try:
        for i in range(20):
            if i == 10:
                batch.skip_seq()
            await batch.add("fast.bench", b"x")
        await batch.commit_eob()
    except BatchError:
        pass
    return await asyncio.wait_for(heard, 60), await asyncio.wait_for(logged, 60)


# A flood's bodies, the i-th: one malformed body sent again and again (what a broken or hostile client
# sends at its highest rate), a malformed body different each time (so nothing read before helps), and
# replies well formed for batches nobody published (forged): gaps (each one a loss, said without state) and
# acks (each one a batch the tracker could take on: last, as its batches fall silent a batch timeout later,
# and that is measured after it, not charged to another flood).
FLOODS = {
    "malformed, one body repeated": lambda i: b'{"type":"ack","seq":"not a number","msgs":10}',
    "malformed, every body different": lambda i: b'{"type":"ack","seq":"n%d","msgs":10}' % i,
    "forged gaps of batches never published": lambda i: b'{"type":"gap","last_seq":1,"seq":%d}' % (2 + i % 1000),
    "forged acks of batches never published": lambda i: b'{"type":"ack","seq":%d,"msgs":10}' % (i % 1000),
}


@dataclass
class Flood:
    rates: dict[str, tuple[float, float]]  # tap -> (seconds to get through it, its replies per CPU-second)
    loss: float  # seconds from a real gap sent halfway reaching its publisher to its event in the log
    kinds: Counter[str]  # events stored meanwhile, by kind
    cpu: float = 0.0  # the collector's CPU-seconds for it
    later: tuple[Counter[str], float] | None = None  # its batches' progress and silence afterwards: events by
    # kind, the collector's CPU-seconds past its idling


async def flood(nc, watch: EventWatch, procs: dict, pids: dict, size: int, body: Callable[[int], bytes], tag: str
                ) -> Flood:
    """Seconds until each tap got through `size` replies of the flood, and its messages per CPU-second;
    and how long a real loss sent halfway through took to reach the log. The collector is through when a
    real gap sent after the last reply is in the log: it comes on the same subscription, behind every one
    (its status, every 5 s, would charge it seconds of idling); the bare tap says when asked (SIGUSR1)."""
    bare = procs["bare tap"]
    bare.send_signal(signal.SIGUSR1)
    start_bare = int(bare.stdout.readline())
    before = {who: cpu_seconds(pids[who]) for who in ("bare tap", "collector")}
    start = time.perf_counter()
    kinds_before = Counter(watch.kinds)
    for i in range(size):
        bad = body(i)
        await nc.publish(f"_INBOX.{tag}.{tag}f{i}.10.ok.1.0.$FI", bad)  # ids of its own: no other flood's
        await nc.publish(f"{BARE_PREFIX}.{tag}.{tag}f{i}.10.ok.1.0.$FI", bad)
        if i == size // 2:
            halfway = asyncio.create_task(real_gap(nc, watch))
        if i % 2000 == 0:
            await nc.flush()
    last = asyncio.create_task(real_gap(nc, watch))
    done: dict[str, tuple[float, float]] = {}
    while "bare tap" not in done:
        bare.send_signal(signal.SIGUSR1)
        if int(bare.stdout.readline()) - start_bare >= size:
            done["bare tap"] = (time.perf_counter() - start, cpu_seconds(pids["bare tap"]))
        else:
            await asyncio.sleep(0.05)
    _, logged = await last
    done["collector"] = (logged - start, cpu_seconds(pids["collector"]))
    heard, logged = await halfway
    spent = done["collector"][1] - before["collector"]
    return Flood({who: (seconds, size / (cpu - before[who])) for who, (seconds, cpu) in done.items()},
                 logged - heard, watch.kinds - kinds_before, spent)


async def afterwards(watch: EventWatch, pid: int, acks: Flood, idle_cores: float, within: float = 60) -> None:
    """The forged-acks flood's tracked batches falling silent a batch timeout later (a FAST_SLOW each): the
    events and the collector's CPU for them past its idling, waited for until they stop coming."""
    started, before, since = acks.kinds["fast_started"], cpu_seconds(pid), time.perf_counter()
    kinds_before = Counter(watch.kinds)
    slow_before, last_change, last_count = watch.kinds["fast_slow"], time.perf_counter(), -1
    while time.perf_counter() - since < within:
        count = watch.kinds["fast_slow"] - slow_before
        if count != last_count:
            last_count, last_change = count, time.perf_counter()
        if count >= started - 1 or (count and time.perf_counter() - last_change > 3):  # the real gaps' batches
            break  # end, they are not slow
        await asyncio.sleep(0.1)
    cpu = cpu_seconds(pid) - before - idle_cores * (time.perf_counter() - since)
    acks.later = (watch.kinds - kinds_before, max(0.0, cpu))


async def run(server: EmbeddedServer, tmp: Path, rounds: int, messages: int, abandonments: int, flood_size: int,
              flood_kinds: str) -> None:
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="FASTBENCH", subjects=["fast.bench"], storage=StorageType.FILE, allow_batched=True))
    await js.add_stream(StreamConfig(name="BURST", subjects=["burst.>"], storage=StorageType.FILE, allow_atomic=True))

    procs = {"bare tap": subprocess.Popen([sys.executable, __file__, "--bare-tap", server.url], stdout=subprocess.PIPE, text=True)}
    procs["bare tap"].stdout.readline()
    for who, extra in COLLECTORS:
        with open(tmp / f"{who.replace(' ', '_')}.log", "w") as err:
            procs[who] = subprocess.Popen([CLI, "collect", "--server", server.url, "--data-dir", str(tmp), *extra],
                                          stderr=err)
    pids = {"publisher": os.getpid(), "server": server.pid} | {who: proc.pid for who, proc in procs.items()}
    rates: dict[str, list[float]] = {who: [] for who in INBOXES}
    cpu = {who: Counter() for who in INBOXES}  # seconds of CPU per process, and "wall"
    equal = []  # (collector's acks, publisher's acks)
    # the CPU each of the two spent, and the acks it tapped: summed over the rounds (a process's CPU
    # time is counted in 10 ms ticks, a segment's is a few of them)
    spent = {"collector": Counter(), "collector --no-conformance": Counter()}
    try:
        for who, _ in COLLECTORS:
            await wait_collector_ready(js, procs[who])
        watch = EventWatch(nc, EventLogSettings().subject_prefix)
        await watch.start()
        await publish_fast(nc, messages // 4)  # warm-up, not counted
        for r in range(rounds):
            order = list(INBOXES)[r % len(INBOXES):] + list(INBOXES)[:r % len(INBOXES)]
            for who in order:
                await js.purge_stream("FASTBENCH")  # every segment starts on an empty store
                before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                rate, batch = await publish_fast(nc, messages, INBOXES[who])
                rates[who].append(rate)
                cpu[who].update({name: cpu_seconds(pid) - before[name] for name, pid in pids.items()})
                cpu[who]["wall"] += messages / rate
                if who in spent:
                    spent[who].update(cpu=cpu_seconds(pids[who]) - before[who], acks=batch.acks)
                if who.startswith("collector"):  # and its work is done before the next segment
                    equal.append((await watch.acks_of(batch.batch_id), batch.acks))
            print(f"  round {r + 1}: " + ", ".join(f"{who} {rates[who][-1]:,.0f}" for who in order) + " msgs/s",
                  file=sys.stderr)
        if rounds:
            bare, logged, seen, stored = await abandonment_burst(nc, watch, abandonments)
            starved = (tmp / "collector.log").read_text().count("back to nice")
        idle = cpu_seconds(pids["collector"])
        await asyncio.sleep(3)
        idle_cores = (cpu_seconds(pids["collector"]) - idle) / 3  # its status, ticks and pacer, with nothing to read
        floods = {name: await flood(nc, watch, procs, pids, flood_size, body, f"flood{n}")
                  for n, (name, body) in enumerate(FLOODS.items()) if flood_kinds in name}
        if (acks := next((f for name, f in floods.items() if "forged acks" in name), None)) is not None:
            await afterwards(watch, pids["collector"], acks, idle_cores)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=20)
        await nc.close()

    if not rounds:  # the floods alone: a quick look at the collector under them
        print_floods(floods, flood_size)
        return

    def ratios(who: str) -> list[float]:  # each round's own: the machine's drift cancels within a round
        return [t / a for t, a in zip(rates[who], rates["alone"])]

    print(f"\n{f'fast ingest, flow 10, 2 outstanding acks, {rounds} rounds':<52}{'msgs/s':>12}{'vs alone':>10}"
          f"{'95% interval':>16}")
    labels = {"alone": "publisher alone", "bare tap": "tapped by a bare nats-py subscriber (nice 10)",
              "collector": "tapped by the collector (target >= 0.95)", "collector --cpu low": "tapped by the collector --cpu low"}
    for who, label in labels.items():
        low, high = median_interval(ratios(who))
        print(f"{'  ' + label:<52}{statistics.median(rates[who]):>12,.0f}{statistics.median(ratios(who)):>10.3f}"
              f"{f'{low:.3f}-{high:.3f}':>16}")
    print(f"{'  collector acks == publisher acks, every segment':<52}{str(all(s == p for s, p in equal)):>12}")
    per_kilo = {who: 1e6 * s["cpu"] / s["acks"] for who, s in spent.items()}
    print(f"\n{'collector CPU per 1,000 tapped acks (the same rounds)':<52}{'CPU-ms':>12}")
    print(f"{'  grading publishers (default)':<52}{per_kilo['collector']:>12.1f}")
    print(f"{'  --no-conformance':<52}{per_kilo['collector --no-conformance']:>12.1f}")
    print(f"{'  on / off (target <= 1.15)':<52}{per_kilo['collector'] / per_kilo['collector --no-conformance']:>12.3f}")
    for clients, size, kept in grader_memory():
        print(f"{f'  grader memory, {clients:,} publishers seen':<52}{size / 2**20:>9.1f} MiB, {kept:,} clients kept")
    print(f"{'  times the collector left the idle class, starved':<52}{starved:>12}")
    print(f"\n{'cores used while publishing':<24}" + "".join(f"{name:>28}" for name in pids))
    for who in INBOXES:
        print(f"{'  ' + who:<24}" + "".join(f"{cpu[who][name] / cpu[who]['wall']:>28.2f}" for name in pids))
    print(f"\n{f'burst of {abandonments} abandonments':<52}{'seconds':>12}")
    print(f"{'  bare nats-py subscriber has all advisories':<52}{bare:>12.3f}")
    print(f"{'  all events in the event log':<52}{logged:>12.3f}")
    print(f"{'  event log / bare subscriber (target <= 2)':<52}{logged / bare:>12.3f}")
    print(f"{'  advisories received / events stored':<52}{f'{seen} / {stored}':>12}")
    print_floods(floods, flood_size)


def print_floods(floods: dict[str, Flood], flood_size: int) -> None:
    for name, f in floods.items():
        print(f"\n{f'flood of {flood_size:,} $FI replies: {name}':<52}{'seconds':>12}{'msgs/CPU-s':>14}")
        for who in ("bare tap", "collector"):
            seconds, per_cpu = f.rates[who]
            print(f"{'  ' + who:<52}{seconds:>12.2f}{per_cpu:>14,.0f}")
        ratio = f.rates["collector"][1] / f.rates["bare tap"][1]
        print(f"{'  collector / bare tap, msgs per CPU-second':<52}{ratio:>26.3f} (target >= 0.5)")
        if f.later is not None:
            kinds, cpu = f.later
            print(f"{'  then its batches fall silent: events, CPU-s':<52}{sum(kinds.values()):>12,}{cpu:>14.2f} "
                  f"({', '.join(f'{kind} {n:,}' for kind, n in kinds.most_common(4))})")
            print(f"{'  collector / bare tap, with that':<52}{ratio * f.cpu / (f.cpu + cpu):>26.3f} (target >= 0.5)")
        print(f"{'  a real gap sent halfway: its publisher to the log':<52}{f.loss:>12.2f} (target <= 1)")
        print(f"{'  events stored meanwhile':<52}{sum(f.kinds.values()):>12,} "
              f"({', '.join(f'{kind} {n:,}' for kind, n in f.kinds.most_common(4))})")


def grader_memory() -> list[tuple[int, int, int]]:
    """The grader's memory after 10,000 and 100,000 publishers (one batch each, its start and ack):
    bounded, the clients heard from longest ago go first."""
    from console.domain.grader import Grader
    from console.domain.publisher import Publisher

    out = []
    for clients in (10_000, 100_000):
        grader = Grader(resolve=lambda kind, prefix, batch: Publisher(name=prefix, lang="go", version="1.0"))
        now = datetime.now(timezone.utc)
        tracemalloc.start()
        for i in range(clients):
            reply = f"_INBOX.c{i}.b{i}.10.ok.1.0.$FI"
            grader.fast_message(reply, now)
            grader.reply(reply, b'{"type":"ack","seq":0,"msgs":10}', now)
        grader.fold_all()
        out.append((clients, tracemalloc.get_traced_memory()[0], len(grader.clients)))
        tracemalloc.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--abandonments", type=int, default=1000)
    parser.add_argument("--flood", type=int, default=100_000, help="replies in each flood")
    parser.add_argument("--floods", default="", metavar="WORDS", help="only the floods whose name holds these words")
    parser.add_argument("--bare-tap", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare_tap:
        asyncio.run(bare_tap(args.bare_tap, PACE))
        return
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        asyncio.run(run(server, Path(tmp), args.rounds, args.messages, args.abandonments, args.flood, args.floods))


if __name__ == "__main__":
    main()
