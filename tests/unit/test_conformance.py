"""The conformance catalogue, the grader and the verdicts read back: pure, and hostile input throughout
(a verdict comes from the event log, which any client of the account can write to; the grader reads
every subject and body the tap hears)."""

import json
import tracemalloc
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.domain.conformance import (
    CANNOT_TELL, FAIL, NOT_OBSERVED, ON_PUBLISH_SIDE, ON_REPLIES, PASS, STATEMENTS, ClientVerdict, Example, MalformedVerdict, Tallies, Verdicts,
    client_key,
)
from console.domain.events import BatchEvent, EventKind, event_from_json
from console.domain.grader import Grader
from console.domain.publisher import Publisher

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=timezone.utc)
APP = Publisher(name="orders", lang="python3", version="2.16.0", account="APP")


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def fast(batch: str, seq: int, op: int, flow: int = 10, gap: str = "ok", prefix: str = "_INBOX.p") -> str:
    return f"{prefix}.{batch}.{flow}.{gap}.{seq}.{op}.$FI"


def ack(seq: int, msgs: int = 10) -> bytes:
    return b'{"type":"ack","seq":%d,"msgs":%d}' % (seq, msgs)


def test_the_catalogue_quotes_the_adr_and_says_what_shows_each_statement():
    assert 20 <= len(STATEMENTS) <= 25
    for s in STATEMENTS.values():
        assert s.adr and s.section and s.passes and s.fails and s.evidence
        assert set(s.evidence) <= {"replies", "publish side"}


def verdict(**results) -> ClientVerdict:
    return ClientVerdict(client_key(APP), APP, 3, False, {k: Tallies(*v) for k, v in results.items()},
                         "2026-11-25T12:00:00Z", "2026-11-25T12:01:00Z")


def test_a_statement_is_pass_fail_not_observed_or_cannot_tell():
    v = verdict(F05=(2, 0), F09=(1, 1, [Example("b1", "S", "2026-11-25T12:00:00Z", "message 99 after the end")]))
    assert (v.status("F05"), v.status("F09")) == (PASS, FAIL)
    assert v.status("F12") == NOT_OBSERVED  # the replies show it: there was simply none
    assert v.status("F03") == CANNOT_TELL  # only the publish side shows it, and it was not tapped
    assert v.failing == ["F09"]


def test_a_verdict_reads_back_as_written():
    v = verdict(F09=(1, 1, [Example("b1", "S", "2026-11-25T12:00:00Z", "message 99 after the end")]))
    back = ClientVerdict.from_json(v.to_json())
    assert (back.key, back.publisher, back.failing, back.results["F09"].examples) == \
        (v.key, v.publisher, ["F09"], v.results["F09"].examples)


GOOD = json.loads(verdict(F05=(2, 0)).to_json())


@pytest.mark.parametrize("change", [
    {"results": {"F99": {"passed": 1, "failed": 0}}},  # not a statement
    {"results": {"F05": {"passed": 10**30, "failed": 0}}},  # a huge number
    {"results": {"F05": {"passed": "1", "failed": 0}}},  # a wrong type
    {"results": {"F05": {"passed": 1, "failed": 1, "examples": [{"batch": "b", "time": "x", "detail": "d"}] * 4}}},
    {"results": {"F05": {"passed": 1, "failed": 1, "examples": [{"batch": "b\x1b[2J", "time": "2026-11-25T12:00:00Z",
                                                                  "detail": "d"}]}}},  # a control character
    {"key": "k" * 5000}, {"key": 7}, {"publish_side": "yes"}, {"since": "yesterday"}, {"publisher": [1]},
    {"results": [1, 2]},
])
def test_a_malformed_verdict_is_one_typed_error(change):
    with pytest.raises(MalformedVerdict):
        ClientVerdict.from_json(json.dumps({**GOOD, **change}))


@pytest.mark.parametrize("raw", [b"", b"[]", b"{" * 100_000, b'{"results":' * 5000, b"\xff\xfe", b"1e999999"])
def test_garbage_is_one_typed_error(raw):
    with pytest.raises(MalformedVerdict):
        ClientVerdict.from_json(raw)


def conformance_event(v: ClientVerdict, when: datetime, n: int = 1) -> BatchEvent:
    return BatchEvent(f"conformance.test.{n}", EventKind.CONFORMANCE, when, publisher=v.publisher,
                      detail=v.to_json())


def test_the_latest_verdict_of_each_client_wins_and_a_forged_one_is_counted_not_kept():
    verdicts = Verdicts()
    newer, older = verdict(F05=(5, 0)), verdict(F05=(1, 1))
    verdicts.apply(conformance_event(newer, at(10)))
    verdicts.apply(conformance_event(older, at(5), 2))  # stored late: never overrides the newer
    verdicts.apply(BatchEvent("conformance.forged", EventKind.CONFORMANCE, at(11), detail='{"key": 1}'))
    assert [v.failing for v in verdicts.report()] == [[]]
    assert verdicts.malformed == 1
    assert verdicts.of(APP).results["F05"].passed == 5
    # and through the event log's own reader, as every page reads it
    assert event_from_json(conformance_event(newer, at(10)).to_json()).detail == newer.to_json()


def test_verdicts_are_bounded():
    verdicts = Verdicts(max_clients=100)
    for i in range(1000):
        p = Publisher(name=f"client-{i}", lang="go", version="1", account="A")
        v = ClientVerdict(client_key(p), p, 1, False, {}, "2026-11-25T12:00:00Z", "2026-11-25T12:00:00Z")
        verdicts.apply(conformance_event(v, at(i), i))
    assert len(verdicts) == 100


def graded(grader: Grader) -> ClientVerdict:
    grader.fold_all()
    [v] = grader.verdicts()
    return v


def test_a_conformant_fast_batch_passes_what_it_shows_from_both_sides():
    g = Grader(batch_timeout=1.0, resolve=lambda *_: APP)
    g.fast_message(fast("b", 1, 0), at(0))
    g.reply(fast("b", 1, 0), ack(0), at(0.01))
    for seq in range(2, 31):
        g.fast_message(fast("b", seq, 1), at(0.02))
        if seq % 10 == 0:
            g.reply(fast("b", seq, 1), ack(seq), at(0.03))
    g.fast_message(fast("b", 30, 4), at(0.04))  # a ping at the highest sent
    g.reply(fast("b", 30, 4), ack(30), at(0.05))
    g.fast_message(fast("b", 31, 2), at(0.06))
    g.reply(fast("b", 31, 2), b'{"stream":"S","seq":31,"batch":"b","count":31}', at(0.07))
    v = graded(g)
    assert v.failing == []
    assert {"F01", "F02", "F03", "F04", "F05", "F06", "F07", "F11", "F12"} <= {s for s in v.results
                                                                              if v.status(s) == PASS}


def test_replies_alone_fail_no_one_they_leave_a_failure_unconfirmed_and_the_rest_unknown():
    """Any client of the account can publish on a publisher's inbox: before, forged replies alone failed an
    innocent client."""
    g = Grader(batch_timeout=1.0, resolve=lambda *_: APP)
    g.reply(fast("b", 1, 0), ack(0), at(0))
    unknown = b'{"error":{"code":400,"err_code":10208,"description":"batch publish ID unknown"}}'
    g.reply(fast("b", 11, 1), unknown, at(0.5))
    g.reply(fast("b", 200, 1), unknown, at(0.6))  # far past what was in flight at the first refusal
    v = graded(g)
    assert v.failing == [] and v.unconfirmed == ["F09"] and not v.publish_side
    assert v.results["F09"].examples[0].rests_on == ON_REPLIES
    assert v.status("F05") == CANNOT_TELL


def test_the_publish_side_confirms_a_failure_or_shows_the_replies_forged():
    g = Grader(batch_timeout=1.0, resolve=lambda *_: APP)
    g.fast_message(fast("b", 1, 0), at(0))  # the client's real start, at 1
    g.reply(fast("b", 7, 0), ack(0), at(0.01))  # a forged answer to a start at 7 (F01) ...
    g.reply(fast("b", 1, 0, prefix="_INBOX.other"), ack(0), at(0.02))  # ... and to another prefix (F04)
    g.fast_message(fast("b", 2, 1), at(0.03))
    v = graded(g)
    assert v.failing == [] and set(v.unconfirmed) == {"F01", "F04", "F12"}  # the report's three
    assert "the publish side saw otherwise" in v.results["F01"].examples[0].detail
    g = Grader(batch_timeout=1.0, resolve=lambda *_: APP)
    g.reply(fast("c", 1, 0), ack(0), at(0))
    unknown = b'{"error":{"code":400,"err_code":10208,"description":"batch publish ID unknown"}}'
    g.reply(fast("c", 2, 1), unknown, at(0.1))
    g.fast_message(fast("c", 200, 1), at(0.2))  # seen sent far past the refusal: confirmed
    v = graded(g)
    assert v.failing == ["F09"] and v.results["F09"].examples[0].rests_on == ON_PUBLISH_SIDE


@given(st.lists(st.tuples(st.text(max_size=120), st.binary(max_size=200), st.booleans()), max_size=40))
@settings(deadline=None)
def test_the_grader_never_raises_on_what_the_tap_hears(inputs):
    g = Grader(batch_timeout=1.0)
    for i, (subject, body, publish_side) in enumerate(inputs):
        subject = subject if "$FI" in subject or i % 2 else f"_INBOX.x.{subject}.10.ok.{i}.{i % 5}.$FI"
        if publish_side:
            g.fast_message(subject, at(i))
            g.atomic_message({"Nats-Batch-Id": subject[:80], "Nats-Batch-Sequence": body.decode("latin-1")[:20],
                              "Nats-Batch-Commit": "eob"}, subject, None, at(i))
        else:
            g.reply(subject, body, at(i), no_responders=bool(i % 3 == 0))
    g.tick(at(1000))
    g.fold_all()
    for v in g.verdicts(changed_only=False):
        ClientVerdict.from_json(v.to_json())  # whatever was graded is a verdict its readers take


def test_memory_stays_bounded_with_ten_thousand_publishers_and_more():
    def run(clients: int) -> tuple[int, int]:
        g = Grader(batch_timeout=1.0, max_batches=2000, max_clients=10_000,
                   resolve=lambda kind, prefix, batch: Publisher(name=prefix, lang="go", version="1"))
        tracemalloc.start()
        for i in range(clients):
            prefix = f"_INBOX.c{i}"
            g.fast_message(fast(f"b{i}", 1, 0, prefix=prefix), at(0))
            g.reply(fast(f"b{i}", 1, 0, prefix=prefix), ack(0), at(0))
        g.fold_all()
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return size, len(g.clients)

    ten, kept_ten = run(10_000)
    forty, kept_forty = run(40_000)
    assert kept_ten == kept_forty == 10_000
    assert forty < ten * 1.3  # four times the publishers, the same memory: the oldest clients go


def test_busy_clients_are_told_a_few_at_a_time_a_new_failure_first():
    g = Grader(batch_timeout=1.0, resolve=lambda kind, prefix, batch: Publisher(name=prefix, lang="go", version="1"))
    for i in range(500):
        g.reply(fast(f"b{i}", 1, 0, prefix=f"_INBOX.c{i}"), ack(0), at(0))
    g.fold_all()
    first = g.verdicts(now=at(1), limit=100, again_after=timedelta(seconds=60))
    assert len(first) == 100 and len(g.changed) == 400
    g.reply(fast("x", 1, 2, prefix="_INBOX.c499"), b'{"stream":"S","seq":1,"batch":"x","count":1}', at(2))
    g.reply(fast("x", 1, 0, prefix="_INBOX.c499"), ack(0), at(2))  # a start after its commit: c499 only
    g.reply(fast("y", 2, 0, prefix="_INBOX.c499"), b'{"error":{"code":400,"err_code":10206,"description":"x"}}', at(2))
    g.fold_all()
    second = g.verdicts(now=at(3), limit=100, again_after=timedelta(seconds=60))
    assert second[0].unconfirmed == ["F01"] and second[0].publisher.name == "_INBOX.c499"  # a new failure: first
    for _ in range(3):
        g.verdicts(now=at(4), limit=100, again_after=timedelta(seconds=60))
    assert not g.changed  # every client told once
    g.reply(fast("b0", 5, 1, prefix="_INBOX.c0"), ack(5), at(5))
    g.fold_all()
    assert g.verdicts(now=at(6), limit=100, again_after=timedelta(seconds=60)) == []  # counts only: later
    assert [v.publisher.name for v in g.verdicts(now=at(70), limit=100, again_after=timedelta(seconds=60))] == \
        ["_INBOX.c0"]


def test_a_burst_of_429s_is_backing_off_seconds_of_them_are_not():
    refused = b'{"error":{"code":429,"err_code":10211,"description":"batch publish too many inflight"}}'

    def client(times: list[float]) -> ClientVerdict:
        g = Grader(batch_timeout=1.0, resolve=lambda *_: APP)
        for i, t in enumerate(times):
            g.reply(fast(f"b{i}", 1, 0), refused, at(t))
        return graded(g)

    burst = client([0.01 * i for i in range(50)])  # 50 starts refused at once: concurrent, not a retry loop
    assert burst.status("B01") == PASS
    storm = client([0.05 * i for i in range(60)])  # 20 a second for 3 seconds
    assert storm.unconfirmed == ["B01"] and storm.failing == []  # 429s on its inbox: forgeable


def test_every_statement_grades_itself_through_a_hook_and_only_itself():
    """A statement is one class: its text and the hooks that grade it. One that overrides no hook is
    never graded; one that wrote another's result would be graded twice."""
    import inspect

    from console.domain.statements import Statement

    hooks = [name for name in vars(Statement) if name.startswith("on_")]
    for s in STATEMENTS.values():
        overridden = [h for h in hooks if getattr(type(s), h) is not getattr(Statement, h)]
        assert overridden, f"{s.id} overrides no hook: nothing grades it"
        for h in overridden:
            source = inspect.getsource(getattr(type(s), h))
            assert not any(f'"{other}"' in source for other in STATEMENTS), (s.id, h)


def test_a_batch_is_folded_under_the_client_the_servers_name_when_their_answer_is_late():
    """A busy server answers CONNZ late: the ended batch waits for the answer (boundedly) rather than
    going to "(publisher unknown)" for good."""
    answered: dict[str, Publisher] = {}
    g = Grader(batch_timeout=1.0, resolve=lambda _k, _p, batch: answered.get(batch),
               asking=lambda _k, _p, batch: batch not in answered)
    for batch in ("late", "never"):
        g.fast_message(fast(batch, 1, 0), at(0))
        g.reply(fast(batch, 1, 0), ack(0), at(0.01))
        g.fast_message(fast(batch, 2, 2), at(0.02))
        g.reply(fast(batch, 2, 2), b'{"stream":"S","seq":2}', at(0.03))
    g.tick(at(5))  # ended and lingered, but still asked about: kept
    assert g.graded == 0
    answered["late"] = APP
    g.tick(at(6))
    assert g.graded == 1 and [v.publisher for v in g.verdicts()] == [APP]
    g.tick(at(40))  # never answered: folded as unknown past the bound
    assert g.graded == 2 and [v.key for v in g.verdicts()] == ["(publisher unknown)"]


def test_one_forgers_flood_of_new_batch_ids_takes_a_quarter_of_the_grader_and_crowds_out_no_one():
    g = Grader(batch_timeout=1.0, max_batches=40)
    g.fast_message(fast("real", 1, 0, prefix="_INBOX.real"), at(0))  # a real publisher's batch, its publish side seen
    for i in range(1000):  # forged starts' acks under one prefix, as fast as one client sends them
        g.reply(fast(f"f{i}", 1, 0, prefix="_INBOX.forger"), ack(0), at(0))
    assert sum(1 for b in g.batches.values() if b.prefix == "_INBOX.forger") == 10
    assert g.not_graded == 990 and ("fast", "real") in g.batches  # not evicted by the flood
    g.fold_all()
    assert not g._per_prefix  # every batch folded is uncounted: the share frees as batches end
    assert g.reply(fast("later", 1, 0, prefix="_INBOX.forger"), ack(0), at(1)) is True
