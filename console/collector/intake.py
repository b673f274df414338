"""Where the collector's readers put what they read: events go to the writer (what advisories say
also teaches the trackers; a lost batch's kept messages follow its loss), bad input is counted by
reason, quarantined and skipped."""

from __future__ import annotations

from console.broker.capture import Inbound
from console.broker.quarantine import Quarantine
from console.collector.kept import KeptMessages
from console.collector.state import BatchState
from console.collector.writer import EventWriter
from console.domain.events import ACCOUNT_ADVISORY, SYSTEM_ADVISORY, BatchEvent
from console.domain.wire import Tally


class Intake:
    def __init__(self, writer: EventWriter, state: BatchState, quarantine: Quarantine, rejected: Tally,
                 kept: KeptMessages | None = None):
        self.writer, self.state, self.quarantine = writer, state, quarantine
        self.kept = kept or KeptMessages()  # lost batches' first and last messages (publish side tapped)
        self.rejected = rejected  # bad input, by reason: counted, quarantined, skipped (the writer's too)
        self.ignored = Tally()  # input that is well formed and of no use here, by kind

    def put(self, events: list[BatchEvent], source: str) -> None:
        if source in (SYSTEM_ADVISORY, ACCOUNT_ADVISORY):
            self.state.learn(events)
        self.writer.put(self.kept.with_messages(events), source)

    def reject(self, source: str, reason: str, msg: Inbound) -> None:
        self.rejected.add(f"{source}: {reason}")
        self.quarantine.offer_nowait(source, reason, msg.subject, msg.data)
