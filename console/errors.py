"""The console's one exception hierarchy: everything it raises on purpose is a ConsoleError, with the
server's code and text where there is one. Imports nothing from the console but the domain."""

from __future__ import annotations

from console.domain.codes import ERROR_CODES
from console.domain.replies import FlowError, FlowGap, PubAck


class ConsoleError(Exception):
    """Base of every error the console raises on purpose."""


class ConfigError(ConsoleError):
    """Settings that cannot work (missing file, conflicting options)."""


class MissingKeyError(ConfigError):
    """No event key where a reading part looks for it: no collector has run on that data directory."""


class StreamMissingError(ConsoleError):
    """A stream asked for by name that the server does not have."""


class MaskingError(ConfigError):
    """The payload masking rules could not be read: the console does not start without them."""


class InvalidNameError(ConsoleError, ValueError):
    """A name given by a person (a URL, a form, a notebook) that the server would refuse: refused before
    anything is sent, since a request whose subject breaks the protocol costs the whole connection."""


class KeyMismatchError(ConsoleError):
    """The collector's own events do not verify with this reader's event key: it is not the collector's."""


class CaptureRefusedError(ConsoleError):
    """The account may not keep advisories in a stream: the collector follows them live only."""


class EventLogMissingError(ConsoleError):
    """There is no event log stream yet (no collector has run against this server)."""


class NatsUnreachableError(ConsoleError):
    """No NATS server answered at the configured URLs ("cannot reach NATS at URL ...")."""


class Refusal(ConsoleError):
    """The server refused a change (a stream edit): its own code, err_code and text, for the form."""

    def __init__(self, code: int | None, err_code: int | None, description: str):
        super().__init__(f"[{err_code}] {description}")
        self.code, self.err_code, self.description = code, err_code, description


class AuditRefused(ConsoleError):
    """An action refused because the audit trail could not store its attempt: nothing was done."""


class BusyError(ConsoleError):
    """Refused for now: the console already does as much of this as it allows at once (searches)."""


class ReplayError(ConsoleError):
    """A replay (fetch, next, peek, ack) could not be done as asked."""


class ReadOnlyError(ConsoleError):
    """An action that changes the server, asked of a console in read-only mode."""


class ForbiddenError(ConsoleError):
    """An action the user's roles do not allow (on that stream), or asked after their session ended."""


class EmbeddedServerError(ConsoleError):
    """The embedded nats-server could not start or stopped unexpectedly."""


class BatchError(ConsoleError):
    """A batch publish failed."""


class BatchRefusedError(BatchError):
    """Refused by the client before sending: the server would refuse it too."""


class BatchClosedError(BatchError):
    """The batch was already committed, discarded or ended by the server."""


class BatchTimeoutError(BatchError):
    """No reply from the server within the allowed time."""


class NoRespondersError(BatchError):
    """No stream listens on the subject (503 no responders)."""


class BatchEndedError(BatchError):
    """The server ended the batch early (fail mode: a gap or a failed message); `puback` counts what it stored."""

    def __init__(self, batch_id: str, puback: PubAck, cause: FlowGap | FlowError | None):
        what = {FlowGap: "a gap", FlowError: "a failed message"}.get(type(cause), "the server")
        super().__init__(f"batch {batch_id} ended by {what}: {puback.count} messages stored")
        self.puback = puback
        self.cause = cause


class BatchServerError(BatchError):
    """The server refused a batch message; carries its err_code and description verbatim."""

    def __init__(self, err_code: int, description: str, code: int = 400, stream: str | None = None):
        super().__init__(f"[{err_code}] {description}")
        self.err_code = err_code
        self.description = description
        self.code = code
        self.stream = stream


class BatchDisabledError(BatchServerError):
    """10174 / 10205: the stream does not allow this kind of batch."""


class BatchIncompleteError(BatchServerError):
    """10176: a gap, an unknown batch, an EOB at seq 1 or a timed-out batch."""


class BatchTooLargeError(BatchServerError):
    """10199: more messages than the server's max."""


class TooManyInflightError(BatchServerError):
    """10210 / 10211: too many open batches on the stream or the server."""


class BatchIdUnknownError(BatchServerError):
    """10208: the fast batch is unknown (timed out, or ended by a gap in fail mode)."""


class DuplicateMessageIdError(BatchServerError):
    """10201: a Nats-Msg-Id already stored or repeated in the batch."""


class ApiLevelError(BatchServerError):
    """10185: the server's API level is below Nats-Required-Api-Level."""


_BY_CATEGORY: dict[str, type[BatchServerError]] = {
    "disabled": BatchDisabledError,
    "incomplete": BatchIncompleteError,
    "too_large": BatchTooLargeError,
    "too_many_inflight": TooManyInflightError,
    "id_unknown": BatchIdUnknownError,
    "duplicate_message_id": DuplicateMessageIdError,
    "api_level": ApiLevelError,
}


def batch_server_error(err_code: int, description: str, code: int = 400, stream: str | None = None) -> BatchServerError:
    """The most specific BatchServerError for a server error reply."""
    known = ERROR_CODES.get(err_code)
    kind = _BY_CATEGORY.get(known.category, BatchServerError) if known and known.category else BatchServerError
    return kind(err_code, description, code, stream)
