import pytest

from console.broker.admin import Refusal, StreamAdmin
from console.domain.stream_settings import check_change, check_settings


async def test_lists_streams_with_their_batch_settings_and_the_server_level(nc, make_stream):
    name, _ = await make_stream(allow_atomic=True)
    admin = StreamAdmin(nc)
    [mine] = [s for s in await admin.streams() if s.name == name]
    assert (mine.allow_atomic, mine.allow_batched, mine.required_api_level) == (True, False, 2)
    server = await admin.server()
    assert server.api_level >= 4 and server.version.startswith("2.")


async def test_an_edit_round_trips_and_records_the_new_required_level(nc, make_stream):
    name, _ = await make_stream()
    updated = await StreamAdmin(nc).apply(name, allow_batched=True)
    assert (updated.allow_batched, updated.persist_mode, updated.required_api_level) == (True, "default", 4)


async def test_persist_mode_cannot_change_on_an_existing_stream(nc, make_stream):
    name, _ = await make_stream()
    before = [s for s in await StreamAdmin(nc).streams() if s.name == name][0]
    [rule] = check_change(before, before.with_changes(persist_mode="async"))
    assert (rule.field, rule.err_code) == ("persist_mode", 10052)
    with pytest.raises(Refusal) as refused:
        await StreamAdmin(nc).apply(name, persist_mode="async")
    assert refused.value.description == "stream configuration update can not change persist mode"


async def test_the_servers_refusal_comes_back_with_its_code_and_text(nc, make_stream):
    name, _ = await make_stream(persist_mode="async")
    current = [s for s in await StreamAdmin(nc).streams() if s.name == name][0]
    proposed = current.with_changes(allow_atomic=True)
    assert [v.err_code for v in check_settings(proposed)] == [10052]  # the client knew
    with pytest.raises(Refusal) as refused:  # and the server agrees
        await StreamAdmin(nc).apply(name, allow_atomic=True)
    assert refused.value.err_code == 10052
    assert refused.value.description == "async persist mode is not supported with atomic batch publish"


async def test_a_read_only_streams_page_refuses_an_apply_called_directly(nc, make_stream):
    from console.ui.streams import StreamsPage

    name, _ = await make_stream()
    page = StreamsPage(admin=StreamAdmin(nc, read_only=True))
    await page.reload()
    page.stream = name
    page.allow_batched = True
    assert "allow_batched" in page.review
    assert await page.apply() is None
    assert page.result == "read-only mode: stream.edit is refused"  # by the action layer, before the admin
    assert not (await nc.jetstream().stream_info(name)).config.allow_batched
