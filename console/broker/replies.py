"""Shared reply handling for the publishers: nats-py messages -> domain replies or typed errors."""

from __future__ import annotations

from typing import Mapping

from nats.aio.msg import Msg

from console.domain.replies import ApiError, MalformedReply, Reply, to_reply
from console.errors import BatchError, NoRespondersError, batch_server_error

NO_RESPONDERS_STATUS = "503"


def is_no_responders(msg: Msg) -> bool:
    return no_responders(msg.headers, msg.data)


def no_responders(headers: Mapping[str, str] | None, data: bytes) -> bool:
    """A 503 status without a body: no stream listened on the subject."""
    return (headers or {}).get("Status") == NO_RESPONDERS_STATUS and not data


def reply_of(msg: Msg) -> Reply:
    """The domain reply carried by a message; raises NoRespondersError or MalformedReply."""
    if is_no_responders(msg):
        raise NoRespondersError(f"no stream listens on {(msg.headers or {}).get('Nats-Subject') or 'the subject'}")
    return to_reply(msg.data)


def error_of(error: ApiError) -> BatchError:
    return batch_server_error(error.err_code, error.description, error.code, error.stream)


__all__ = ["reply_of", "error_of", "is_no_responders", "MalformedReply"]
