import asyncio

import pytest

from console.broker.atomic import AtomicBatch
from console.domain.advisories import AbandonReason, to_batch_abandoned
from console.errors import (
    ApiLevelError,
    BatchClosedError,
    BatchDisabledError,
    BatchIncompleteError,
    BatchRefusedError,
    BatchTooLargeError,
    DuplicateMessageIdError,
    NoRespondersError,
    TooManyInflightError,
)


@pytest.fixture
async def abandonments(nc):
    """A queue of the batch_abandoned advisories the server raises during the test."""
    queue: asyncio.Queue = asyncio.Queue()

    async def on_advisory(msg):
        await queue.put(to_batch_abandoned(msg.data))

    sub = await nc.subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED.>", cb=on_advisory)
    yield queue
    await sub.unsubscribe()


async def next_abandonment(queue, batch_id, timeout=10):
    while True:
        adv = await asyncio.wait_for(queue.get(), timeout)
        if adv.batch == batch_id:
            return adv


async def test_commit_stores_every_message_with_batch_headers(nc, make_stream):
    stream, subj = await make_stream(allow_atomic=True)
    batch = AtomicBatch(nc, batch_id="orders-1")
    for i in range(4):
        await batch.add(f"{subj}.o", f"m{i}".encode())
    ack = await batch.commit(f"{subj}.o", b"last")
    assert (ack.stream, ack.seq, ack.batch, ack.count) == (stream, 5, "orders-1", 5)
    last = await nc.jetstream().get_msg(stream, 5)
    assert last.headers == {"Nats-Batch-Id": "orders-1", "Nats-Batch-Sequence": "5", "Nats-Batch-Commit": "1"}
    assert last.data == b"last"


async def test_eob_commit_stores_nothing_more_and_marks_the_last_message(nc, make_stream):
    stream, subj = await make_stream(allow_atomic=True)
    batch = AtomicBatch(nc, batch_id="eob-1")
    for i in range(3):
        await batch.add(f"{subj}.e", b"x")
    ack = await batch.commit_eob()
    assert (ack.seq, ack.count) == (3, 3)
    info = await nc.jetstream().stream_info(stream)
    assert info.state.messages == 3
    last = await nc.jetstream().get_msg(stream, 3)
    assert last.headers["Nats-Batch-Commit"] == "1"


async def test_a_single_message_commit_is_a_batch_of_one(nc, make_stream):
    stream, subj = await make_stream(allow_atomic=True)
    ack = await AtomicBatch(nc).commit(f"{subj}.one", b"x")
    assert ack.count == 1


async def test_disabled_stream_raises_10174(nc, make_stream):
    _, subj = await make_stream()
    with pytest.raises(BatchDisabledError) as info:
        await AtomicBatch(nc).add(f"{subj}.x", b"x")
    assert (info.value.err_code, info.value.description) == (10174, "atomic publish is disabled")


async def test_a_gap_abandons_the_batch_as_incomplete(nc, make_stream, abandonments):
    _, subj = await make_stream(allow_atomic=True)
    batch = AtomicBatch(nc, batch_id="gappy")
    await batch.add(f"{subj}.g", b"1")
    batch.skip_seq()
    await batch.add(f"{subj}.g", b"3")
    with pytest.raises(BatchIncompleteError) as info:
        await batch.commit(f"{subj}.g", b"4")
    assert info.value.err_code == 10176
    assert (await next_abandonment(abandonments, "gappy")).reason is AbandonReason.INCOMPLETE


async def test_wait_every_surfaces_a_staging_failure_before_the_commit(nc, make_stream):
    _, subj = await make_stream(allow_atomic=True)
    batch = AtomicBatch(nc, wait_every=4)
    await batch.add(f"{subj}.w", b"1")
    batch.skip_seq()
    await batch.add(f"{subj}.w", b"3")
    with pytest.raises(BatchIncompleteError):
        await batch.add(f"{subj}.w", b"4")  # the 4th message waits for its reply
    with pytest.raises(BatchClosedError):
        await batch.add(f"{subj}.w", b"5")


async def test_discard_leaves_the_server_to_abandon_it_for_timeout(nc, make_stream, abandonments):
    stream, subj = await make_stream(allow_atomic=True)
    batch = AtomicBatch(nc, batch_id="left-open")
    await batch.add(f"{subj}.d", b"1")
    batch.discard()
    adv = await next_abandonment(abandonments, "left-open")
    assert (adv.stream, adv.reason) == (stream, AbandonReason.TIMEOUT)
    with pytest.raises(BatchClosedError):
        await batch.commit(f"{subj}.d", b"2")


async def test_commit_after_the_server_timed_out_the_batch_is_incomplete(nc, make_stream, abandonments):
    _, subj = await make_stream(allow_atomic=True)
    batch = AtomicBatch(nc, batch_id="too-slow")
    await batch.add(f"{subj}.s", b"1")
    await next_abandonment(abandonments, "too-slow")
    with pytest.raises(BatchIncompleteError):
        await batch.commit(f"{subj}.s", b"2")


async def test_more_than_the_servers_max_is_10199_and_the_client_refuses_it_first(nc, make_stream, abandonments):
    _, subj = await make_stream(allow_atomic=True)
    loose = AtomicBatch(nc, batch_id="too-big", max_msgs=1000)  # the test server allows 100
    for _ in range(100):
        await loose.add(f"{subj}.l", b"x")
    with pytest.raises(BatchTooLargeError) as info:
        await loose.commit(f"{subj}.l", b"x")
    assert info.value.description == "atomic publish batch is too large: 100"
    assert (await next_abandonment(abandonments, "too-big")).reason is AbandonReason.LARGE

    strict = AtomicBatch(nc, max_msgs=3)
    for _ in range(3):
        await strict.add(f"{subj}.l", b"x")
    with pytest.raises(BatchRefusedError, match="allows 3"):
        await strict.commit(f"{subj}.l", b"x")


async def test_duplicate_message_id_is_10201(nc, make_stream):
    _, subj = await make_stream(allow_atomic=True)
    batch = AtomicBatch(nc)
    await batch.add(f"{subj}.m", b"1", headers={"Nats-Msg-Id": "same"})
    with pytest.raises(DuplicateMessageIdError):
        await batch.commit(f"{subj}.m", b"2", headers={"Nats-Msg-Id": "same"})


async def test_required_api_level_too_high_is_10185_and_abandoned_as_unsupported(nc, make_stream, abandonments):
    _, subj = await make_stream(allow_atomic=True)
    batch = AtomicBatch(nc, batch_id="from-the-future")
    with pytest.raises(ApiLevelError) as info:
        await batch.add(f"{subj}.u", b"1", headers={"Nats-Required-Api-Level": "99"})
    assert info.value.code == 412
    assert (await next_abandonment(abandonments, "from-the-future")).reason is AbandonReason.UNSUPPORTED


async def test_too_many_open_batches_on_a_stream_is_10210(nc, make_stream):
    _, subj = await make_stream(allow_atomic=True)
    for _ in range(5):  # the test server allows 5 in flight per stream
        await AtomicBatch(nc).add(f"{subj}.i", b"x")
    with pytest.raises(TooManyInflightError) as info:
        await AtomicBatch(nc).add(f"{subj}.i", b"x")
    assert (info.value.err_code, info.value.code) == (10210, 429)


async def test_client_refuses_what_the_server_would(nc):
    with pytest.raises(BatchRefusedError, match="64"):
        AtomicBatch(nc, batch_id="B" * 65)
    batch = AtomicBatch(nc)
    with pytest.raises(BatchRefusedError, match="10177"):
        await batch.add("any.subject", b"x", headers={"Nats-Expected-Last-Msg-Id": "abc"})
    with pytest.raises(BatchRefusedError, match="at least one"):
        await AtomicBatch(nc).commit_eob()


async def test_no_stream_on_the_subject_is_no_responders(nc):
    with pytest.raises(NoRespondersError):
        await AtomicBatch(nc).add("nobody.listens.here", b"x")
