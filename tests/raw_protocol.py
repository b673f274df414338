"""A client of the account that writes the NATS protocol itself: what nats-py's publish refuses to write
(a subject that is not UTF-8, a status line in the headers), as any client may."""

import asyncio


async def send_raw(url: str, *lines: bytes) -> None:
    """Protocol lines as given, after a CONNECT that allows headers; returns once the server has read them."""
    host, port = url.removeprefix("nats://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    await reader.readline()  # INFO
    writer.write(b'CONNECT {"verbose":false,"headers":true}\r\n' + b"".join(lines) + b"PING\r\n")
    await writer.drain()
    assert (await reader.readline()).startswith(b"PONG")
    writer.close()


def hpub(subject: str, header: bytes, payload: bytes = b"") -> bytes:
    return b"HPUB %s %d %d\r\n%s%s\r\n" % (subject.encode(), len(header), len(header) + len(payload), header, payload)
