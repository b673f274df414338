"""The MSG framing the taps read with (console/broker/wire_in.py), pure: no server, no nats-py."""

from hypothesis import given, strategies as st

from console.broker.wire_in import MAX_LINE, msg_frames


def msg(sid: int, payload: bytes, subject: bytes = b"a.b", reply: bytes = b"") -> bytes:
    head = b" ".join(p for p in (b"MSG", subject, str(sid).encode(), reply, str(len(payload)).encode()) if p)
    return head + b"\r\n" + payload + b"\r\n"


def test_frames_in_a_row_are_each_read_with_and_without_a_reply():
    buf = msg(1, b"one") + msg(2, b"", reply=b"_INBOX.x.1.0.$FI") + msg(3, b"three\r\nlines")
    found, pos, partial = msg_frames(buf)
    assert found == [(1, b"a.b", b"", b"one"), (2, b"a.b", b"_INBOX.x.1.0.$FI", b""), (3, b"a.b", b"", b"three\r\nlines")]
    assert (pos, partial) == (len(buf), False)


def test_a_frame_not_all_here_is_held_and_what_is_not_a_msg_stops_the_reading():
    whole = msg(1, b"one")
    for cut in (1, 3, 10, len(whole) - 1):  # within "MSG ", its line, its payload, before its last CRLF
        found, pos, partial = msg_frames(msg(9, b"x") + whole[:cut])
        assert (len(found), pos, partial) == (1, len(msg(9, b"x")), True), cut
    for other in (b"PING\r\n", b"HMSG a 1 10 12\r\n", b"+OK\r\n", b"-ERR 'x'\r\n", b"MSG a b c d e\r\n",
                  b"MSG a x 1\r\n1\r\n", b"MSG a 1 3\r\nabcXY"):
        found, pos, partial = msg_frames(msg(9, b"x") + other)
        assert (len(found), pos, partial) == (1, len(msg(9, b"x")), False), other
    assert msg_frames(b"MSG " + b"a" * MAX_LINE) == ([], 0, False)  # a line past the bound is nats-py's to refuse


@given(st.lists(st.tuples(st.integers(1, 10**6), st.binary(max_size=64)), max_size=20), st.binary(max_size=40))
def test_any_run_of_frames_then_anything_reads_every_frame_and_stops_where_they_end(frames, tail):
    buf = b"".join(msg(sid, payload) for sid, payload in frames)
    found, pos, _ = msg_frames(buf + tail)
    assert found[:len(frames)] == [(sid, b"a.b", b"", payload) for sid, payload in frames]
    assert pos >= len(buf) and pos <= len(buf + tail)
