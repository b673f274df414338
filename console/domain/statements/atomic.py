"""The statements for atomic batch publishers (ADR-50, "Atomic Batched Publishes"), and the back-off
every batch publisher owes the server."""

from __future__ import annotations

from typing import Mapping

from console.domain.atomic_tracker import BATCH_COMMIT, BATCH_SEQUENCE, REQUIRED_API_LEVEL
from console.domain.statements.base import (
    ATOMIC, ATOMIC_SECTION, BACKOFF_RATE, BACKOFF_SECONDS, BOTH, FAST_SECTION, PUBLISH_SIDE, REPLIES, Graded, Limits,
    Statement,
)

DESIGN = f"{ATOMIC_SECTION} / Client Design"


class A01(Statement):
    id, kind, title, section = "A01", ATOMIC, "an atomic batch starts with a request", DESIGN
    adr = ("A batch will be started by adding the `Nats-Batch-Id:uuid` and `Nats-Batch-Sequence:1` headers using a "
           "*request*")
    passes, fails = "message 1 has a reply subject", "message 1 sent without a reply subject"
    evidence = (PUBLISH_SIDE,)

    def on_atomic_sent(self, batch: Graded, seq: int | None, seq_text: str, reply: str | None,
                       headers: Mapping[str, str], limits: Limits) -> None:
        if seq != 1:
            return
        if reply:
            batch.passes(self.id)
        else:
            batch.fails(self.id, "message 1 sent without a reply subject")


class A02(Statement):
    id, kind, title, section = "A02", ATOMIC, "atomic sequences are contiguous from 1", DESIGN
    adr = ("Following messages in the same batch will include the `Nats-Batch-Id:uuid` header and increment "
           "`Nats-Batch-Sequence:n` by one")
    passes = "1, 2, 3, ... to the commit"
    fails = "a sequence skipped, repeated, not a number, or a batch whose first message is not 1"
    evidence = (PUBLISH_SIDE,)

    def on_atomic_sent(self, batch: Graded, seq: int | None, seq_text: str, reply: str | None,
                       headers: Mapping[str, str], limits: Limits) -> None:
        if seq is None:
            batch.fails(self.id, f"{BATCH_SEQUENCE} {seq_text[:20]!r} is not a number")
        elif seq == 1 or not batch.sent:
            return
        elif seq != batch.sent + 1:
            batch.fails(self.id, f"message {seq} after {batch.sent}")
        else:
            batch.passes(self.id)


class A03(Statement):
    id, kind, title, section = "A03", ATOMIC, "a commit value is 1 or eob", DESIGN
    adr = ("If the final message has the headers `Nats-Batch-Id:uuid`, `Nats-Batch-Sequence:n` and "
           "`Nats-Batch-Commit:1` [...] Otherwise, the final message will have headers [...] `Nats-Batch-Commit:eob`")
    passes, fails = "`Nats-Batch-Commit` is `1` or `eob`", "any other commit value"
    evidence = (PUBLISH_SIDE,)

    def on_atomic_commit(self, batch: Graded, commit: str, seq: int, headers: Mapping[str, str]) -> None:
        batch.grade(self.id, f"{BATCH_COMMIT}: {commit[:20]!r}" if commit not in ("1", "eob") else None)


class A04(Statement):
    id, kind, title, section = "A04", ATOMIC, "EOB is never message 1", DESIGN
    adr = ("the final message will have headers `Nats-Batch-Id:uuid`, `Nats-Batch-Sequence:n` and "
           "`Nats-Batch-Commit:eob` and the server will commit the batch without storing the message")
    passes = "an eob commit ends a batch of one or more messages"
    fails = "an eob commit at sequence 1: a batch with nothing in it (2.14+: 10176 and an advisory)"
    evidence = (PUBLISH_SIDE,)

    def on_atomic_commit(self, batch: Graded, commit: str, seq: int, headers: Mapping[str, str]) -> None:
        if commit != "eob":
            return
        batch.grade(self.id, "an eob commit as message 1" if seq == 1 else None)


class A05(Statement):
    id, kind, title, section = "A05", ATOMIC, "an atomic batch id has at most 64 characters", DESIGN
    adr = "Maximum length of the ID is 64 characters."
    passes, fails = "ids of 1 to 64 characters", "an id of 65 or more (10179)"
    evidence = (PUBLISH_SIDE,)

    def on_atomic_first(self, batch: Graded, batch_id: str, seq: int | None) -> None:
        batch.grade(self.id, f"an id of {len(batch_id)} characters" if len(batch_id) > 64 else None)


class A06(Statement):
    id, kind, title = "A06", ATOMIC, "an atomic batch stays within the server's maximum size"
    section = f"{ATOMIC_SECTION} / Server Behavior Design"
    adr = "Each batch can have maximum 1000 messages"
    passes, fails = "every sequence within the server's max batch size", "a sequence past it (10199)"
    evidence = (PUBLISH_SIDE,)

    def on_atomic_sent(self, batch: Graded, seq: int | None, seq_text: str, reply: str | None,
                       headers: Mapping[str, str], limits: Limits) -> None:
        if limits.max_batch_size is None or seq is None:
            return  # the server's maximum not known: not graded
        if seq > limits.max_batch_size:
            batch.fails(self.id, f"message {seq}, the server's maximum is {limits.max_batch_size}")
        elif BATCH_COMMIT in headers:
            batch.passes(self.id)


class A07(Statement):
    id, kind, title = "A07", ATOMIC, "an eob commit requires the API level that has it"
    section = f"{DESIGN} (revision 5)"
    adr = ("When `Nats-Batch-Commit:eob` is used to commit the final message if the `Nats-Required-Api-Level` is set "
           "it should be evaluated. Using the `eob` option should require level `3`.")
    passes = "an eob commit carries `Nats-Required-Api-Level` of 3 or more"
    fails = "an eob commit without it: an older server stores the batch without its marker or refuses it unexplained"
    evidence = (PUBLISH_SIDE,)

    def on_atomic_commit(self, batch: Graded, commit: str, seq: int, headers: Mapping[str, str]) -> None:
        if commit != "eob":
            return
        level = headers.get(REQUIRED_API_LEVEL, "")
        if level.isascii() and level.isdigit() and len(level) < 6 and int(level) >= 3:
            batch.passes(self.id)
        else:
            batch.fails(self.id, f"an eob commit with {REQUIRED_API_LEVEL} {level[:10]!r}" if level
                        else f"an eob commit without {REQUIRED_API_LEVEL}")


class A08(Statement):
    id, kind, title, section = "A08", ATOMIC, "an atomic batch id is not reused while its batch is open", DESIGN
    adr = "A batch will be started by adding the `Nats-Batch-Id:uuid` and `Nats-Batch-Sequence:1` headers"
    passes, fails = "each message 1 names an id not open", "a message 1 naming the id of a batch still open"
    evidence = (PUBLISH_SIDE,)

    def on_atomic_first(self, batch: Graded, batch_id: str, seq: int | None) -> None:
        if seq == 1:
            batch.passes(self.id)

    def on_atomic_again(self, batch: Graded, seq: int | None) -> None:
        if seq == 1 and batch.ended is None:
            batch.fails(self.id, "a message 1 naming this id while its batch was open")


class B01(Statement):
    id, kind = "B01", BOTH
    title = "backs off when refused for too many batches in flight (10210, 10211)"
    section = f"{FAST_SECTION} / Context"
    adr = "We will therefor create a flow-control mechanism where the server can tell the clients to go slower."
    passes = "after a 429 the client's next starts slow down"
    fails = (f"refused 429 more than {BACKOFF_RATE} times a second for {BACKOFF_SECONDS} seconds in a row: retrying "
             "without back-off")
    evidence = (REPLIES,)

    def on_busy(self, batch: Graded, this_second: int, seconds_in_a_row: int) -> None:
        if this_second > BACKOFF_RATE and seconds_in_a_row + 1 >= BACKOFF_SECONDS:
            batch.fails(self.id, f"refused 429 more than {BACKOFF_RATE} times a second for {seconds_in_a_row + 1} "
                                 "seconds")
        else:
            batch.passes(self.id)
