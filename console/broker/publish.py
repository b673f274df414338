"""Publishing from the console (the actions message.publish and message.republish, through StreamAdmin,
which refuses them in read-only mode): one message on a subject of a stream, and a range of a stream's
stored messages again on a subject of a stream; each answered with the server's PubAck or its refusal."""

from __future__ import annotations

from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.aio.client import Client

from console.broker import names
from console.broker.replies import reply_of
from console.domain.publishing import MAX_PAYLOAD, MAX_REPUBLISH, RESERVED, published_headers, published_subject, subject_of
from console.domain.replies import ApiError, PubAck
from console.errors import NoRespondersError, Refusal

TIMEOUT = 5.0
MSG_ID = "Nats-Msg-Id"


@dataclass(frozen=True)
class Republished:
    """One stored message published again: the new one's sequence (0: the server took it for a duplicate), or
    why not."""

    seq: int
    stored_as: int | None
    duplicate: bool = False
    problem: str | None = None


async def _subjects(nc: Client, stream: str) -> list[str]:
    try:
        info = await nc.jetstream().stream_info(names.stream(stream))
    except nats.js.errors.NotFoundError:
        raise Refusal(404, 10059, f"stream {stream} not found") from None
    return list(info.config.subjects or [])


async def _send(nc: Client, subject: str, payload: bytes, headers: dict[str, str]) -> PubAck:
    size = len(payload) + sum(len(k) + len(v) + 4 for k, v in headers.items())
    if size > min(MAX_PAYLOAD, nc.max_payload or MAX_PAYLOAD):
        raise ValueError(f"{size:,} bytes with its headers: more than the server takes ({nc.max_payload:,})")
    try:
        msg = await nc.request(subject, payload, timeout=TIMEOUT, headers=headers or None)
    except nats.errors.NoRespondersError:
        raise Refusal(503, None, f"no stream stores {subject}") from None
    try:
        reply = reply_of(msg)
    except NoRespondersError as e:
        raise Refusal(503, None, str(e)) from None
    if isinstance(reply, ApiError):
        raise Refusal(reply.code, reply.err_code, reply.description)
    if not isinstance(reply, PubAck):
        raise Refusal(None, None, f"not a PubAck: {str(reply)[:200]}")
    return reply


async def publish_one(nc: Client, stream: str, subject: str, payload: bytes,
                      headers: tuple[tuple[str, str], ...]) -> PubAck:
    """One message on a subject the stream stores; its PubAck (Refusal: the server's refusal)."""
    subject = published_subject(subject)
    pairs = dict(published_headers(headers))
    if not subject_of(subject, await _subjects(nc, stream)):
        raise ValueError(f"{subject} is not a subject of stream {stream}")
    ack = await _send(nc, subject, payload, pairs)
    if ack.stream != stream:
        raise Refusal(None, None, f"stored by stream {ack.stream}, not {stream}")
    return ack


async def republish(nc: Client, stream: str, first: int, last: int, to_stream: str, to_subject: str) -> list[Republished]:
    """The stream's messages first..last published again on `to_subject` (a subject of `to_stream`), with
    their headers (not the server's, a batch's or a repair's) and a message id of their origin, so the same
    republish twice within the duplicate window stores each once."""
    to_subject = published_subject(to_subject)
    if not 1 <= first <= last or last - first >= MAX_REPUBLISH:
        raise ValueError(f"a range of 1 to {MAX_REPUBLISH} stored messages, first <= last")
    if not subject_of(to_subject, await _subjects(nc, to_stream)):
        raise ValueError(f"{to_subject} is not a subject of stream {to_stream}")
    js = nc.jetstream()
    done: list[Republished] = []
    for seq in range(first, last + 1):
        try:
            stored = await js.get_msg(names.stream(stream), seq)
        except nats.js.errors.NotFoundError:
            done.append(Republished(seq, None, problem="not stored (deleted, or past the stream's last)"))
            continue
        kept = {k: v for k, v in (stored.headers or {}).items()
                if not k.lower().startswith((*RESERVED, "nats-")) and k}
        kept[MSG_ID] = f"republished.{stream}.{seq}.{to_subject}"[:256]
        try:
            ack = await _send(nc, to_subject, stored.data or b"", kept)
        except (Refusal, ValueError) as e:
            done.append(Republished(seq, None, problem=str(e)[:300]))
            continue
        done.append(Republished(seq, ack.seq if not ack.duplicate else 0, ack.duplicate))
    return done
