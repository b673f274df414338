"""A connection kept whole against the server it reaches: with several systems, one hostile or broken
server must cost its own system alone. nats-py trusts what a server says: an INFO that is not an object
(`INFO []`), a `connect_urls` that is not a list of text, an INFO line past its reader's limit each raised
an error nats-py does not expect (out of `connect`, a traceback; later, its read loop ended while it still
said connected), and its parser gathers a MSG of any announced size, or a line without an end, in memory
(a server that streamed a 700 MB MSG grew the web by as much). Here each becomes a NATS error of that
connection, which nats-py already handles: the first connection fails with a reason, a later one is
closed and made again."""

from __future__ import annotations

import logging
from typing import Any

from nats import errors as nats_errors
from nats.aio.client import Client
from nats.protocol import parser as nats_parser

from console.broker.nats_internals import connect_hooks, parser, set_connect_hooks

log = logging.getLogger(__name__)

MAX_MESSAGE = 64 << 20  # bytes of one message a server may announce: NATS' own max_payload is 64 MiB at most
MAX_UNENDED = 1 << 20  # bytes of a control line (an INFO with many connect_urls) before it must have ended
MAX_CONNECT_URLS = 1000
MAX_URL = 1024
GUARDED = "_console_server_guard"


class HostileServer(nats_errors.Error):
    """What a server sent is not what a NATS server sends: the connection is not used (its reason said)."""

    def __init__(self, why: str):
        super().__init__(why[:300])
        self.why = why[:300]

    def __str__(self) -> str:
        return f"nats: {self.why}"


def checked_info(info: Any) -> dict[str, Any]:
    """The server's INFO as a map whose fields nats-py reads have the types it reads; HostileServer otherwise."""
    if not isinstance(info, dict):
        raise HostileServer(f"the server's INFO is a {type(info).__name__}, not an object")
    urls = info.get("connect_urls")
    if urls is not None and not (isinstance(urls, list) and len(urls) <= MAX_CONNECT_URLS
                                 and all(isinstance(u, str) and 0 < len(u) <= MAX_URL for u in urls)):
        raise HostileServer("the server's INFO has connect_urls that are not a list of addresses")
    for flag in ("auth_required", "tls_required", "headers", "ldm", "jetstream"):
        if flag in info and not isinstance(info[flag], bool):
            raise HostileServer(f"the server's INFO has {flag} that is not true or false")
    for text in ("version", "server_name", "nonce", "server_id"):
        if text in info and not isinstance(info[text], str):
            raise HostileServer(f"the server's INFO has {text} that is not text")
    if "max_payload" in info and (type(info["max_payload"]) is not int or not 0 < info["max_payload"] <= MAX_MESSAGE):
        raise HostileServer("the server's INFO has a max_payload that is not a size")
    if "client_id" in info and (type(info["client_id"]) is not int or not 0 <= info["client_id"] < 1 << 64):
        raise HostileServer("the server's INFO has a client_id that is not a number")
    return info


def guard(nc: Client) -> Client:
    """Installs the checks on a client not yet connected (and on its parser, which lives as long as it)."""
    if getattr(nc, GUARDED, False):
        return nc
    setattr(nc, GUARDED, True)
    (connect_init, process_info), ps = connect_hooks(nc), parser(nc)

    async def guarded_connect_init() -> None:
        try:
            await connect_init()
        except (OSError, nats_errors.Error, TimeoutError):
            raise
        except ValueError as e:  # the INFO line past the reader's limit; JSON of numbers past int's limit
            raise HostileServer(f"the server's INFO cannot be read: {str(e)[:200]}") from None
        except (AttributeError, TypeError, KeyError) as e:  # a field nats-py reads, of another type
            raise HostileServer(f"the server's INFO is not a NATS server's (not an object, or a field of another "
                                f"type: {type(e).__name__})") from None

    async def guarded_info(info: Any, initial_connection: bool = False) -> None:
        await process_info(checked_info(info), initial_connection)

    original_parse = ps.parse
    awaiting_payload = getattr(nats_parser, "AWAITING_MSG_PAYLOAD", None)

    async def guarded_parse(data: bytes = b"") -> None:
        try:
            await original_parse(data)
        except HostileServer as e:  # an INFO refused above: the connection is made again
            log.warning("%s", e)
            raise nats_errors.ProtocolError from None
        except ValueError as e:  # an INFO that is not JSON, or whose numbers are past int's limit
            log.warning("nats: a line from the server that is not NATS: %s", str(e)[:200])
            raise nats_errors.ProtocolError from None
        if ps.state == awaiting_payload and ps.needed > MAX_MESSAGE:
            log.warning("nats: the server announced a message of %d bytes, past %d: the connection is made again",
                        ps.needed, MAX_MESSAGE)
            raise nats_errors.ProtocolError
        if len(ps.buf) > (MAX_MESSAGE + MAX_UNENDED if ps.state == awaiting_payload else MAX_UNENDED):
            log.warning("nats: %d bytes from the server without a line's end: the connection is made again",
                        len(ps.buf))
            raise nats_errors.ProtocolError

    set_connect_hooks(nc, guarded_connect_init, guarded_info)  # the seam: see the docstring
    ps.parse = guarded_parse  # the parser itself, at the same seam
    return nc
