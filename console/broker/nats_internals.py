"""The one module that names nats-py's private state, as typed operations (tests/unit/test_wire_seam.py fails
when another module does). Written against nats-py 2.16, the minor release pyproject.toml pins: the fast
paths that use them (console.broker.wire_in, wire_out, capture) check that each is there as they expect
(`fast_paths` says which are on, and why not) and fall back to nats-py's public API where one is not, so a
release that changes them makes the console slower, never wrong."""

from __future__ import annotations

import socket
from asyncio.trsock import TransportSocket
from typing import Any, Awaitable, Callable

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js.client import JetStreamContext
from nats.protocol import parser as nats_parser

MessageHandler = Callable[[int, bytes, bytes, bytes, "bytes | None"], Awaitable[None]]
_OUT_FIELDS = ("_pending", "_pending_data_size", "_flush_queue", "_max_pending_size", "_max_payload", "_flush_pending")


def server_info(nc: Client) -> dict[str, Any]:
    """The INFO of the server the connection is on (empty before it connected)."""
    info = getattr(nc, "_server_info", None)
    return info if isinstance(info, dict) else {}


def connection_of(js: JetStreamContext) -> Client:
    """The connection a JetStream context talks through."""
    nc: Client = js._nc
    return nc


def connection_if_any(js: JetStreamContext) -> Client | None:
    """The same, or None where nats-py keeps it elsewhere (a caller then goes its public way)."""
    nc = getattr(js, "_nc", None)
    return nc if isinstance(nc, Client) else None


def consumer_of(sub: Any) -> str | None:
    """The consumer a JetStream subscription reads from, or None where nats-py keeps it elsewhere."""
    name = getattr(sub, "_consumer", None)
    return name if isinstance(name, str) else None


def socket_of(nc: Client) -> socket.socket | TransportSocket | None:
    """The connection's socket (asyncio hands out a TransportSocket, not the socket itself), where its transport
    shows one."""
    transport = getattr(nc, "_transport", None)
    writer = getattr(transport, "_bare_io_writer", None) or getattr(transport, "_io_writer", None)
    sock = writer.get_extra_info("socket") if writer is not None else None
    return sock if isinstance(sock, (socket.socket, TransportSocket)) else None


def write_held(nc: Client) -> None:
    """What nats-py holds for its flusher task, written to the socket now (its flush's PING goes straight to
    the socket, ahead of it)."""
    pending = getattr(nc, "_pending", None)
    transport = getattr(nc, "_transport", None)
    if pending and isinstance(pending, list) and nc.is_connected and transport is not None:
        transport.writelines(pending[:])  # as its flusher would, at once
        nc._pending, nc._pending_data_size = [], 0


def lame_duck_callback(nc: Client) -> Callable[[], Awaitable[None]] | None:
    cb: Callable[[], Awaitable[None]] | None = nc._lame_duck_mode_cb
    return cb


def set_lame_duck_callback(nc: Client, callback: Callable[[], Awaitable[None]]) -> None:
    nc._lame_duck_mode_cb = callback


# -- outgoing: messages straight into nats-py's write buffer --------------------------------------

class OutBuffer:
    """nats-py's write buffer, written to as its publish writes it (console.broker.wire_out)."""

    def __init__(self, nc: Client):
        self.nc = nc
        self.usable = all(hasattr(nc, f) for f in _OUT_FIELDS) and isinstance(getattr(nc, "stats", None), dict)

    def max_payload(self) -> int:
        size: int = self.nc._max_payload
        return size

    def append(self, command: bytes, payload_size: int) -> bool:
        """The command in the buffer; True when nats-py's flusher is to be woken or waited for."""
        nc = self.nc
        nc._pending.append(command)
        nc._pending_data_size += len(command)
        stats = nc.stats
        stats["out_msgs"] += 1
        stats["out_bytes"] += payload_size
        return bool(0 < nc._max_pending_size < nc._pending_data_size or (
            nc._flush_queue is not None and nc._flush_queue.empty()))

    async def flush(self) -> None:
        nc = self.nc
        if 0 < nc._max_pending_size < nc._pending_data_size:
            await nc._flush_pending(force_flush=True)  # nats-py's own bound on what waits in memory
        else:
            await nc._flush_pending()  # wakes its flusher, as its publish does


# -- incoming: messages handed over as nats-py's parser reads them --------------------------------

def parser(nc: Client) -> Any:
    """nats-py's protocol parser of the connection (it lives as long as the client), or None."""
    return getattr(nc, "_ps", None)


def message_handler(nc: Client) -> MessageHandler | None:
    """What nats-py's parser calls with each MSG (sid, subject, reply, payload, headers), or None."""
    handler = getattr(nc, "_process_msg", None)
    return handler if callable(handler) else None


def set_message_handler(nc: Client, handler: MessageHandler) -> None:
    setattr(nc, "_process_msg", handler)


async def hand_to_nats(nc: Client, sid: int, subject: bytes, reply: bytes, payload: bytes) -> None:
    """A MSG read outside nats-py's parser that none of ours takes: nats-py's own way from here."""
    await nc._process_msg(sid, subject, reply, payload, None)  # type: ignore[arg-type]  # nats-py passes None too


async def status_of(nc: Client, headers: bytes) -> dict[str, str]:
    """A message's header block as nats-py reads it (a status line included)."""
    found: dict[str, str] | None = await nc._process_headers(headers)
    return found or {}


def subscriptions(nc: Client) -> dict[int, Subscription] | None:
    subs = getattr(nc, "_subs", None)
    return subs if isinstance(subs, dict) else None


def last_sid(nc: Client) -> int | None:
    """The id of the connection's last subscription (the next takes this plus one)."""
    sid = getattr(nc, "_sid", None)
    return sid if isinstance(sid, int) else None


def subscription_id(sub: Subscription) -> int:
    sid: int = sub._id
    return sid


def subscription_client(sub: Subscription) -> Client:
    nc: Client = sub._conn
    return nc


# -- the connect handshake (console.broker.server_guard) -------------------------------------------

def connect_hooks(nc: Client) -> tuple[Callable[[], Awaitable[None]], Callable[..., Awaitable[None]]]:
    """nats-py's handshake and INFO handling, to wrap."""
    return nc._process_connect_init, nc._process_info


def set_connect_hooks(nc: Client, connect_init: Callable[[], Awaitable[None]],
                      process_info: Callable[..., Awaitable[None]]) -> None:
    setattr(nc, "_process_connect_init", connect_init)
    setattr(nc, "_process_info", process_info)


def handling_usable(nc: Client) -> bool:
    """Whether messages can be handed to readers as nats-py's parser reads them (console.broker.capture)."""
    return message_handler(nc) is not None and subscriptions(nc) is not None \
        and isinstance(getattr(nc, "stats", None), dict) and last_sid(nc) is not None


def parser_usable(nc: Client) -> bool:
    """Whether MSG lines can be read ahead of nats-py's parser (console.broker.wire_in)."""
    ps = parser(nc)
    return ps is not None and getattr(nats_parser, "AWAITING_CONTROL_LINE", None) is not None \
        and isinstance(getattr(ps, "buf", None), bytearray) and callable(getattr(ps, "parse", None)) \
        and callable(getattr(ps, "reset", None))


def fast_paths(nc: Client) -> dict[str, str | None]:
    """Each fast path and why it is off (None: on) for this connection: the paths' own checks."""
    return {
        "publish": None if OutBuffer(nc).usable else "nats-py's write buffer is not where 2.16 keeps it",
        "tap": None if handling_usable(nc) else "nats-py's message handling is not 2.16's",
        "parser": None if parser_usable(nc) else "nats-py's parser is not 2.16's",
    }
