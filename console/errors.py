"""The console's exception hierarchy. Leaf module: imports nothing from the console."""

from __future__ import annotations


class ConsoleError(Exception):
    """Base of every error the console raises on purpose."""


class ConfigError(ConsoleError):
    """Settings that cannot work (missing file, conflicting options)."""


class ReadOnlyError(ConsoleError):
    """An action that changes the server, asked of a console in read-only mode."""


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


_BY_ERR_CODE: dict[int, type[BatchServerError]] = {
    10174: BatchDisabledError,
    10205: BatchDisabledError,
    10176: BatchIncompleteError,
    10199: BatchTooLargeError,
    10210: TooManyInflightError,
    10211: TooManyInflightError,
    10208: BatchIdUnknownError,
    10201: DuplicateMessageIdError,
    10185: ApiLevelError,
}


def batch_server_error(err_code: int, description: str, code: int = 400, stream: str | None = None) -> BatchServerError:
    """The most specific BatchServerError for a server error reply."""
    return _BY_ERR_CODE.get(err_code, BatchServerError)(err_code, description, code, stream)
