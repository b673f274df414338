"""Roles for the callers that do not sign in: a notebook and the CLI act as the local role, and the
action layer refuses them what it does not allow; each role sees a stream's payloads as the roles file
says (a real server, a real search)."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest
from nats.js.api import StreamConfig

from console.commands import FetchMessages, RunProbe, RunSearch
from console.config import load
from console.probe import ProbeOptions
from console.errors import ConfigError, ForbiddenError
from console.runtime import Runtime
from console.domain.audit import NOTEBOOK
from console.domain.search import SearchQuery
from tests.processes import CLI

ROLES = """
[[role]]
name = "support"
actions = ["search.run"]
payloads = ["PAY_FULL"]
masked_payloads = ["PAY_MASKED"]
"""
MASK = '[[mask]]\nstreams = ["PAY_*"]\nfields = ["card"]\n'


@pytest.fixture(scope="module")
def nats_url(server):
    return server.url


@pytest.fixture
async def runtime(nats_url, tmp_path):
    (tmp_path / "roles.toml").write_text(ROLES)
    (tmp_path / "mask.toml").write_text(MASK)
    settings = load(environ={"BATCH_CONSOLE_SERVER": nats_url, "BATCH_CONSOLE_DATA_DIR": str(tmp_path),
                             "BATCH_CONSOLE_ROLES": str(tmp_path / "roles.toml"),
                             "BATCH_CONSOLE_MASK_RULES": str(tmp_path / "mask.toml"),
                             "BATCH_CONSOLE_LOCAL_ROLE": "support"})
    settings.keyed_event_log(make=True)
    async with await Runtime.open(settings) as opened:
        yield opened


async def test_a_notebook_acts_as_the_local_role_and_is_refused_what_it_does_not_allow(runtime):
    actions = runtime.actions(NOTEBOOK)
    with pytest.raises(ForbiddenError, match="the role support may not probe.run"):
        await actions.run(RunProbe(ProbeOptions(kind="atomic", stream="NB_PROBE", subject="nb.probe", count=2)))
    assert "NB_PROBE" not in [s.name for s in await runtime.admin.streams()]  # nothing was done


async def test_each_stream_s_payloads_are_shown_as_stored_masked_or_not_at_all(runtime):
    js = runtime.nc.jetstream()
    for name in ("PAY_FULL", "PAY_MASKED", "PAY_NONE"):
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
        await js.publish(f"{name.lower()}.x", b'{"card": "4111", "n": 1}')
    seen = {}
    for name in ("PAY_FULL", "PAY_MASKED", "PAY_NONE"):
        found, _ = await runtime.actions(NOTEBOOK).run(RunSearch(SearchQuery(name, max_seconds=10)))
        seen[name] = found[0].data
    assert seen == {"PAY_FULL": b'{"card": "4111", "n": 1}', "PAY_MASKED": b'{"card": "***", "n": 1}',
                    "PAY_NONE": b"(not shown to your role: 24 bytes)"}
    found, _ = await runtime.actions(NOTEBOOK).run(RunSearch(SearchQuery("PAY_NONE", where='text.contains("4111")',
                                                                         max_seconds=10)))
    assert found == []  # what may not be shown cannot be searched for


async def test_a_local_role_the_roles_file_does_not_define_stops_the_start(runtime):
    broken = Runtime(replace(runtime.settings, access=replace(runtime.settings.access, local_role="root")),
                     runtime.nc)
    with pytest.raises(ConfigError, match="the local role 'root' is not a role"):
        broken.roles


def test_the_cli_acts_as_the_local_role(nats_url, tmp_path):
    (tmp_path / "roles.toml").write_text(ROLES)
    done = subprocess.run([CLI, "probe", "atomic", "--server", nats_url, "--count", "2", "--stream", "CLI_ROLE",
                           "--roles", str(tmp_path / "roles.toml"), "--local-role", "support", "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "the role support may not probe.run" in done.stdout + done.stderr


async def test_the_roles_file_is_read_again_when_it_changes_and_a_broken_change_gives_no_one_a_role(runtime, tmp_path):
    """Before, the roles were read once: a group removed from the file kept its roles until a restart."""
    import os

    roles_file = tmp_path / "roles.toml"
    roles_file.write_text(ROLES + '\n[[group]]\nname = "ops"\nroles = ["operator"]\n')
    signed_in = runtime.actions(NOTEBOOK, lambda: runtime.roles.for_groups(("ops",)))  # as the web gives a session
    assert signed_in.allowed(FetchMessages, "ORDERS") is None
    roles_file.write_text(ROLES)  # the group removed
    os.utime(roles_file, (1, 1))  # a change within the same second, the same size or not
    assert signed_in.allowed(FetchMessages, "ORDERS") is not None  # at once, the same session
    roles_file.write_text(ROLES + '\n[[group]]\nname = "ops"\nroles = ["operator"]\n' + "[[role]\n")  # broken
    assert signed_in.allowed(FetchMessages, "ORDERS") is not None
    assert runtime.actions(NOTEBOOK).allowed(RunSearch, "PAY_FULL") is not None  # no one, the local role too


async def test_a_replay_answer_for_a_stream_the_page_has_left_is_dropped_not_shown_at_the_new_streams_level(runtime):
    """The role sees PAY_FULL's payloads in full and none of PAY_RACE's: before, PAY_RACE's messages that
    arrived after the user picked PAY_FULL were shown at PAY_FULL's level, in full."""
    import asyncio

    from console.pages import replay

    js = runtime.nc.jetstream()
    for name in ("PAY_FULL", "PAY_RACE"):
        try:
            await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
        except Exception:
            pass  # made by an earlier test of this module's server
    await js.publish("pay_race.x", b'{"card": "4111-RACE"}')
    page = replay(runtime, runtime.actions(NOTEBOOK), stream="PAY_RACE", expires=2.0, max_messages=50)
    fetching = asyncio.ensure_future(page.fetch())  # waits its expiry for messages PAY_RACE does not have
    while page.status != "Fetching…":
        await asyncio.sleep(0.01)
    page.stream = "PAY_FULL"
    assert await fetching is None
    assert "after another stream was picked" in page.status
    assert not any(b"4111-RACE" in m.payload for m in page.messages)
    page.stream = "PAY_RACE"
    await page.fetch()
    assert page.messages and all(b"4111-RACE" not in m.payload for m in page.messages)  # its own level: none
    await page.close()


async def test_replay_says_up_front_who_may_not_fetch_keeps_unanswered_cards_on_next_and_counts_after_an_ack(runtime):
    """Before: Fetch stayed on for a role that may not fetch (refused after the click), Next replaced the
    cards still awaiting an answer, and after an Ack the top line still counted the acked message."""
    from nats.js.api import AckPolicy, ConsumerConfig

    from console.domain.messages import Ack
    from console.pages import replay

    js = runtime.nc.jetstream()
    await js.add_stream(StreamConfig(name="NB_NEXT", subjects=["nb_next.>"]))
    for i in range(4):
        await js.publish("nb_next.x", b"%d" % i)
    await js.add_consumer("NB_NEXT", ConsumerConfig(durable_name="ops", ack_policy=AckPolicy.EXPLICIT, ack_wait=60))

    viewer = replay(runtime, runtime.actions(NOTEBOOK, runtime.roles.grants("viewer")), stream="NB_NEXT")
    await viewer.reload()
    viewer.consumer = "ops"
    assert "Not for you" in viewer._not_for_you.object and all(b.disabled for b in viewer._fetching)
    viewer.consumer = ""  # a peek is anyone's
    assert viewer._not_for_you.object == "" and not any(b.disabled for b in viewer._fetching)

    page = replay(runtime, runtime.actions(NOTEBOOK, runtime.roles.grants("operator")), stream="NB_NEXT")
    await page.reload()
    page.consumer = "ops"
    await page.next()
    await page.next()
    assert [m.payload for m in page.messages] == [b"0", b"1"]  # the first card stays: it awaits its answer
    done, _ = await page.act(Ack.ACK, page.messages[0])
    assert done and "1 awaiting ack" in page.status, page.status
    await page.next()
    assert [m.payload for m in page.messages] == [b"1", b"2"]
    await page.close()


async def test_the_alerts_page_holds_no_writer_of_the_rules_whoever_reads_it(runtime):
    """A page changes the rules only through the actions: the view it is given reads and asks, and has
    none of the alerts view's writers (an admin's no more than a team's)."""
    from console import pages
    from console.domain.audit import Actor

    page = pages.alerts(runtime, runtime.actions(Actor("ops")))
    assert not any(hasattr(page.view, name) for name in ("write_rule", "write_muted", "_write"))
    rules, _ = page.view.rules()
    assert isinstance(rules, list) and page.view.several is False
    from console.alerting.view import AlertsAcross

    assert pages._alerts(AlertsAcross({"a": runtime.alerts, "b": runtime.alerts}), page.actions).several is True
    with pytest.raises(ForbiddenError):  # support may not save a rule: refused by the actions, nothing written
        await page.view.save_rule('[[rule]]\nname = "x"\nwhen = "lost_batches"\n', page.actions)


async def test_pages_hold_stream_reads_alone_and_an_answer_acks_only_the_consumer_it_names(runtime):
    """Replay and Streams are given the streams' reads, never the StreamAdmin: a durable fetch and an ack
    are commands. An ack whose message's ack subject names another stream or consumer than the one asked
    for (and recorded, and checked against the role) is refused, the other consumer's message untouched."""
    from nats.js.api import AckPolicy, ConsumerConfig

    from console import pages
    from console.commands import AckMessage
    from console.domain.audit import Actor
    from console.errors import ConsoleError

    admin_actions = runtime.actions(Actor("ops"), runtime.roles.grants("admin"))
    for page in (pages.replay(runtime, admin_actions), pages.streams(runtime, admin_actions)):
        assert not any(hasattr(page.admin, name) for name in ("update", "update_stream", "reader", "step_down", "nc")), \
            type(page.admin)
    js = runtime.nc.jetstream()
    for name in ("ACK_MINE", "ACK_OTHER"):
        await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
        await js.publish(f"{name.lower()}.x", b"m")
        await js.add_consumer(name, ConsumerConfig(durable_name="ops", ack_policy=AckPolicy.EXPLICIT, ack_wait=60))
    fetched = await admin_actions.run(FetchMessages("ACK_OTHER", "ops", 1, None, 1.0))
    [other] = fetched.messages
    for stream, consumer in (("ACK_MINE", "ops"), ("ACK_OTHER", "someone"), ("ACK_MINE", "ops\r\nPUB x 1")):
        with pytest.raises(ConsoleError, match="was delivered by ACK_OTHER/ops|not a valid"):
            await admin_actions.run(AckMessage(other, stream, consumer))
    forged = replace(other, ack_subject="$JS.ACK.ACK_MINE.ops.x.1.1.0.0")  # not a number where one is
    with pytest.raises(ConsoleError, match="not a JetStream one"):
        await admin_actions.run(AckMessage(forged, "ACK_MINE", "ops"))
    assert (await js.consumer_info("ACK_OTHER", "ops")).num_ack_pending == 1  # untouched
    await admin_actions.run(AckMessage(other, "ACK_OTHER", "ops"))
    assert (await js.consumer_info("ACK_OTHER", "ops")).num_ack_pending == 0
