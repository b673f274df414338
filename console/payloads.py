"""The one payload pipeline: a stored message turned into what one reader may see of it. Its steps, in
this order and nowhere else: the reader's level of the message's stream (full, masked or none, from the
roles), the stream's decoder where a field rule needs the message read, the masking rules, then the
decoder again for display. Every face that shows or gives out a payload (Replay, a search and its
exports, an Incident's kept messages, the collector keeping them, notebooks) holds one `Payloads`;
a page that shows payloads cannot be made without one."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from console.domain.masking import Headers, Masking, Shown
from console.domain.roles import MASKED, NONE

if TYPE_CHECKING:
    from console.decoders.rules import Decoded, Decoders
    from console.domain.incident import Incident
    from console.domain.kept_messages import ShownMessage


def masked_role(stream: str) -> str:
    """The level the collector keeps a lost batch's messages at: masked, whoever reads them later."""
    return MASKED


@dataclass(frozen=True)
class Payloads:
    masking: Masking
    decoders: Decoders | None
    level: Callable[[str], str] = masked_role  # the reader's level of a stream's payloads (Grants.payloads)

    def shown(self, stream: str) -> Shown | None:
        """What may be shown of one stream's messages, bound once for the stream (a search applies it to
        every message it reads): None when that is the message as stored."""
        from console.decoders.rules import pick

        return self.masking.shown(stream, self.level(stream), pick(self.decoders))

    def masked(self, stream: str, headers: Headers, data: bytes, subject: str = "") -> tuple[Headers, bytes]:
        """One message as this reader may see it."""
        shown = self.shown(stream)
        return (headers, data) if shown is None else shown(headers, data, subject)

    def hidden(self, stream: str) -> bool:
        """This reader sees nothing of the stream's payloads (their size only)."""
        return self.level(stream) == NONE or not self.masking.payloads

    def decoded(self, stream: str, subject: str, headers: Headers, data: bytes) -> Decoded | None:
        """A message already shown (masked) as its stream's decoder reads it for display: None where the
        stream has no decoder or the reader sees no payload of it."""
        from console.decoders.rules import decode_message

        if self.hidden(stream):
            return None
        return decode_message(self.decoders, stream, subject, dict(headers), data)

    def kept(self, incident: Incident) -> list[ShownMessage]:
        """A lost batch's kept first and last messages (masked by the rules when kept) as this reader may
        see them: their size alone for a reader without payloads; decoded as Replay decodes."""
        from console.domain.kept_messages import ShownMessage
        from console.domain.messages import PREVIEW_BYTES, preview

        stream, shown = incident.loss.stream or "", []
        for m in incident.messages:
            headers, data = (self.masked(stream, m.headers, m.data, m.subject) if self.hidden(stream)
                             else (m.headers, m.data))
            cut = " (the rest not kept)" if m.cut else ""
            decoded = self.decoded(stream, m.subject, headers, data)
            if decoded is not None and decoded.error is None:
                text = json.dumps(decoded.value, indent=2, ensure_ascii=False, default=plain)[:PREVIEW_BYTES]
                shown.append(ShownMessage(m.place, m.seq, m.subject, headers, text,
                                          f"{decoded.decoder}, {m.size} bytes{cut}"))
                continue
            p = preview(data)
            shown.append(ShownMessage(m.place, m.seq, m.subject, headers, html.unescape(p.text),
                                      f"{p.kind}, {m.size} bytes{cut}",
                                      None if decoded is None else f"not decoded as {decoded.decoder}: {decoded.error}"))
        return shown


def plain(value: Any) -> Any:
    """A decoded value JSON has no form for: bytes as their base64, anything else as its text."""
    import base64

    return {"base64": base64.b64encode(value).decode()} if isinstance(value, bytes) else str(value)
