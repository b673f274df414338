"""nats-py trusts what a server sends: a report for nats-py, with its reproduction.

    .venv/bin/python scripts/upstream/nats_py_hostile_server.py

What happens (nats-py 2.16.0, plain `nats.connect`, no console code): a server whose INFO is
- `INFO []`: `AttributeError: 'list' object has no attribute 'get'` out of `connect()` (not a
  `nats.errors.Error`, so `allow_reconnect` and the server pool are bypassed);
- `INFO {"connect_urls": 5}`: `TypeError: 'int' object is not iterable`, the same way;
- an INFO line longer than the reader's limit: `ValueError: Separator is not found, and chunk exceed the
  limit`, the same way;
and once connected, an asynchronous INFO of the same kinds ends the read loop (`_read_loop` logs
"encountered error" and breaks) while `is_connected` stays true: the client reads nothing more. A server
that announces `MSG subject 1 700000000` has the parser gather all 700 MB in memory before it looks at it
(`Parser.parse` keeps extending `buf` while AWAITING_MSG_PAYLOAD), and a line with no CRLF grows `buf`
without bound too (past MAX_CONTROL_LINE_SIZE it "must be a split buffer" and waits for more).

What would be expected: each is a protocol error of that connection (`nats.errors.ProtocolError`), which
nats-py already handles: the first connection tries the next server, a later one reconnects. A message
announced past the server's own `max_payload` (or 64 MiB, NATS' hard limit) and a control line past a
bound are refused before they are gathered.

The console guards these at one seam (console/broker/server_guard.py); this script uses nats-py alone.
Exit 0 when nats-py still behaves as described (the report still holds), 1 when it no longer does.
"""

import asyncio
import resource
import socket
import sys
import threading

import nats

CASES = {"INFO []": b"INFO []\r\n", "connect_urls 5": b'INFO {"connect_urls": 5}\r\n',
         "a 1 MiB INFO line": b"INFO {" + b" " * (1 << 20) + b"}\r\n"}
GOOD = b'INFO {"server_id":"X","version":"2.14.0","proto":1,"headers":true,"max_payload":1048576}\r\n'


def serve(greet: bytes, after_ping: bytes = b"") -> int:
    listener = socket.create_server(("127.0.0.1", 0))

    def run() -> None:
        conn, _ = listener.accept()
        conn.sendall(greet)
        if after_ping:
            while b"PING" not in conn.recv(65536):
                pass
            conn.sendall(b"PONG\r\n" + after_ping)
            chunk = b"x" * (1 << 20)
            try:
                for _ in range(300):
                    conn.sendall(chunk)
            except OSError:
                pass

    threading.Thread(target=run, daemon=True).start()
    return listener.getsockname()[1]


async def main() -> int:
    holds = True
    for name, greet in CASES.items():
        port = serve(greet)
        try:
            nc = await asyncio.wait_for(nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False,
                                                     connect_timeout=2), 10)
            await nc.close()
            print(f"{name}: connected (the report no longer holds)")
            holds = False
        except nats.errors.Error as e:
            print(f"{name}: nats.errors.Error {e!r} (the report no longer holds)")
            holds = False
        except Exception as e:  # noqa: BLE001  # what the report is about: an error nats-py does not expect
            print(f"{name}: {type(e).__name__}: {e}")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    port = serve(GOOD, b"MSG s 1 700000000\r\n")
    nc = await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False)
    await nc.subscribe("s")
    await asyncio.sleep(5)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10
    print(f"a MSG announcing 700,000,000 bytes: the client grew by {grown} MiB while it gathered it")
    holds = holds and grown > 100
    await nc.close()
    return 0 if holds else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
