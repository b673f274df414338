"""What an operator may publish from the console (console.commands' message.publish and
message.republish): a subject of the named stream, never a wildcard, an API or a system subject; headers
that are headers, none that would make the message part of a batch or of a repair it is not part of."""

from __future__ import annotations

from typing import Iterable

from console.domain.subjects import subject_matches
from console.domain.wire import has_control

MAX_SUBJECT = 255
MAX_HEADERS = 32
MAX_HEADER_NAME = 64
MAX_HEADER_VALUE = 4096
MAX_PAYLOAD = 1024 * 1024  # the server's max_payload by default (the connection's own bound is checked too)
MAX_REPUBLISH = 1000  # stored messages republished by one action
# A header of these is the server's or the console's to write: a batch's (it would forge part of one), a
# repair's (it would make a repair look done, console.domain.manifests)
RESERVED = ("nats-batch-", "batch-console-", "nats-required-api-level")


def published_subject(subject: object) -> str:
    """A subject one message may be published on; ValueError saying why not."""
    if not isinstance(subject, str) or not subject or len(subject) > MAX_SUBJECT:
        raise ValueError(f"a subject of 1 to {MAX_SUBJECT} characters, not {str(subject)[:40]!r}")
    if has_control(subject) or any(c.isspace() for c in subject) or "" in subject.split("."):
        raise ValueError("a subject of printable tokens, without white space or empty tokens")
    if any(token in ("*", ">") for token in subject.split(".")):
        raise ValueError("a subject to publish on, not a wildcard")
    if subject.startswith(("$", "_INBOX.")):
        raise ValueError(f"{subject[:40]!r} is the server's or a client's own subject ($JS, $SYS, $KV, inboxes)")
    return subject


def published_headers(pairs: Iterable[tuple[object, object]]) -> tuple[tuple[str, str], ...]:
    """Headers one message may carry; ValueError saying why not."""
    found: list[tuple[str, str]] = []
    for name, value in pairs:
        if len(found) >= MAX_HEADERS:
            raise ValueError(f"at most {MAX_HEADERS} headers")
        if (not isinstance(name, str) or not 0 < len(name) <= MAX_HEADER_NAME or has_control(name)
                or any(c.isspace() or c == ":" for c in name) or not name.isprintable()):
            raise ValueError(f"a header name of 1 to {MAX_HEADER_NAME} printable characters, no ':' or space")
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE or has_control(value):
            raise ValueError(f"header {name}: a value of at most {MAX_HEADER_VALUE} printable characters")
        if name.lower().startswith(RESERVED):
            raise ValueError(f"header {name} is written by the server or the console, not by hand")
        found.append((name, value))
    return tuple(found)


def header_pair(text: str) -> tuple[str, str]:
    """`Name: value` (the CLI's --header); ValueError for text that is not one."""
    name, sep, value = text.partition(":")
    if not sep:
        raise ValueError(f"a header is 'Name: value', not {text[:40]!r}")
    return name.strip(), value.strip()


def subject_of(subject: str, filters: Iterable[str]) -> bool:
    """Whether a stream with these subject filters stores a message published on `subject`."""
    return any(subject_matches(f, subject) for f in filters)
