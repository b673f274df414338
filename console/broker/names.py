"""Names a person gives (a URL, a form, a notebook) checked by the wire's own rules before they reach a
subject or a request: a subject past the server's control-line limit closes the whole connection."""

from __future__ import annotations

from console.domain.systems import domain_name
from console.domain.wire import MAX_BATCH_ID, consumer_name_problem, has_control, stream_name_problem
from console.errors import InvalidNameError

MAX_SUBJECT = 1024  # characters; the server's control line holds 4096 bytes with the reply and sizes


def stream(name: object) -> str:
    if (problem := stream_name_problem(name)) is not None:
        raise InvalidNameError(f"{problem}: {_shown(name)}")
    return name  # type: ignore[return-value]  # a str: the problem check refuses anything else


def consumer(name: object) -> str:
    if (problem := consumer_name_problem(name)) is not None:
        raise InvalidNameError(f"{problem}: {_shown(name)}")
    return name  # type: ignore[return-value]  # a str: the problem check refuses anything else


def batch_id(value: object) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_BATCH_ID or has_control(value):
        raise InvalidNameError(f"a batch id is 1..{MAX_BATCH_ID} printable characters: {_shown(value)}")
    return value


def subject(value: object) -> str:
    """A subject to publish on: tokens of printable characters without white space, within MAX_SUBJECT."""
    if (not isinstance(value, str) or not value or len(value) > MAX_SUBJECT or has_control(value)
            or any(c.isspace() for c in value) or "" in value.split(".")):
        raise InvalidNameError(f"not a subject of at most {MAX_SUBJECT} printable characters: {_shown(value)}")
    return value


def api_prefix(domain_: str | None) -> str:
    """The JetStream API's subject prefix: the system's own, or another domain's (a leaf's)."""
    return "$JS.API" if domain_ is None else f"$JS.{domain(domain_)}.API"


def domain(value: object) -> str:
    """A JetStream domain: a token of its API prefix ($JS.<domain>.API)."""
    try:
        return domain_name(value)
    except ValueError as e:
        raise InvalidNameError(str(e)) from None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}... ({len(str(value))} characters)"
