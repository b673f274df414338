from datetime import datetime, timezone

import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from console.broker.admin import StreamAdmin
from console.broker.atomic import AtomicBatch
from console.broker.pull import ConsumerReader, ReplayError, replay_batch
from console.domain.messages import Ack
from console.errors import ReadOnlyError


async def publish_batch(nc, subject: str, batch_id: str, size: int) -> None:
    batch = AtomicBatch(nc, batch_id=batch_id)
    for i in range(1, size):
        await batch.add(subject, f'{{"part": {i}}}'.encode())
    await batch.commit(subject, f'{{"part": {size}}}'.encode())


@pytest.fixture
async def batch_stream(nc, make_stream):
    """A stream holding 2 plain messages, batch b-1 (3 messages), 1 plain, batch b-2 (2); a durable."""
    stream, subj = await make_stream(allow_atomic=True)
    js = nc.jetstream()
    for i in range(2):
        await js.publish(f"{subj}.plain", f"before {i}".encode())
    await publish_batch(nc, f"{subj}.orders", "b-1", 3)
    await js.publish(f"{subj}.plain", b"between")
    await publish_batch(nc, f"{subj}.orders", "b-2", 2)
    await js.add_consumer(stream, ConsumerConfig(durable_name="ops", ack_policy=AckPolicy.EXPLICIT, ack_wait=30))
    return stream, subj


async def ack_pending(nc, stream):
    return (await nc.jetstream().consumer_info(stream, "ops")).num_ack_pending


async def test_fetch_shows_messages_with_their_batch_headers_in_stream_order(nc, batch_stream):
    stream, subj = batch_stream
    result = await ConsumerReader(nc, stream, "ops").fetch(5)
    assert result.ended == "all requested messages" and result.error is None
    assert [m.stream_seq for m in result.messages] == [1, 2, 3, 4, 5]
    third = result.messages[2]
    assert (third.subject, third.batch_id, third.batch_seq) == (f"{subj}.orders", "b-1", 1)
    assert result.messages[4].header("Nats-Batch-Commit") == "1"
    assert result.messages[0].batch_id is None and result.messages[0].payload == b"before 0"


async def test_ack_removes_a_message_from_pending_and_nak_delivers_it_again(nc, batch_stream):
    stream, _ = batch_stream
    reader = ConsumerReader(nc, stream, "ops")
    first, second = (await reader.fetch(2)).messages
    assert await ack_pending(nc, stream) == 2
    await reader.ack(first, Ack.ACK)
    assert await ack_pending(nc, stream) == 1
    await reader.ack(second, Ack.IN_PROGRESS)
    await reader.ack(second, Ack.NAK)
    [again] = (await reader.next()).messages
    assert (again.stream_seq, again.delivered) == (2, 2)
    await reader.ack(again, Ack.TERM)
    assert await ack_pending(nc, stream) == 0


async def test_next_on_a_drained_consumer_ends_when_the_request_expires(nc, batch_stream):
    stream, _ = batch_stream
    reader = ConsumerReader(nc, stream, "ops")
    assert len((await reader.fetch(100, expires=0.5)).messages) == 8
    result = await reader.next(expires=0.3)
    assert (result.messages, result.ended, result.error) == ((), "request expired", None)


async def test_max_bytes_ends_a_fetch_early(nc, batch_stream):
    stream, _ = batch_stream
    result = await ConsumerReader(nc, stream, "ops").fetch(100, max_bytes=120)
    assert 1 <= len(result.messages) < 8
    assert result.error is None


async def test_a_deleted_consumer_is_an_error_not_an_empty_result(nc, batch_stream):
    stream, _ = batch_stream
    await nc.jetstream().delete_consumer(stream, "ops")
    result = await ConsumerReader(nc, stream, "ops").fetch(1, expires=0.5)
    assert result.messages == () and result.error


async def test_a_peek_reads_from_a_sequence_or_a_time_and_changes_nothing(nc, batch_stream):
    stream, _ = batch_stream
    reader = ConsumerReader(nc, stream, start_seq=3)
    result = await reader.fetch(3)
    assert [m.stream_seq for m in result.messages] == [3, 4, 5]
    with pytest.raises(ReplayError):
        await reader.ack(result.messages[0])
    assert [m.stream_seq for m in (await reader.fetch(10, expires=0.3)).messages] == [6, 7, 8]  # the cursor moves on
    await reader.close()
    later = ConsumerReader(nc, stream, start_time=datetime.now(timezone.utc))
    assert (await later.fetch(1, expires=0.3)).messages == ()
    await later.close()
    info = await nc.jetstream().consumer_info(stream, "ops")
    assert (info.num_pending, info.num_ack_pending) == (8, 0)
    assert [c.name for c in await StreamAdmin(nc).consumers(stream)] == ["ops"]  # the ephemeral one is gone


async def test_read_only_refuses_acks_and_edits_and_the_server_keeps_its_state(nc, batch_stream):
    stream, _ = batch_stream
    [message] = (await ConsumerReader(nc, stream, "ops").next()).messages
    reader = ConsumerReader(nc, stream, "ops", read_only=True)
    for kind in Ack:
        with pytest.raises(ReadOnlyError):
            await reader.ack(message, kind)
    with pytest.raises(ReadOnlyError):  # a fetch would take messages from the consumer's subscribers
        await reader.fetch(1)
    assert await ack_pending(nc, stream) == 1
    peek = ConsumerReader(nc, stream, read_only=True)
    assert len((await peek.fetch(8)).messages) == 8
    await peek.close()
    with pytest.raises(ReadOnlyError):
        await StreamAdmin(nc, read_only=True).apply(stream, allow_batched=True)
    assert not (await nc.jetstream().stream_info(stream)).config.allow_batched


async def test_replay_a_batch_gives_its_stored_messages_in_batch_order(nc, batch_stream):
    stream, _ = batch_stream
    seen = []
    replay = await replay_batch(nc, stream, "b-1", chunk=2, on_progress=seen.append)
    assert replay.complete
    assert [(m.batch_seq, m.stream_seq) for m in replay.messages] == [(1, 3), (2, 4), (3, 5)]
    assert seen and seen == sorted(seen)
    missing = await replay_batch(nc, stream, "never-stored")
    assert (missing.messages, missing.complete, missing.scanned) == ((), False, 8)
