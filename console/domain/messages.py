"""Stored messages as Replay shows them: where they sit in the stream, their batch headers, and a
payload preview that is always safe to put in a page."""

from __future__ import annotations

import enum
import html
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

BATCH_HEADERS = ("Nats-Batch-Id", "Nats-Batch-Sequence", "Nats-Batch-Commit")
PREVIEW_BYTES = 4096


class MalformedAckSubject(ValueError):
    pass


@dataclass(frozen=True)
class AckMetadata:
    """What the server encodes in a delivered message's `$JS.ACK...` reply subject."""

    stream: str
    consumer: str
    delivered: int
    stream_seq: int
    consumer_seq: int
    time: datetime
    pending: int


def to_ack_metadata(reply: str) -> AckMetadata:
    """Both forms: `$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>` and the
    newer one with domain and account hash after `$JS.ACK` (and a trailing token)."""
    tokens = reply.split(".")
    if tokens[:2] != ["$JS", "ACK"] or len(tokens) not in (9, 11, 12):
        raise MalformedAckSubject(f"not a JetStream ack subject: {reply!r}")
    fields = tokens[2:9] if len(tokens) == 9 else tokens[4:11]
    try:
        delivered, sseq, cseq, ts, pending = (int(t) for t in fields[2:])
    except ValueError:
        raise MalformedAckSubject(f"not a JetStream ack subject: {reply!r}") from None
    return AckMetadata(fields[0], fields[1], delivered, sseq, cseq,
                       datetime.fromtimestamp(ts / 1e9, tz=timezone.utc), pending)


@dataclass(frozen=True)
class StoredMessage:
    subject: str
    stream_seq: int
    consumer_seq: int
    time: datetime
    headers: tuple[tuple[str, str], ...]
    payload: bytes = field(repr=False)
    delivered: int = 1
    pending: int = 0
    ack_subject: str | None = None  # where ack/nak/term go; None for a peek

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name), None)

    @property
    def batch_id(self) -> str | None:
        return self.header("Nats-Batch-Id")

    @property
    def batch_seq(self) -> int | None:
        value = self.header("Nats-Batch-Sequence")
        return int(value) if value and value.isdigit() else None


def in_batch_order(messages: list[StoredMessage]) -> list[StoredMessage]:
    return sorted(messages, key=lambda m: (m.batch_seq is None, m.batch_seq or 0, m.stream_seq))


@dataclass(frozen=True)
class Preview:
    kind: str  # "text", "json", "hex" or "empty"
    text: str  # escaped, ready for HTML
    size: int
    truncated: bool


def as_text(data: bytes, truncated: bool) -> str | None:
    """UTF-8 made of printable characters and line breaks, else None. A cut payload may end inside a
    character: up to three trailing bytes are forgiven."""
    for cut in range(4 if truncated else 1):
        try:
            text = data[:len(data) - cut].decode()
        except UnicodeDecodeError:
            continue
        return text if all(c.isprintable() or c in "\n\r\t" for c in text) else None
    return None


def preview(payload: bytes, cap: int = PREVIEW_BYTES) -> Preview:
    """JSON pretty-printed, else UTF-8 text, else hex; at most `cap` bytes shown, always escaped."""
    if not payload:
        return Preview("empty", "", 0, False)
    shown, truncated = payload[:cap], len(payload) > cap
    text = as_text(shown, truncated)
    if text is not None:
        if not truncated:
            try:
                return Preview("json", html.escape(json.dumps(json.loads(text), indent=2, ensure_ascii=False)),
                               len(payload), False)
            except ValueError:
                pass
        return Preview("text", html.escape(text), len(payload), truncated)
    hex_lines = [shown[i:i + 16].hex(" ") for i in range(0, len(shown), 16)]
    return Preview("hex", html.escape("\n".join(hex_lines)), len(payload), truncated)


class Ack(enum.Enum):
    """What Replay may answer for a message fetched from a durable consumer."""

    ACK = b"+ACK"
    NAK = b"-NAK"
    TERM = b"+TERM"
    IN_PROGRESS = b"+WPI"


@dataclass(frozen=True)
class FetchResult:
    messages: tuple[StoredMessage, ...]
    ended: str  # why the request ended, in the server's words where it gave some
    error: str | None = None  # a status that is a problem (consumer deleted, limits exceeded, ...)


@dataclass(frozen=True)
class PullConsumer:
    """A durable pull consumer as Replay lists it."""

    name: str
    acks: bool  # False for ack policy none: nothing to ack, nak or term
    ack_pending: int
    pending: int
