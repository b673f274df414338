"""Maintenance holds (console.domain.holds): the parser is total over hostile bodies, a hold holds the
subjects it names for at most MAX_HOLD by the follower's clock, a release ends it, a replay or a flood
holds no one longer."""

from __future__ import annotations

import json

import pytest

from console.domain.holds import HOLD_PREFIX, MAX_HELD, MAX_HOLD, HeldStreams, Hold, HoldRefused, parse_hold

ID = "0123456789abcdef0123456789abcdef"


def body(**changes) -> bytes:
    data = {"v": 1, "id": ID, "stream": "ORDERS", "subjects": ["orders.>"], "node": "n1", "seconds": 10}
    data.update(changes)
    return json.dumps({k: v for k, v in data.items() if v is not ...}).encode()


def test_a_hold_is_read_back_as_written():
    hold = Hold(ID, "ORDERS", ("orders.>", "legacy.*.x"), "n1", 12.5)
    assert parse_hold(hold.subject, hold.to_bytes()) == hold
    assert parse_hold(hold.subject, hold.released().to_bytes()).seconds == 0


@pytest.mark.parametrize("subject, data", [
    (f"{HOLD_PREFIX}.ORDERS", b"not json"),
    (f"{HOLD_PREFIX}.ORDERS", b"[" * 100_000),  # recursion
    (f"{HOLD_PREFIX}.ORDERS", b"x" * 9000),  # too long
    (f"{HOLD_PREFIX}.ORDERS", b"[]"),
    (f"{HOLD_PREFIX}.ORDERS", body(v=2)),
    (f"{HOLD_PREFIX}.ORDERS", body(v=True)),
    (f"{HOLD_PREFIX}.OTHER", body()),  # its subject names another stream
    (f"{HOLD_PREFIX}.ORD\x00ERS", body(stream="ORD\x00ERS")),
    (f"{HOLD_PREFIX}.a.b", body(stream="a.b")),
    (f"{HOLD_PREFIX}.ORDERS", body(id="../../etc")),
    (f"{HOLD_PREFIX}.ORDERS", body(id=...)),
    (f"{HOLD_PREFIX}.ORDERS", body(subjects="orders.>")),
    (f"{HOLD_PREFIX}.ORDERS", body(subjects=[])),
    (f"{HOLD_PREFIX}.ORDERS", body(subjects=["a"] * 65)),
    (f"{HOLD_PREFIX}.ORDERS", body(subjects=["orders..x"])),
    (f"{HOLD_PREFIX}.ORDERS", body(subjects=["orders.>x"])),
    (f"{HOLD_PREFIX}.ORDERS", body(subjects=["orders\r\nPUB x 1"])),
    (f"{HOLD_PREFIX}.ORDERS", body(subjects=[1])),
    (f"{HOLD_PREFIX}.ORDERS", body(seconds=-1)),
    (f"{HOLD_PREFIX}.ORDERS", body(seconds=10 ** 400)),
    (f"{HOLD_PREFIX}.ORDERS", body(seconds=True)),
    (f"{HOLD_PREFIX}.ORDERS", body(seconds="10")),
    (f"{HOLD_PREFIX}.ORDERS", b'{"v": 1, "id": "%s", "stream": "ORDERS", "subjects": ["o.>"], "node": "n1", '
                              b'"seconds": NaN}' % ID.encode()),
    (f"{HOLD_PREFIX}.ORDERS", body(node="x" * 300)),
    (f"{HOLD_PREFIX}.ORDERS", body(node="n1\x1b[2J")),
])
def test_anything_else_is_one_typed_refusal(subject, data):
    with pytest.raises(HoldRefused):
        parse_hold(subject, data)


def test_a_hold_holds_its_subjects_until_released_or_at_most_max_hold():
    held = HeldStreams()
    hold = Hold(ID, "ORDERS", ("orders.>",), "n1", 10_000.0)  # asks for hours: held MAX_HOLD at most
    assert held.apply(hold, now=100.0)
    assert held.held_until("orders.eu.x", 100.0) == 100.0 + MAX_HOLD
    assert held.held_until("orders", 100.0) is None and held.held_until("payments.x", 100.0) is None
    assert held.held_until("orders.x", 100.0 + MAX_HOLD) is None  # ended by the follower's clock
    again = Hold(ID.replace("0", "1"), "ORDERS", ("orders.>",), "n1", 5.0)
    held.apply(again, 200.0)
    assert held.apply(again.released(), 201.0) and held.held_until("orders.x", 201.0) is None


def test_a_replayed_hold_holds_no_one_again_and_a_flood_is_bounded():
    held = HeldStreams()
    hold = Hold(ID, "ORDERS", ("orders.>",), "n1", 5.0)
    held.apply(hold, 0.0)
    held.apply(hold, 4.0)  # the same id again: not lengthened
    assert held.held_until("orders.x", 5.0) is None
    assert not held.apply(hold, 6.0) and held.held_until("orders.x", 6.0) is None  # a replay after its end
    released = Hold(ID.replace("a", "b"), "ORDERS", ("orders.>",), "n1", 5.0)
    held.apply(released, 10.0)
    held.apply(released.released(), 10.5)
    assert not held.apply(released, 11.0)  # a replay after its release
    for i in range(MAX_HELD + 50):
        held.apply(Hold(f"{i:032x}", "S", ("s.>",), "n1", 5.0), 20.0)
    assert held.refused == 2 + 50
