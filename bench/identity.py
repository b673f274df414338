"""What knowing each publisher costs the collector, with and without it, in one run.

    .venv/bin/python bench/identity.py [--publishers 40] [--messages 5000] [--rounds 5]

One embedded nats-server with an application account and the system account. Two `batch-console
collect` processes run throughout, each tapping its own inbox prefix: one with the system account
(it asks CONNZ who holds each new reply prefix) and one without. Each round, `--publishers` new
connections (each a new publisher, open until the round ends) publish three fast batches, `--messages`
in all, at flow 10 (the most acks per message) on each collector's prefix, in turn. Printed: each collector's CPU seconds per 1,000
tapped acks, the ratio (target <= 1.1), and the CONNZ requests per new publisher (target 1).
A benchmark, not a test: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import nats
from nats.js.api import StorageType, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import cpu_seconds  # noqa: E402
from console.broker.fast import FastBatch  # noqa: E402
from console.broker.server import EmbeddedServer  # noqa: E402

CLI = str(Path(sys.executable).parent / "batch-console")
ACCOUNTS = """
accounts {
  APP { jetstream: enabled, users: [{user: app, password: app-secret}] }
  SYS { users: [{user: sys, password: sys-secret}] }
}
system_account: SYS
"""
PREFIXES = {"identity on": "_ID_ON", "identity off": "_ID_OFF"}
BATCHES = 3  # per publisher


async def status(nc) -> dict:
    """The newest status of each collector, by instance."""
    js = nc.jetstream()
    found = {}
    sub = await js.subscribe("batch_console.events.collector_status.>", ordered_consumer=True,
                             deliver_policy=nats.js.api.DeliverPolicy.ALL)
    try:
        while True:
            msg = await sub.next_msg(timeout=1)
            detail = json.loads(json.loads(msg.data)["detail"])
            found[detail["instance"]] = detail
    except nats.errors.TimeoutError:
        return found
    finally:
        await sub.unsubscribe()


async def run(args, server: EmbeddedServer, tmp: Path) -> None:
    procs, pids = {}, {}
    for who, prefix in PREFIXES.items():
        system = ["--system-user", "sys", "--system-password", "sys-secret"] if who == "identity on" else []
        procs[who] = subprocess.Popen([CLI, "collect", "--server", server.url, "--user", "app", "--password",
                                       "app-secret", "--data-dir", str(tmp), "--inbox-prefix", prefix, *system],
                                      stdout=open(tmp / f"{prefix}.log", "w"), stderr=subprocess.STDOUT)
        pids[who] = procs[who].pid
    admin = await nats.connect(server.url, user="app", password="app-secret")
    await admin.jetstream().add_stream(StreamConfig(name="IDENTITY", subjects=["identity.>"], allow_batched=True,
                                                    storage=StorageType.MEMORY, max_msgs=100_000))
    await asyncio.sleep(3)  # both collectors subscribed
    cpu = {who: 0.0 for who in PREFIXES}
    try:
        for round_ in range(args.rounds):
            for who, prefix in PREFIXES.items():
                before = cpu_seconds(pids[who])
                connections = []  # publishers live on: closed at the round's end, as services' connections do
                for p in range(args.publishers):
                    nc = await nats.connect(server.url, user="app", password="app-secret", name=f"pub-{round_}-{p}",
                                            inbox_prefix=prefix)
                    for _ in range(BATCHES):  # the client's reply prefix is one per connection
                        batch = FastBatch(nc, flow=10)
                        for _ in range(args.messages // args.publishers // BATCHES):
                            await batch.add("identity.x", b"x" * 64)
                        await batch.commit_eob()
                    connections.append(nc)
                await asyncio.sleep(2)  # the collector has handled the round's acks
                for nc in connections:
                    await nc.close()
                cpu[who] += cpu_seconds(pids[who]) - before
            print(f"  round {round_ + 1}/{args.rounds}", file=sys.stderr)
        await asyncio.sleep(6)  # a status after the last round
        statuses = await status(admin)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
        await admin.close()
    by_who = {("identity off" if s.get("publisher_note") else "identity on"): s for s in statuses.values()}
    acks = {who: by_who[who]["replies_tapped"] for who in PREFIXES}
    per_k = {who: cpu[who] / acks[who] * 1000 for who in PREFIXES}
    publishers = args.rounds * args.publishers
    print(f"collector CPU per 1,000 tapped acks ({publishers} publishers each; acks tapped: on {acks['identity on']:,}, "
          f"off {acks['identity off']:,}):")
    for who in PREFIXES:
        print(f"  {who:14} {per_k[who] * 1000:8.2f} ms")
    print(f"  ratio on/off   {per_k['identity on'] / per_k['identity off']:8.2f}   (target <= 1.1)")
    s = by_who["identity on"]
    print(f"CONNZ requests per new publisher: {s['connz_requests'] / publishers:.2f} "
          f"({s['connz_requests']} requests, {s['publishers_known']} publishers named; target 1)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--publishers", type=int, default=40)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with EmbeddedServer(Path(tmp) / "nats", extra_config=ACCOUNTS) as server:
            asyncio.run(run(args, server, Path(tmp)))


if __name__ == "__main__":
    main()
