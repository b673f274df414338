"""What one hostile message or caller costs everyone else, side by side in one run:

    .venv/bin/python bench/hostile.py [--runs 5]

1. Decoding: a CBOR message holding a decimal fraction whose mantissa is a 1,000 KiB big number (reading
   it as a decimal grows with the square of its size: it froze the web for 81 s), a big number past 4,300
   digits, and a 6-byte Avro message declaring 100,000,000 null items, each against an ordinary message
   of the same size: the ratio of their decoding times, and the memory the process grew by.
2. The web: a real `serve` on an embedded server; a second client's request (the API's OpenAPI document)
   timed while idle, while six 90 MiB POSTs without a token are sent, and while 3,000 calls without a
   token are refused: the ratio of its median and worst times to idle's (the audit records they add are
   tests/integration/test_api.py's to count).
Medians of the runs. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import cbor2
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.broker.server import EmbeddedServer  # noqa: E402
from console.decoders import DecodeError  # noqa: E402
from console.decoders.avro_decoder import AvroDecoder  # noqa: E402
from console.decoders.cbor_decoder import CborDecoder  # noqa: E402
from tests.decoders.orders import zigzag  # noqa: E402
from tests.processes import CLI, free_port, wait_http  # noqa: E402


def timed(decode, data: bytes) -> float:
    started = time.perf_counter()
    try:
        decode(data)
    except DecodeError:
        pass
    return time.perf_counter() - started


def decoding(runs: int) -> None:
    cbor, avro = CborDecoder(), AvroDecoder(json.dumps({"type": "array", "items": "null"}))
    cases = {
        "CBOR decimal of a 1,000 KiB number": (cbor.decode, cbor2.dumps(cbor2.CBORTag(4, [-2, (1 << (8 << 20)) - 1])),
                                               cbor2.dumps(b"x" * (1 << 20))),
        "CBOR number past 4,300 digits": (cbor.decode, cbor2.dumps({"v": cbor2.CBORTag(2, b"\xff" * 3000)}),
                                          cbor2.dumps({"v": b"\xff" * 3000})),
        "Avro 100,000,000 null items (6 bytes)": (avro.decode, zigzag(100_000_000) + zigzag(0),
                                                  zigzag(3) + zigzag(0)),
    }
    print(f"{'decoding':<40} {'hostile/ordinary':>17} {'grew MiB':>9}")
    for name, (decode, hostile, ordinary) in cases.items():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ratios = [timed(decode, hostile) / max(timed(decode, ordinary), 1e-6) for _ in range(runs)]
        grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10
        print(f"{name:<40} {statistics.median(ratios):>17.1f} {grew:>9}")


def latencies(url: str, seconds: float) -> list[float]:
    found, end = [], time.monotonic() + seconds
    with httpx.Client(timeout=30) as client:
        while time.monotonic() < end:
            started = time.monotonic()
            client.get(url)
            found.append(time.monotonic() - started)
            time.sleep(0.05)
    return found


def post_huge(host: str, port: int) -> None:
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(f"POST /api/v1/searches HTTP/1.1\r\nHost: x\r\nContent-Length: {90 << 20}\r\n\r\n".encode())
        try:
            for _ in range(90):
                sock.sendall(b"x" * (1 << 20))
        except OSError:
            pass


def web(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp) / "nats") as server:
        port, data = free_port(), Path(tmp) / "data"
        log = Path(tmp) / "web.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([CLI, "serve", "--server", server.url, "--port", str(port), "--data-dir", str(data)],
                                    stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}/api/v1/openapi.json"
            wait_http(url, proc, log)
            rows: dict[str, list[tuple[float, float]]] = {"idle": [], "six 90 MiB POSTs": [], "3,000 refusals": []}
            for _ in range(runs):
                idle = latencies(url, 2.0)
                rows["idle"].append((statistics.median(idle), max(idle)))
                senders = [threading.Thread(target=post_huge, args=("127.0.0.1", port)) for _ in range(6)]
                for t in senders:
                    t.start()
                during = latencies(url, 2.0)
                for t in senders:
                    t.join()
                rows["six 90 MiB POSTs"].append((statistics.median(during), max(during)))

                def refuse() -> None:
                    with httpx.Client(timeout=30) as client:
                        for _ in range(3000):
                            client.get(f"http://127.0.0.1:{port}/api/v1/systems")

                flood = threading.Thread(target=refuse)
                flood.start()
                during = latencies(url, 2.0)
                flood.join()
                rows["3,000 refusals"].append((statistics.median(during), max(during)))
            base = statistics.median(m for m, _ in rows["idle"])
            print(f"\n{'a second client, while':<40} {'median/idle':>12} {'worst/idle':>11} {'worst s':>8}")
            for name, found in rows.items():
                median, worst = statistics.median(m for m, _ in found), max(w for _, w in found)
                print(f"{name:<40} {median / base:>12.1f} {worst / base:>11.1f} {worst:>8.3f}")
            print(f"web RSS after: {int(open(f'/proc/{proc.pid}/status').read().split('VmRSS:')[1].split()[0]) >> 10} MiB")
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("BATCH_CONSOLE_REFUSALS_EVERY", "60")
    decoding(args.runs)
    web(args.runs)


if __name__ == "__main__":
    main()
