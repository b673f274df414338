"""A connection's MSG lines read without nats-py's per-message work, for the messages its readers take.

nats-py's parser matches each control line with a regular expression on a bytearray, keeps its arguments
in a dict, deletes from the front of its buffer twice, copies the payload out and awaits a coroutine per
message: about 2.9 us a reply, a third of what the collector spent on each in a flood. This reads a MSG
line with one find and one split and hands the payload to `read_now` (a reader's, at once, in the wire's
order; False: not one of ours, then nats-py's `_process_msg` as its parser would). Everything else (HMSG,
PING, INFO, +OK, -ERR, a line that is not what the server writes) goes to nats-py's own parser from where
it stands, with the rest of that read; the next read takes up what it left at a line's start. A message not
all here yet is held until the next read, up to MAX_HELD; a longer one is nats-py's to gather (its buffer
grows in place).
"""

from __future__ import annotations

from typing import Any, Callable

from nats.protocol import parser as nats_parser

from console.broker.nats_internals import hand_to_nats, parser, parser_usable

ReadNow = Callable[[int, bytes, bytes, bytes], bool]  # (sid, subject, reply, payload) -> taken

MAX_HELD = 64 * 1024
MAX_LINE = 4096  # nats-py's bound on a control line


def msg_frames(buf: bytes) -> tuple[list[tuple[int, bytes, bytes, bytes]], int, bool]:
    """The MSG frames at the start of `buf`, each (sid, subject, reply, payload); where they stop; and whether
    what stops them is the start of a MSG not all here yet (to be held for the next read). Pure: the reader
    below hands each frame on, and what stops them to nats-py's parser."""
    found: list[tuple[int, bytes, bytes, bytes]] = []
    pos, end, partial = 0, len(buf), False
    while pos < end:
        if end - pos < 4:
            partial = b"MSG ".startswith(buf[pos:])
            break
        if not buf.startswith(b"MSG ", pos):
            break
        eol = buf.find(b"\r\n", pos, pos + MAX_LINE)
        if eol < 0:
            partial = end - pos < MAX_LINE
            break
        args = buf[pos + 4:eol].split()
        if len(args) == 3:
            subject, sid, size = args
            reply = b""
        elif len(args) == 4:
            subject, sid, reply, size = args
        else:
            break
        if not (sid.isdigit() and size.isdigit()):
            break
        start = eol + 2
        stop = start + int(size)
        if stop + 2 > end:
            partial = True
            break
        if not buf.startswith(b"\r\n", stop):
            break  # not what the server writes: nats-py's to refuse
        found.append((int(sid), subject, reply, buf[start:stop]))
        pos = stop + 2
    return found, pos, partial


def install(nc: Any, read_now: ReadNow) -> bool:
    """Reads the connection's MSG lines this way from now on; False where nats-py's parser is not what this
    expects (it then reads them all, as before)."""
    ps = parser(nc)
    if not parser_usable(nc) or getattr(ps, "_console_fast", False):
        return False
    idle = nats_parser.AWAITING_CONTROL_LINE
    original_parse, original_reset = ps.parse, ps.reset
    held = b""

    def reset() -> None:  # a reconnect: what was held belongs to the connection that is gone
        nonlocal held
        held = b""
        original_reset()

    async def parse(data: bytes = b"") -> None:
        nonlocal held
        if ps.state != idle:  # nats-py is within a message's payload: it goes on from there
            await original_parse(data)
            return
        if ps.buf:  # what nats-py began to gather starts at a line: read on from it here (a HMSG, a PING
            data = bytes(ps.buf) + data  # given to it a read ago, is not every read after it nats-py's)
            ps.buf.clear()
        buf, held = (held + data if held else bytes(data)), b""
        found, pos, partial = msg_frames(buf)
        for number, subject, reply, payload in found:
            if not read_now(number, subject, reply, payload):
                await hand_to_nats(nc, number, subject, reply, payload)
        end = len(buf)
        if pos < end:
            rest = buf[pos:]
            if partial and len(rest) <= MAX_HELD:
                held = rest
            else:
                await original_parse(rest)

    ps.parse, ps.reset, ps._console_fast = parse, reset, True
    return True
