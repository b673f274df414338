"""The canary on a healthy three-node cluster for a while: does it raise an alarm that is not there?

    .venv/bin/python bench/canary_soak.py [--minutes 30] [--every 60]

Rounds of `batch-console canary`'s own code (an atomic and a fast batch through each node) on a real
three-node nats-server cluster that nobody disturbs, each round judged as BATCH_032 judges it (slow past
its threshold, failing, or led elsewhere). Prints each node's commit times (p50, p95, the worst), the
rounds that flagged a node (0 is the claim), and each canary stream's messages against its limit.
A soak, not a test: it takes as long as it is told to.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import nats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from measure import percentile  # noqa: E402
from console.broker.canary import MAX_MSGS, delete_streams  # noqa: E402
from console.broker.cluster import EmbeddedCluster  # noqa: E402
from console.canary import CanaryOptions, CanaryRun, one_round  # noqa: E402
from console.domain.canary import node_health, stream_for  # noqa: E402
from console.domain.checks import CHECKS  # noqa: E402

SLOW_MS = CHECKS["BATCH_032"].thresholds["slow_ms"]


async def soak(urls: list[str], minutes: float, every: float) -> int:
    nc = await nats.connect(urls, max_reconnect_attempts=-1)
    options, run = CanaryOptions(every=every), CanaryRun()
    commits: dict[str, list[float]] = {}
    flagged: list[tuple[int, str, str]] = []
    ends = time.monotonic() + minutes * 60
    rounds = 0
    try:
        while time.monotonic() < ends:
            started = time.monotonic()
            results = await one_round(nc, options, run)
            rounds += 1
            for result in results:
                if result.commit_ms is not None:
                    commits.setdefault(result.node, []).append(result.commit_ms)
            for health in node_health(results):
                if (finding := health.finding(SLOW_MS)) is not None:
                    flagged.append((rounds, health.node, str(finding)))
            print(f"\rround {rounds}, {len(flagged)} flagged, {max(0.0, ends - time.monotonic()) / 60:.1f} min left",
                  end="", file=sys.stderr, flush=True)
            await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))
        print(file=sys.stderr)
        js = nc.jetstream()
        print(f"{rounds} rounds in {minutes:g} min, every {every:g} s; BATCH_032's slow_ms = {SLOW_MS:g}")
        print(f"{'node':6} {'p50 commit ms':>14} {'p95':>8} {'worst':>8} {'stored/limit':>14}")
        for node, times in sorted(commits.items()):
            info = await js.stream_info(stream_for(node))
            print(f"{node:6} {percentile(times, 0.5):14.1f} {percentile(times, 0.95):8.1f} {max(times):8.1f} "
                  f"{info.state.messages:>7}/{MAX_MSGS}")
        print(f"rounds that flagged a node: {len({r for r, _, _ in flagged})} (of {rounds})")
        for round_, node, finding in flagged:
            print(f"  round {round_}: {node}: {finding}")
        return 1 if flagged else 0
    finally:
        await delete_streams(nc, run.made)
        await nc.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--every", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as store, EmbeddedCluster(store, nodes=3) as cluster:
        cluster.wait_for_meta_leader()
        return asyncio.run(soak(cluster.urls, args.minutes, args.every))


if __name__ == "__main__":
    sys.exit(main())
