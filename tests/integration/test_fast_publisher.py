import asyncio
import json

import pytest

from console.broker.fast import BatchEndedError, FastBatch
from console.domain.replies import FlowError, FlowGap
from console.errors import BatchDisabledError, BatchIdUnknownError, BatchRefusedError, NoRespondersError, TooManyInflightError
from tests.waits import wait_until


async def test_commit_stores_every_message_and_reports_ack_progress(nc, make_stream):
    stream, subj = await make_stream(allow_batched=True)
    batch = FastBatch(nc, flow=10)
    results = [await batch.add(f"{subj}.f", b"x") for _ in range(99)]
    ack = await batch.commit(f"{subj}.f", b"last")
    assert results[0] == (1, 0)
    assert [batch_seq for batch_seq, _ in results] == list(range(1, 100))
    assert results[-1][1] >= 99 - 2 * 10  # never more than 2 windows unacknowledged
    assert (ack.stream, ack.seq, ack.batch, ack.count) == (stream, 100, batch.batch_id, 100)
    assert batch.acks >= 9 and batch.gap_count == 0


async def test_eob_commit_counts_only_the_messages_sent(nc, make_stream):
    stream, subj = await make_stream(allow_batched=True)
    batch = FastBatch(nc, flow=5)
    for _ in range(7):
        await batch.add(f"{subj}.f", b"x")
    ack = await batch.commit_eob()
    assert (ack.seq, ack.count) == (7, 7)
    assert (await nc.jetstream().stream_info(stream)).state.messages == 7


async def test_a_lone_batch_gets_its_flow_capped_at_500(nc, make_stream):
    _, subj = await make_stream(allow_batched=True)
    batch = FastBatch(nc, flow=1000)
    await batch.add(f"{subj}.f", b"x")
    assert batch.flow == 500
    await batch.commit_eob()


async def test_a_second_concurrent_batch_starts_at_one_and_the_first_is_slowed(nc, make_stream):
    _, subj = await make_stream(allow_batched=True)
    first, second = FastBatch(nc, flow=500), FastBatch(nc, flow=500)
    for _ in range(1001):
        await first.add(f"{subj}.a", b"x")
    await second.add(f"{subj}.b", b"x")
    for _ in range(1500):
        await first.add(f"{subj}.a", b"x")
        await second.add(f"{subj}.b", b"x")
    assert second.flow_changes[0] == (0, 500, 1)
    assert [new for _, _, new in second.flow_changes][:4] == [1, 2, 4, 8]
    assert second.flow == 250 and first.flow == 250
    await second.commit_eob()
    for _ in range(1500):
        await first.add(f"{subj}.a", b"x")
    assert first.flow == 500  # alone again
    assert (await first.commit_eob()).count == 1001 + 1500 + 1500


async def test_gap_in_ok_mode_is_reported_and_the_batch_goes_on(nc, make_stream):
    stream, subj = await make_stream(allow_batched=True)
    seen = []
    batch = FastBatch(nc, flow=2, gap_mode="ok", on_problem=seen.append)
    for _ in range(3):
        await batch.add(f"{subj}.g", b"x")
    batch.skip_seq(2)  # sequences 4 and 5 are never sent
    for _ in range(3):
        await batch.add(f"{subj}.g", b"x")
    ack = await batch.commit_eob()
    assert seen == [FlowGap(first_lost_seq=4, seq=6)]
    assert batch.lost == 2
    # The server's count is the last batch sequence, lost messages included: 8, of which 6 stored.
    assert ack.count == 8
    assert (await nc.jetstream().stream_info(stream)).state.messages == 6


async def test_gap_in_fail_mode_ends_the_batch_with_what_was_stored(nc, make_stream):
    stream, subj = await make_stream(allow_batched=True)
    batch = FastBatch(nc, flow=2, gap_mode="fail")
    for _ in range(3):
        await batch.add(f"{subj}.g", b"x")
    batch.skip_seq()
    with pytest.raises(BatchEndedError) as info:
        for _ in range(10):
            await batch.add(f"{subj}.g", b"x")
        await batch.commit_eob()
    assert info.value.cause == FlowGap(first_lost_seq=4, seq=5)
    assert info.value.puback.count == 3
    assert (await nc.jetstream().stream_info(stream)).state.messages == 3
    with pytest.raises(BatchEndedError):
        await batch.add(f"{subj}.g", b"x")


@pytest.mark.parametrize("finish", ["commit", "commit_eob"])
async def test_a_gap_at_the_commit_in_fail_mode_is_an_end_not_a_commit(nc, make_stream, finish):
    """The server's final PubAck after a gap counts what it stored before it: waited for as the commit's
    answer, it is still the batch's end (found on a cluster, where a leader change loses the commit)."""
    stream, subj = await make_stream(allow_batched=True)
    batch = FastBatch(nc, flow=2, gap_mode="fail")
    for _ in range(3):
        await batch.add(f"{subj}.g", b"x")
    batch.skip_seq()
    with pytest.raises(BatchEndedError) as info:
        await (batch.commit(f"{subj}.g", b"last") if finish == "commit" else batch.commit_eob())
    assert info.value.cause == FlowGap(first_lost_seq=4, seq=5)
    assert info.value.puback.count == 3
    assert (await nc.jetstream().stream_info(stream)).state.messages == 3


async def test_ping_recovers_the_last_ack_and_reveals_a_gap(nc, make_stream):
    _, subj = await make_stream(allow_batched=True)
    seen = []
    batch = FastBatch(nc, flow=2, gap_mode="ok", on_problem=seen.append)
    await batch.add(f"{subj}.p", b"x")
    await batch.add(f"{subj}.p", b"x")
    acks_before = batch.acks
    batch.skip_seq(2)
    await batch.ping()
    await wait_until(lambda: seen and batch.acks > acks_before)
    assert seen == [FlowGap(first_lost_seq=3, seq=5)]
    assert (await batch.commit_eob()).count == 4


async def test_per_message_error_in_ok_mode_goes_to_the_callback(nc, make_stream):
    _, subj = await make_stream(allow_batched=True)
    seen = []
    batch = FastBatch(nc, flow=10, gap_mode="ok", on_problem=seen.append)
    await batch.add(f"{subj}.e", b"x")
    await batch.add(f"{subj}.e", b"x", headers={"Nats-Expected-Last-Sequence": "999"})
    await batch.add(f"{subj}.e", b"x")
    ack = await batch.commit_eob()
    [problem] = seen
    assert isinstance(problem, FlowError) and problem.seq == 2 and problem.error.err_code == 10071
    assert ack.count == 3


async def test_lost_acks_are_recovered_by_pinging(nc, make_stream):
    _, subj = await make_stream(allow_batched=True)
    batch = FastBatch(nc, flow=5, max_outstanding_acks=1, ack_timeout=3)
    deliver = batch._on_reply
    dropped = []

    async def lossy(msg):  # the network loses the first three flow acks after the start
        body = json.loads(msg.data or b"{}")
        if body.get("type") == "ack" and body["seq"] > 0 and len(dropped) < 3:
            dropped.append(body["seq"])
            return
        await deliver(msg)

    batch._on_reply = lossy
    for _ in range(30):
        await batch.add(f"{subj}.l", b"x")
    assert (await batch.commit_eob()).count == 30
    assert len(dropped) == 3 and batch.pings >= 1


async def test_duplicate_single_message_commit_is_flagged(nc, make_stream):
    _, subj = await make_stream(allow_batched=True)
    first = await FastBatch(nc).commit(f"{subj}.d", b"x", headers={"Nats-Msg-Id": "once"})
    again = await FastBatch(nc).commit(f"{subj}.d", b"x", headers={"Nats-Msg-Id": "once"})
    assert (first.duplicate, again.duplicate, again.seq) == (False, True, first.seq)


@pytest.mark.slow
async def test_a_batch_idle_past_the_server_timeout_is_unknown(nc, make_stream, nats_server):
    _, subj = await make_stream(allow_batched=True)
    batch = FastBatch(nc, flow=10)
    await batch.add(f"{subj}.i", b"x")
    # No signal exists for a dropped fast batch (no advisory): only the server's own timer.
    await asyncio.sleep(nats_server.batch_limits.timeout * 2.5)
    with pytest.raises(BatchIdUnknownError) as info:
        await batch.commit(f"{subj}.i", b"x")
    assert info.value.description == "batch publish ID unknown"


async def test_disabled_stream_raises_10205(nc, make_stream):
    _, subj = await make_stream()
    with pytest.raises(BatchDisabledError) as info:
        await FastBatch(nc).add(f"{subj}.x", b"x")
    assert info.value.err_code == 10205


async def test_too_many_open_fast_batches_is_10211(nc, make_stream):
    _, subj = await make_stream(allow_batched=True)
    open_batches = [FastBatch(nc, flow=10) for _ in range(5)]
    for batch in open_batches:
        await batch.add(f"{subj}.i", b"x")
    with pytest.raises(TooManyInflightError) as info:
        await FastBatch(nc).add(f"{subj}.i", b"x")
    assert info.value.err_code == 10211
    for batch in open_batches:
        await batch.commit_eob() if batch.seq > 1 else await batch.close()


async def test_no_stream_on_the_subject_is_no_responders(nc):
    with pytest.raises(NoRespondersError):
        await FastBatch(nc, ack_timeout=2).add("nobody.listens", b"x")


async def test_client_refuses_invalid_options(nc):
    with pytest.raises(BatchRefusedError):
        FastBatch(nc, max_outstanding_acks=4)
    with pytest.raises(BatchRefusedError):
        FastBatch(nc, batch_id="x" * 65)
    with pytest.raises(BatchRefusedError):
        await FastBatch(nc).commit_eob()
