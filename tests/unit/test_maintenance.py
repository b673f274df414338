"""The maintenance plan's rules and the open-batch tracker, pure: what a node's groups, quorum and open
batches make of its verdict, and hostile input (names, reply subjects, a flood of batch ids)."""

from datetime import datetime, timedelta, timezone

import pytest

from console.domain.maintenance import (COMMIT_ANSWER_WAIT, MAX_OPEN, REFUSED, SAFE, WAIT, Group, NotANode, OpenBatches, node_name,
                                        plan, plan_text)

T0 = datetime(2026, 12, 1, 12, tzinfo=timezone.utc)
UP = lambda name: (name, True, False)  # noqa: E731 - a current, online follower


def r3(stream: str, leader: str, *followers) -> Group:
    return Group(stream, None, leader, tuple(followers))


def test_a_node_that_leads_is_safe_to_drain_and_one_that_would_cost_a_quorum_is_refused():
    groups = [r3("A", "n1", UP("n2"), UP("n3")), r3("B", "n2", UP("n1"), UP("n3")),
              Group("A", "ops", "n1", (UP("n2"), UP("n3")))]
    p = plan("n1", groups, "n2", [], 10.0)
    assert p.verdict == SAFE and [g.name for g in p.leads] == ["A", "A > ops"] and p.member_of == 3
    behind = [r3("C", "n1", UP("n2"), ("n3", False, False))]  # n3 behind: without n1, 1 of 3 current
    refused = plan("n1", behind, None, [], 10.0)
    assert refused.verdict == REFUSED and "C (R3) would lose its quorum: 1 of 3" in refused.refusals[0]
    assert "meta leader is not known" in plan_text(refused)
    down = plan("n3", behind, None, [], 10.0)  # the node itself behind: refused as such
    assert down.verdict == REFUSED and "n3 is down or behind already" in down.refusals[0]
    meta = plan("n1", groups, "n1", [], 10.0, meta_peers=(UP("n2"), ("n3", False, True)))
    assert meta.verdict == REFUSED and "the meta group would lose its quorum" in meta.refusals[-1]


def test_a_name_that_is_not_a_server_is_refused_and_a_single_server_is_known_by_its_connection():
    assert "n9 is not a server of this cluster" in plan("n9", [r3("A", "n1", UP("n2"), UP("n3"))], None, [], 1).refusals[0]
    single = plan("solo", [Group("A", None, None, ())], None, [], 1, connected="solo")
    assert single.verdict == SAFE and single.nodes == ("solo",) and single.leads == ()
    assert single.notes == ("solo is a single server, not a cluster: no leadership can move, so a drain has nothing "
                            "to do; taking it out stops every stream on it, and the batches open then are lost",)
    for hostile in ("", "a b", "n1\n", "\x1b[2J", "x" * 129, 5, None, ["n1"]):
        with pytest.raises(NotANode):
            node_name(hostile)
    assert node_name("nats-0.nats.svc") == "nats-0.nats.svc"


def test_open_batches_follow_atomic_and_fast_batches_to_their_commit_and_forget_the_abandoned():
    seen = OpenBatches(timedelta(seconds=10))
    seen.see("A", None, {"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "1"}, T0)
    seen.see("A", None, {"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "2"}, T0 + timedelta(seconds=1))
    seen.see("A", "_INBOX.x.f1.10.fail.1.0.$FI", None, T0)
    seen.see("A", "_INBOX.x.f1.10.fail.5.4.$FI", None, T0)  # a ping: neither opens nor ends
    seen.see("B", None, {}, T0)  # a plain message: no batch
    assert {(b.kind, b.batch_id, b.messages) for b in seen.on("A", T0 + timedelta(seconds=2))} == \
        {("atomic", "b1", 2), ("fast", "f1", 1)}
    seen.see("A", None, {"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "3", "Nats-Batch-Commit": "1"}, T0)
    seen.see("A", "_INBOX.x.f1.10.fail.6.3.$FI", None, T0)  # end of batch
    assert seen.on("A", T0 + timedelta(seconds=2)) == []
    seen.see("C", None, {"Nats-Batch-Id": "quiet"}, T0)
    assert seen.on("C", T0 + timedelta(seconds=11)) == []  # silent past the timeout: the server abandoned it
    p = plan("n1", [r3("A", "n1", UP("n2"), UP("n3"))], None, seen.all(T0), 10.0)
    assert p.verdict in (SAFE, WAIT)


def test_a_fast_batch_is_open_until_the_server_answers_its_commit():
    seen = OpenBatches(timedelta(seconds=10))
    seen.see("A", "_INBOX.x.f1.10.fail.1.0.$FI", None, T0)
    seen.see("A", "_INBOX.x.f1.10.fail.2.2.$FI", None, T0)  # its commit, heard before the leader stored it
    assert [(b.batch_id, b.committed) for b in seen.on("A", T0 + COMMIT_ANSWER_WAIT / 2)] == [("f1", T0)]
    seen.answered("_INBOX.x.f1.10.fail.1.0.$FI")  # a flow ack to the first message: not the commit's answer
    assert len(seen.on("A", T0)) == 1
    seen.answered("_INBOX.x.f1.10.fail.2.2.$FI")
    assert seen.on("A", T0) == []
    seen.see("A", "_INBOX.x.f2.10.fail.1.0.$FI", None, T0)
    seen.see("A", "_INBOX.x.f2.10.fail.2.2.$FI", None, T0)
    assert seen.on("A", T0 + COMMIT_ANSWER_WAIT * 2) == []  # no answer heard: closed after the wait
    seen.answered("_INBOX.x.f3.10.fail.2.2.$FI")  # another server's route was quicker than the commit's
    seen.see("A", "_INBOX.x.f3.10.fail.2.2.$FI", None, T0)
    assert seen.on("A", T0) == []
    atomic_commit = {"Nats-Batch-Id": "b1", "Nats-Batch-Sequence": "2", "Nats-Batch-Commit": "1"}
    seen.see("A", "_INBOX.y.1", atomic_commit, T0)  # an atomic commit ends its batch at once, as before
    assert seen.on("A", T0) == []


def test_hostile_answers_and_reply_prefixes_are_bounded():
    seen = OpenBatches(timedelta(seconds=10))
    for reply in ("nope", "a.$FI", "_INBOX.x.f1.10.fail.-1.2.$FI", "\x00.$FI"):
        seen.answered(reply)
    assert seen.malformed == 4
    for i in range(MAX_OPEN + 50):  # answers of batches never seen are remembered boundedly
        seen.answered(f"_INBOX.x.g{i}.10.fail.2.2.$FI")
    for i in range(MAX_OPEN + 50):
        seen.see("A", f"_INBOX.x.c{i}.10.fail.2.2.$FI", None, T0)
    assert len(seen.all(T0)) == MAX_OPEN and len(seen._committing) <= MAX_OPEN and len(seen._answered_first) <= MAX_OPEN
    assert seen.see("A", "_INBOX.abc.f1.10.fail.1.0.$FI", None, T0) == "_INBOX.abc"
    for reply in (None, "", "x.y", "*.f1.10.fail.1.0.$FI", "a.>.f1.10.fail.1.0.$FI", "a\x1b.f1.10.fail.1.0.$FI",
                  "_INBOX.x.f1.10.maybe.1.0.$FI"):
        assert seen.see("A", reply, None, T0) is None


def test_hostile_publish_side_input_is_counted_or_bounded():
    seen = OpenBatches(timedelta(seconds=10))
    for reply in ("_INBOX.x.f1.10.maybe.1.0.$FI", "a.$FI", "x" * 5000 + ".$FI", "_INBOX.x.f1.10.ok.-1.0.$FI"):
        seen.see("A", reply, None, T0)
    assert seen.malformed == 4 and seen.all(T0) == []
    seen.see("A", None, {"Nats-Batch-Id": "z" * 10_000}, T0)
    seen.see("A", None, {"Nats-Batch-Id": "\x1b[31mred\n"}, T0)
    assert [b.batch_id for b in seen.all(T0)][1] == "\\x1b[31mred\\n" and len(seen.all(T0)[0].batch_id) == 64 \
         and all(b.batch_id.isprintable() for b in seen.all(T0))
    for i in range(MAX_OPEN + 50):
        seen.see("A", None, {"Nats-Batch-Id": f"flood{i}"}, T0)
    assert len(seen.all(T0)) == MAX_OPEN
    held = plan("n1", [r3("A", "n1", UP("n2"), UP("n3"))], None, seen.on("A", T0), 10.0)
    assert held.verdict == WAIT and f"{MAX_OPEN} batch(es) open on A" in held.waits[0]


def test_a_reconfiguration_in_flight_and_two_meta_leaders_are_refused_and_a_move_elsewhere_is_not():
    moving = Group("M", None, "n1", (UP("n2"), UP("n3"), UP("n4")), configured=3)  # a move: four peers of three
    refused = plan("n1", [moving], "n2", [], 1.0)
    assert refused.verdict == REFUSED and "a reconfiguration is in flight on 1 group(s) of n1's" in refused.refusals[0]
    elsewhere = Group("E", None, "n2", (UP("n3"), UP("n4")), configured=2)
    assert "reconfiguration" not in " ".join(plan("n1", [r3("A", "n1", UP("n2"), UP("n3")), elsewhere], "n2", [],
                                                  1.0).refusals)
    assert plan("n1", [Group("S", None, "n1", (UP("n2"), UP("n3")), configured=3)], "n2", [], 1.0).verdict == SAFE
    split = plan("n1", [r3("A", "n1", UP("n2"), UP("n3"))], "n2", [], 1.0, meta_leaders=("n2", "n3", "n2"))
    assert split.verdict == REFUSED and "the servers name 2 meta leaders (n2, n3)" in split.refusals[0]
    assert plan("n1", [r3("A", "n1", UP("n2"), UP("n3"))], "n2", [], 1.0, meta_leaders=("n2",)).verdict == SAFE
