"""Maintenance holds: the console asks the publishers that follow them to begin no batch on a stream's
subjects while the stream's leader moves (README, "Maintenance holds: a protocol for publishers").

A hold is a core NATS message on `batch_console.hold.<stream>`, JSON:
  {"v": 1, "id": "<32 hex>", "stream": "<stream>", "subjects": ["orders.>"], "node": "<server name>",
   "seconds": 12.5}
and its release is the same with "seconds": 0. A follower begins no batch on a matching subject from the
hold's arrival until its release or `seconds` (at most MAX_HOLD) by its own clock, whichever comes first;
a batch it has open goes on to its commit. Any client of the account may publish on the subject: a hold
can only delay new batches, never lose one, and never for longer than MAX_HOLD; a malformed hold is
counted and ignored. Pure: the broker side (console.broker.holds) feeds it messages and its clock."""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from console.domain.subjects import subject_matches
from console.domain.wire import MalformedInput, bounded_text, has_control, load_object

HOLD_PREFIX = "batch_console.hold"
MAX_HOLD = 30.0  # seconds a hold holds at most, whatever it asks
MAX_BODY = 8192
MAX_SUBJECTS = 64
MAX_HELD = 1000  # holds a follower keeps at once (past it, a new hold is refused: a flood is bounded)
MAX_ENDED = 10_000  # ids of ended holds remembered, so that a hold published again holds no one again
_ID = re.compile(r"^[0-9a-f]{32}$")
_STREAM = re.compile(r"^[^\s.*>]{1,255}$")


class HoldRefused(MalformedInput):
    what = "maintenance hold"


@dataclass(frozen=True)
class Hold:
    id: str
    stream: str
    subjects: tuple[str, ...]
    node: str
    seconds: float  # 0: the release of the hold with this id

    @property
    def subject(self) -> str:
        return f"{HOLD_PREFIX}.{self.stream}"

    def to_bytes(self) -> bytes:
        return json.dumps({"v": 1, "id": self.id, "stream": self.stream, "subjects": list(self.subjects),
                           "node": self.node, "seconds": self.seconds}).encode()

    def released(self) -> Hold:
        return Hold(self.id, self.stream, self.subjects, self.node, 0.0)


def _subject(value: object) -> str:
    text = bounded_text(value, "subjects", 255, HoldRefused)
    if any(not token or " " in token for token in text.split(".")) or \
            any(">" in t and t != ">" or "*" in t and t != "*" for t in text.split(".")):
        raise HoldRefused("a subject of 'subjects' is not a NATS subject filter")
    return text


def parse_hold(subject: str, body: bytes) -> Hold:
    """The hold a message carries; HoldRefused for anything else (its subject must name its stream)."""
    data: dict[str, Any] = load_object(body, HoldRefused, MAX_BODY)
    if type(data.get("v")) is not int or data["v"] != 1:
        raise HoldRefused("not version 1 of the hold protocol")
    stream = data.get("stream")
    if not isinstance(stream, str) or not _STREAM.match(stream) or has_control(stream):
        raise HoldRefused("'stream' is not a stream name")
    if subject != f"{HOLD_PREFIX}.{stream}":
        raise HoldRefused("a hold's subject names another stream than its body")
    hold_id = data.get("id")
    if not isinstance(hold_id, str) or not _ID.match(hold_id):
        raise HoldRefused("'id' is not 32 hex digits")
    subjects = data.get("subjects")
    if not isinstance(subjects, list) or not 1 <= len(subjects) <= MAX_SUBJECTS:
        raise HoldRefused(f"'subjects' is not a list of 1..{MAX_SUBJECTS} subject filters")
    seconds = data.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 86_400:
        raise HoldRefused("'seconds' is not a number of seconds (0: a release)")
    return Hold(hold_id, stream, tuple(_subject(s) for s in subjects), bounded_text(data.get("node"), "node", 255,
                                                                                     HoldRefused), float(seconds))


class HeldStreams:
    """What a follower holds now: each hold until its release or its end, by the follower's own clock."""

    def __init__(self, most: int = MAX_HELD):
        self._until: dict[str, tuple[float, Hold]] = {}  # hold id -> (its end, the hold)
        self._ended: OrderedDict[str, None] = OrderedDict()
        self.most = most
        self.refused = 0  # holds refused: malformed, or past `most` at once

    def apply(self, hold: Hold, now: float) -> bool:
        """Take a hold or its release (False: refused, counted). A hold's id given again does not lengthen it."""
        self._expire(now)
        if hold.seconds == 0:
            if self._until.pop(hold.id, None) is not None:
                self._end(hold.id)
            return True
        if hold.id in self._until:
            return True
        if hold.id in self._ended or len(self._until) >= self.most:  # a replay, or a flood
            self.refused += 1
            return False
        self._until[hold.id] = (now + min(hold.seconds, MAX_HOLD), hold)
        return True

    def held_until(self, subject: str, now: float) -> float | None:
        """When the last hold covering `subject` ends (None: not held)."""
        self._expire(now)
        ends = [end for end, hold in self._until.values() if any(subject_matches(p, subject) for p in hold.subjects)]
        return max(ends, default=None)

    def _expire(self, now: float) -> None:
        for hold_id in [i for i, (end, _) in self._until.items() if end <= now]:
            del self._until[hold_id]
            self._end(hold_id)

    def _end(self, hold_id: str) -> None:
        self._ended[hold_id] = None
        if len(self._ended) > MAX_ENDED:
            self._ended.popitem(last=False)
