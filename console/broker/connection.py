"""One place that turns ConnectionSettings into nats-py connect arguments."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import socket
import ssl
import struct
import termios
from pathlib import Path
from typing import Any, Awaitable, Callable, TypeVar, overload

import nats
import nats.errors
from nats.aio.client import Client

Connection = Client  # what the rest of the console holds: a connection made here
NatsError = nats.errors.Error  # what a NATS call may raise, for code outside broker/ to catch

from console.backoff import Backoff
from console.broker import server_guard
from console.broker.nats_internals import (lame_duck_callback, message_handler, server_info, set_lame_duck_callback,
                                           set_message_handler, socket_of, write_held)
from console.config import ConnectionSettings, open_to_others
from console.errors import ConfigError, NatsUnreachableError

log = logging.getLogger(__name__)


@overload
def _existing(path: str, what: str) -> str: ...
@overload
def _existing(path: str | None, what: str) -> str | None: ...
def _existing(path: str | None, what: str) -> str | None:
    if path is None:
        return None
    if not Path(path).is_file():
        raise ConfigError(f"{what} {path} does not exist or is not a file")
    return path


def _private(path: str, what: str) -> str:
    """A secret file others may read is used, with a warning (ssh would refuse it)."""
    if (problem := open_to_others(Path(path))) is not None:
        log.warning("the %s %s is %s: chmod 600 %s", what, path, problem, path)
    return path


def tls_context(settings: ConnectionSettings) -> ssl.SSLContext | None:
    if not (settings.tls_ca or settings.tls_cert or settings.tls_key):
        return None
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise ConfigError("a TLS client certificate needs both --tls-cert and --tls-key")
    context = ssl.create_default_context(cafile=_existing(settings.tls_ca, "TLS CA file"))
    if settings.tls_cert and settings.tls_key:
        context.load_cert_chain(_existing(settings.tls_cert, "TLS certificate"), _existing(settings.tls_key, "TLS key"))
    return context


def connect_options(settings: ConnectionSettings) -> dict[str, Any]:
    """Keyword arguments for nats.connect(); credentials go in, and are never logged from here."""
    options: dict[str, Any] = {
        "servers": list(settings.servers),
        "name": settings.name,
        "connect_timeout": settings.connect_timeout,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": 0.5,
    }
    if settings.creds:
        options["user_credentials"] = _private(_existing(settings.creds, "creds file"), "creds file")
    if settings.nkey:
        options["nkeys_seed"] = _private(_existing(settings.nkey, "nkey seed file"), "nkey seed file")
    if settings.token:
        options["token"] = settings.token
    if settings.user:
        options["user"] = settings.user
        options["password"] = settings.password or ""
    if (context := tls_context(settings)) is not None:
        options["tls"] = context
    return options


async def connect(settings: ConnectionSettings, *, give_up_after: float | None = None, **overrides: Any) -> Client:
    """Connect with the settings; overrides (callbacks, reconnect policy) win over the defaults.

    give_up_after bounds the first connection: nats-py retries an unreachable server forever
    on its own (max_reconnect_attempts=0 counts as no limit there), which one-shot commands must not.
    """

    async def error_cb(e: Exception) -> None:
        log.warning("NATS: %s", e)

    options = {"error_cb": error_cb, **connect_options(settings), **overrides}
    log.info("connecting to %s", settings.describe())
    nc = server_guard.guard(Client())  # one hostile server costs its own system alone
    if give_up_after is None:
        await nc.connect(**options)
        return guarded(nc)
    try:
        await asyncio.wait_for(nc.connect(**options), give_up_after)
        return guarded(nc)
    except (asyncio.TimeoutError, OSError, nats.errors.Error) as e:
        last = nc.last_error  # what each try met, while nats-py tried again until the time was up
        await close_quietly(nc)
        why = str(e) or type(e).__name__
        if isinstance(e, asyncio.TimeoutError):
            why = f"no answer within {give_up_after:g}s" + (f" ({str(last)[:200]})" if last else "")
        raise NatsUnreachableError(f"cannot reach NATS at {settings.describe()}: {why}") from None


def unread(nc: Client) -> tuple[int, int] | None:
    """What the server has sent that this connection has not read yet, in the kernel's receive buffer, and
    that buffer's size now (the kernel grows it for a reader that keeps up, so a starved one may have a small
    one, full): a reader that keeps up leaves next to nothing there. None where it cannot be told."""
    sock = socket_of(nc)
    if sock is None:
        return None
    try:
        waiting: int = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
        size: int = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
    except (OSError, ValueError, AttributeError):
        return None
    return waiting, size


NOT_UTF8 = "_console_not_utf8"  # the connection's count of messages repaired by guarded()


def guarded(nc: Client) -> Client:
    """The connection, its read loop kept from a message whose subject or reply subject is not UTF-8. Any
    client may publish one, and nats-py, decoding it, ends the read loop of every connection subscribed to
    it: the connection still says it is connected, and reads nothing more. Such a subject is read with
    U+FFFD for the bytes that are not UTF-8 (counted: not_utf8()), so the message reaches whoever subscribed,
    whose own checks refuse it as any other malformed input, and a JetStream consumer's sequence goes on
    (an ordered consumer that missed it would start again at it, forever)."""
    through = message_handler(nc)
    if through is None or hasattr(nc, NOT_UTF8):
        return nc
    setattr(nc, NOT_UTF8, 0)

    async def process_msg(sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        if not (subject.isascii() and reply.isascii()):
            subject, reply = repaired(nc, subject, reply)
        await through(sid, subject, reply, data, headers)

    set_message_handler(nc, process_msg)
    return nc


def not_utf8(nc: Client) -> int:
    """Messages whose subject or reply subject the connection read with U+FFFD (guarded)."""
    return int(getattr(nc, NOT_UTF8, 0))


def repaired(nc: Client, subject: bytes, reply: bytes) -> tuple[bytes, bytes]:
    """A message's subject and reply, each UTF-8: as they are, or (counted, and said now and then) with U+FFFD
    in place of the bytes that are not."""
    try:
        subject.decode(), reply.decode()
        return subject, reply
    except UnicodeDecodeError:
        pass
    count = not_utf8(nc) + 1
    setattr(nc, NOT_UTF8, count)
    if count in (1, 10, 100) or count % 10_000 == 0:
        log.warning("%d message(s) whose subject or reply is not UTF-8 (the latest on %r): read with U+FFFD in "
                    "place of the bytes that are not", count, subject[:100])
    return subject.decode("utf-8", "replace").encode(), reply.decode("utf-8", "replace").encode()


# What the rest of the console may ask of a connection it holds; nats-py's own methods are called
# here only (tests/unit/test_layers.py keeps it so).

def is_connected(nc: Client) -> bool:
    return nc.is_connected


def is_closed(nc: Client) -> bool:
    return nc.is_closed


def why_closed(nc: Client) -> str:
    return repr(nc.last_error) if nc.last_error else "no reason given"


def identity(nc: Client) -> tuple[str | None, int | None]:
    """The connection as the server names it: (server name, client id); CONNZ says the same."""
    name = server_info(nc).get("server_name")
    return (name if isinstance(name, str) else None), nc.client_id


def connected_to(nc: Client) -> str | None:
    """The server this connection is on now, as a URL without credentials (nats://host:port)."""
    url = nc.connected_url
    return f"nats://{url.hostname if ':' not in (url.hostname or '') else f'[{url.hostname}]'}:{url.port}" \
        if url is not None and url.hostname else None


def on_lame_duck(nc: Client, notice: Callable[[], Awaitable[None]]) -> None:
    """`notice()` also runs when the server this connection is on says it is in lame duck mode (its INFO's
    ldm): nats-py takes one such callback, at connect, so the one given then runs first."""
    given = lame_duck_callback(nc)

    async def both() -> None:
        if given is not None:
            await given()
        await notice()
    set_lame_duck_callback(nc, both)


async def reconnect_elsewhere(nc: Client) -> None:
    """The connection made again now (to another server of the pool: a server in lame duck mode takes no
    new client); what it buffered is sent there."""
    await nc.force_reconnect()


def reconnects(nc: Client) -> int:
    """How many times the connection was made again (to the same server or another)."""
    return nc.stats.get("reconnects", 0)


async def flush(nc: Client, timeout: float = 2.0) -> None:
    """Every subscription and publish so far is in place on the server. nats-py (2.16) writes a flush's
    PING straight to its socket, ahead of the commands it still holds for its flusher task (the SUB just
    made): that PING's PONG could come back before the server had the SUB, and a message published then
    was not the subscriber's (a loaded host's tap missed a batch's first reply). What it holds goes first."""
    write_held(nc)  # no await until the PING
    await nc.flush(timeout=timeout)  # type: ignore[arg-type]  # nats-py annotates int; it takes seconds as a float


async def publish(nc: Client, subject: str, body: bytes, headers: dict[str, str], timeout: float) -> None:
    """Published and flushed: on the server when this returns."""
    await nc.publish(subject, body, headers=headers)
    await flush(nc, timeout)


async def close(nc: Client | None) -> None:
    if nc is not None and not nc.is_closed:
        try:
            await nc.close()
        except OSError as e:  # its socket lost while it flushed: closed all the same
            log.debug("a connection's socket was lost as it closed: %r", e)


async def close_quietly(nc: Client) -> None:
    """A connection given up on while it was being made: its reconnecting tasks ended, whatever it says."""
    try:
        await nc.close()
    except Exception as e:  # noqa: BLE001  # a half-made connection may fail to close; it is dropped either way
        log.debug("a connection given up on did not close cleanly: %r", e)


async def cancelled(task: asyncio.Task[Any], every: float = 0.2) -> None:
    """Cancel the task and wait until it has ended. A task awaiting nats-py can miss one cancel:
    Python 3.11's asyncio.wait_for (in every nats-py request) returns the answer when it lands in
    the same pass as the cancel, and the task goes on (a follower then reads for ever). So the
    cancel is sent again until the task ends; a cancel of the caller meanwhile is raised after it."""
    interrupted: asyncio.CancelledError | None = None
    while not task.done():
        task.cancel()
        try:
            await asyncio.wait([task], timeout=every)
        except asyncio.CancelledError as caller_cancelled:
            interrupted = caller_cancelled
    if interrupted is not None:
        raise interrupted


T = TypeVar("T")
REQUEST_TRIES = 4


async def asked_again(request: Callable[[], Awaitable[T]], tries: int = REQUEST_TRIES, nc: Client | None = None) -> T:
    """`request()`, asked again with backoff (1, 2, 4 s) while it times out: a cluster electing
    leaders or a busy server answers late, not never. The last timeout is raised. With `nc`, a
    request the server refused to take (a permissions violation on the JetStream API, which nats-py
    reports only to the error callback while the request waits out its timeout) is not asked again:
    its violation is raised."""
    backoff = Backoff(first=1.0, most=60.0)
    for attempt in range(tries):
        before = nc.last_error if nc is not None else None
        try:
            return await request()
        except nats.errors.TimeoutError:
            if (denied := _api_denied(nc, before)) is not None:
                raise denied from None
            if attempt + 1 == tries:
                raise
        await asyncio.sleep(backoff.wait())
    raise nats.errors.TimeoutError  # tries < 1


def _api_denied(nc: Client | None, before: Exception | None) -> nats.errors.Error | None:
    error = nc.last_error if nc is not None else None
    if error is None or error is before or 'permissions violation for publish to "$js.api.' not in str(error).lower():
        return None
    return nats.errors.Error(str(error))
