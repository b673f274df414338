"""Publishes acknowledged on an inbox of their own (console.broker.acks), on a real server: what the stream
says of each message, and what a hostile or absent answer is taken for (never "stored")."""

import asyncio

from nats.js.api import StreamConfig

from console.broker.acks import Acknowledged, Answer

HEADERS = {"Nats-Msg-Id": "m1"}


async def test_each_message_is_stored_a_duplicate_or_refused_by_the_server_in_its_words(nc):
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name="ACKS_A", subjects=["acks_a.>"], max_msg_size=512))
    acked = Acknowledged(nc, "ACKS_A")
    answers = await acked.publish([("acks_a.x", b"1", {"Nats-Msg-Id": "m1"}), ("acks_a.x", b"2", {"Nats-Msg-Id": "m2"}),
                                   ("acks_a.x", b"again", {"Nats-Msg-Id": "m1"}),
                                   ("acks_a.x", b"x" * 1000, {"Nats-Msg-Id": "m3"})], within=5)
    assert answers[:3] == [Answer(), Answer(), Answer(duplicate=True)]
    big = answers[3]
    assert big is not None and big.permanent and "maximum" in big.error.lower(), big
    assert (await js.stream_info("ACKS_A")).state.messages == 2


async def test_no_stream_is_a_retry_and_no_answer_is_none_in_time(nc):
    acked = Acknowledged(nc, "ACKS_B")
    [nobody] = await acked.publish([("acks_b.nobody", b"1", HEADERS)], within=5)
    assert nobody is not None and not nobody.permanent and "no responders" in nobody.error

    async def silent(msg):
        pass

    await nc.subscribe("acks_b.silent", cb=silent)  # interest, so no 503, and no answer ever
    started = asyncio.get_running_loop().time()
    assert await acked.publish([("acks_b.silent", b"1", HEADERS)], within=0.5) == [None]
    assert asyncio.get_running_loop().time() - started < 5


async def test_a_responder_that_is_not_the_stream_is_never_taken_for_it(nc):
    """Any client may answer on the log's subjects: a forged PubAck naming another stream, or bytes that are
    no PubAck, are retries; and answers after the caller gave up, or to nothing of ours, are dropped."""
    replies = iter([b'{"stream":"SOMEONE_ELSE","seq":1}', b"\x00not json", b'{"stream":"ACKS_C","seq":1e999}'])

    async def forger(msg):
        await nc.publish(msg.reply, next(replies))

    await nc.subscribe("acks_c.forged", cb=forger)
    acked = Acknowledged(nc, "ACKS_C")
    answers = await acked.publish([("acks_c.forged", b"1", HEADERS)] * 3, within=5)
    assert all(a is not None and a.error and not a.permanent and not a.duplicate for a in answers), answers
    assert "SOMEONE_ELSE" in answers[0].error
    await nc.publish(acked._inbox + "999999", b'{"stream":"ACKS_C","seq":1}')  # an answer to nothing of ours
    await nc.publish(acked._inbox + "0", b'{"stream":"ACKS_C","seq":1}')  # to a message already answered
    await nc.flush()
    await nc.jetstream().add_stream(StreamConfig(name="ACKS_C", subjects=["acks_c.stored"]))
    assert await acked.publish([("acks_c.stored", b"1", HEADERS)], within=5) == [Answer()]
    assert acked._calls == {}


async def test_callers_at_once_each_get_their_own_answers(nc):
    await nc.jetstream().add_stream(StreamConfig(name="ACKS_D", subjects=["acks_d.>"]))
    acked = Acknowledged(nc, "ACKS_D")
    first, second = await asyncio.gather(
        acked.publish([(f"acks_d.{i}", b"1", {"Nats-Msg-Id": f"a{i}"}) for i in range(300)], within=10),
        acked.publish([(f"acks_d.{i}", b"1", {"Nats-Msg-Id": f"a{i}"}) for i in range(300)], within=10))
    both = first + second
    assert all(a is not None and a.error is None for a in both)
    assert sum(not a.duplicate for a in both) == 300 and sum(a.duplicate for a in both) == 300
