"""The statements for fast-ingest batch publishers (ADR-50, "Fast-ingest Batch Publishing")."""

from __future__ import annotations

from datetime import datetime

from console.domain.statements.base import (
    FAST, FAST_SECTION, INVALID_ID, PUBLISH_SIDE, REPLIES, SLACK_WINDOWS, WINDOWS, Graded, Limits, Statement,
)

DESIGN = f"{FAST_SECTION} / Client Design"


def _silent(batch: Graded, limits: Limits, since: datetime | None, now: datetime) -> float | None:
    """Seconds of silence past the batch timeout, or None."""
    if since is None or now - since <= limits.batch_timeout:
        return None
    return (now - since).total_seconds()


class F01(Statement):
    id, kind, title, section = "F01", FAST, "a fast batch starts with op 0 at sequence 1", DESIGN
    adr = "A batch will be started by setting a reply subject of `<prefix>.uuid.10.ok.1.0.$FI`"
    passes = "the batch's first message is op 0, sequence 1"
    fails = "a start (op 0) at another sequence, or a batch whose first message seen is not a start"
    evidence = (REPLIES, PUBLISH_SIDE)

    def on_fast_start(self, batch: Graded, seq: int, times: int) -> None:
        batch.grade(self.id, f"a start (op 0) at sequence {seq}" if seq != 1 else None)

    def on_fast_sent(self, batch: Graded, seq: int, op: str, now: datetime, limits: Limits) -> None:
        if seq == 1 and op == "1":
            batch.fails(self.id, "message 1 is an append (op 1), not a start")


class F02(Statement):
    id, kind, title, section = "F02", FAST, "waits for the first reply before going on", DESIGN
    adr = ("The client MUST wait for the first reply to detect if the feature is available on the server or Stream, "
           "and what flow control settings the server allows the client to start at.")
    passes, fails = "message 2 comes after the server answered the start", "message 2 or later sent before the start's answer"
    evidence = (PUBLISH_SIDE,)

    def on_fast_sent(self, batch: Graded, seq: int, op: str, now: datetime, limits: Limits) -> None:
        if op in ("0", "4") or seq < 2 or not batch.starts.get("publish"):
            return
        batch.grade(self.id, f"message {seq} sent before the start was answered" if not batch.answered else None)


class F03(Statement):
    id, kind, title, section = "F03", FAST, "sequences are contiguous", DESIGN
    adr = ("Following messages in the same batch must use a reply subject `<prefix>.uuid.10.ok.n.1.$FI` where `n` is "
           "the sequence incremented by one.")
    passes, fails = "each message's sequence is the previous one plus one", "a sequence skipped, repeated or going back"
    evidence = (PUBLISH_SIDE,)

    def on_fast_sent(self, batch: Graded, seq: int, op: str, now: datetime, limits: Limits) -> None:
        if op in ("0", "4") or seq < 2 or not batch.sent:
            return
        batch.grade(self.id, f"message {seq} after {batch.sent}" if seq != batch.sent + 1 else None)


class F04(Statement):
    id, kind, title, section = "F04", FAST, "flow, gap mode and inbox stay those of the start", DESIGN
    adr = ("We add the initial flow and gap information for replica followers who might have missed the first message "
           "due to limits")
    passes = "every reply subject of the batch carries the start's prefix, flow and gap mode"
    fails = "a message of the batch with another prefix, flow or gap mode"
    evidence = (REPLIES, PUBLISH_SIDE)

    def on_fast_subject(self, batch: Graded, tokens: tuple[str, str, str]) -> None:
        if batch.tokens is not None and batch.tokens != tokens:
            prefix, flow, gap = tokens
            batch.fails(self.id, f"started as {'.'.join(batch.tokens)[-80:]}, then {prefix[-40:]}.{flow}.{gap}")
        else:
            batch.passes(self.id)


def _outstanding(batch: Graded, seq: int, op: str) -> tuple[int, int] | None:
    """(messages beyond the last ack, the flow granted) for an append of a running, answered batch."""
    if op in ("0", "4") or seq < 2 or not (batch.answered and batch.requested and batch.ended is None):
        return None
    return seq - batch.acked, batch.granted or batch.requested


class F05(Statement):
    id, kind, title, section = "F05", FAST, "keeps within its outstanding-ack window", f"{FAST_SECTION} / Flow Control"
    adr = ("Clients will not wait for each ack like they would in a standard JS Publish instead they will maintain a "
           "count of maximum outstanding acknowledgements from the server, this is part flow-control and part outage "
           "detection.")
    passes = f"messages sent beyond the last ack stay within {WINDOWS} windows of the flow it asked for"
    fails = f"more than {WINDOWS}(+{SLACK_WINDOWS}) windows of its own requested flow outstanding"
    evidence = (PUBLISH_SIDE,)

    def on_fast_sent(self, batch: Graded, seq: int, op: str, now: datetime, limits: Limits) -> None:
        if (window := _outstanding(batch, seq, op)) is None:
            return
        outstanding, granted = window
        if outstanding > (WINDOWS + SLACK_WINDOWS) * batch.requested:
            batch.fails(self.id, f"{outstanding} messages beyond the last ack ({batch.acked}), "
                                 f"asking for a flow of {batch.requested}")
        elif outstanding <= (WINDOWS + SLACK_WINDOWS) * granted:
            batch.passes(self.id)


class F06(Statement):
    id, kind, title, section = "F06", FAST, "follows the flow the server grants", DESIGN
    adr = ("Clients will monitor the `BatchFlowAck` acks and should an ack have different flow settings different from "
           "the active one they will adjust accordingly.")
    passes = f"within {WINDOWS} windows of the flow last granted"
    fails = "within its requested flow's windows, but beyond those of a lower flow the server granted"
    evidence = (PUBLISH_SIDE,)

    def on_fast_sent(self, batch: Graded, seq: int, op: str, now: datetime, limits: Limits) -> None:
        if (window := _outstanding(batch, seq, op)) is None:
            return
        outstanding, granted = window
        if outstanding > (WINDOWS + SLACK_WINDOWS) * batch.requested:
            return  # F05's failure
        if outstanding > (WINDOWS + SLACK_WINDOWS) * granted:
            batch.fails(self.id, f"{outstanding} messages beyond the last ack ({batch.acked}) at a "
                                 f"granted flow of {granted} (asked {batch.requested})")
        else:
            batch.passes(self.id)


class F07(Statement):
    id, kind, title, section = "F07", FAST, "a ping carries the highest sequence sent", DESIGN
    adr = ("The sequence in the ping message must not itself increment the batch sequence; instead, it should be the "
           "highest batch sequence the client has sent.")
    passes = "a ping (op 4) at the highest sequence sent"
    fails = "a ping above the highest sequence sent, or below one the server already acknowledged"
    evidence = (REPLIES, PUBLISH_SIDE)

    def on_ping_acked(self, batch: Graded, seq: int) -> None:
        batch.grade(self.id, f"a ping at {seq}, below {batch.acked} the server had acknowledged"
                    if seq < batch.acked else None)

    def on_fast_sent(self, batch: Graded, seq: int, op: str, now: datetime, limits: Limits) -> None:
        if op != "4":
            return
        batch.grade(self.id, f"a ping at {seq} when the highest sequence sent was {batch.sent}"
                    if seq != batch.sent else None)


class F08(Statement):
    id, kind, title, section = "F08", FAST, "keeps a stalled batch alive", DESIGN
    adr = "The client may send a ping message to keep the batch alive and receive (missed) flow control messages."
    passes = "no silence past the batch timeout between a batch's messages"
    fails = ("a silence past the batch timeout (no message, no ping), then more of the batch: refused 10208 without "
             "a leader change")
    evidence = (REPLIES, PUBLISH_SIDE)

    def on_unknown_batch(self, batch: Graded, seq: int, now: datetime, limits: Limits) -> None:
        if batch.ended is not None or not batch.starts:
            return
        quiet = [t for t in (batch.last_sent, batch.last_reply) if t is not None and t < now]
        if quiet and (silent := _silent(batch, limits, max(quiet), now)) is not None:
            batch.fails(self.id, f"silent {silent:.1f}s (batch timeout {limits.batch_timeout.total_seconds():g}s) "
                                 "without a ping, then refused 10208")

    def on_fast_sent(self, batch: Graded, seq: int, op: str, now: datetime, limits: Limits) -> None:
        if batch.ended is None and (silent := _silent(batch, limits, batch.last_sent, now)) is not None:
            batch.fails(self.id, f"silent {silent:.1f}s (batch timeout {limits.batch_timeout.total_seconds():g}s) "
                                 "without a ping, then went on")


class _StopsAtItsEnd(Statement):
    """After the batch ended this way, only messages already in flight may be refused or sent."""

    ending: str  # how the batch ended: "refused" (F09) or "fail_end" (F10)

    def _after_end(self, batch: Graded, seq: int) -> None:
        if batch.ended == self.ending and seq > batch.end_seq + batch.in_flight:
            batch.fails(self.id, f"message {seq} sent after the batch ended at {batch.end_seq} "
                                 f"(in flight: {batch.in_flight})")

    def on_unknown_batch(self, batch: Graded, seq: int, now: datetime, limits: Limits) -> None:
        self._after_end(batch, seq)

    def on_fast_sent(self, batch: Graded, seq: int, op: str, now: datetime, limits: Limits) -> None:
        if op != "4":  # what the refusals said, seen sent
            self._after_end(batch, seq)


class F09(_StopsAtItsEnd):
    id, kind, title = "F09", FAST, "stops a batch the server no longer knows (10208)"
    section = f"{FAST_SECTION} / Control Channel"
    adr = ("Clients should use old style inboxes not the mux inbox so that as soon as the server sends an error back "
           "the clients would drop interest.")
    passes, fails = "after a 10208, only messages already in flight are refused", "refusals for messages sent well after the first 10208"
    evidence = (REPLIES,)
    ending = "refused"

    def on_unknown_batch(self, batch: Graded, seq: int, now: datetime, limits: Limits) -> None:
        super().on_unknown_batch(batch, seq, now, limits)
        if batch.ended is None:  # this refusal ends it
            batch.passes(self.id)


class F10(_StopsAtItsEnd):
    id, kind, title, section = "F10", FAST, "stops at a fail-mode gap", f"{FAST_SECTION} / Message Gaps"
    adr = ("The client will receive the gap message first, and should use this to stop sending messages before "
           "eventually receiving the final ack.")
    passes, fails = "after the fail-mode end, only messages in flight are refused", "messages sent well after the batch ended at its gap"
    evidence = (REPLIES,)
    ending = "fail_end"

    def on_ended(self, batch: Graded, how: str) -> None:
        if how == "fail_end":
            batch.passes(self.id)


class F11(Statement):
    id, kind, title, section = "F11", FAST, "a batch id has at most 64 characters", DESIGN
    adr = "Maximum length of the ID is 64 characters."
    passes, fails = "ids of 1 to 64 characters", "an id of 65 or more (10207)"
    evidence = (REPLIES, PUBLISH_SIDE)

    def on_fast_id(self, batch: Graded, batch_id: str) -> None:
        if len(batch_id) > 64:  # on each side that sees it: the publish side confirms what a reply says
            batch.fails(self.id, f"an id of {len(batch_id)} characters")
        else:
            batch.passes(self.id)

    def on_server_error(self, batch: Graded, batch_id: str, code: int) -> None:
        if code == INVALID_ID:
            batch.fails(self.id, f"an id of {len(batch_id)} characters, refused 10207")


class F12(Statement):
    id, kind, title, section = "F12", FAST, "a batch id is not reused while its batch is open", DESIGN
    adr = "A batch will be started by setting a reply subject of `<prefix>.uuid.10.ok.1.0.$FI`"
    passes, fails = "each start names an id not open", "a start naming the id of a batch still open"
    evidence = (REPLIES, PUBLISH_SIDE)

    def on_fast_start(self, batch: Graded, seq: int, times: int) -> None:
        if times > 1 and batch.ended is None:
            batch.fails(self.id, "a start naming this id while its batch was open")
        elif times == 1:
            batch.passes(self.id)
