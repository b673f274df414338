"""The alerts service on real abandonments: a real HTTP receiver and a NATS subscriber get the firing
and then the resolved notice, a restart does not fire again, metrics count, a receiver that is down
gets retries."""

import asyncio
import json
from datetime import datetime, timezone

import nats
import pytest
from nats.js.api import StreamConfig

from console.alerting import notify
from console.alerting.metrics import Metrics
from console.alerting.service import AlertService
from console.broker.atomic import AtomicBatch
from console.collector.collector import Collector
from console.config import CollectorSettings, EventLogSettings
from console.domain.alert_rules import parse_rules
from console.domain.alerting import Notice
from console.domain.notify_targets import NotifyTargets
from console.errors import BatchError
from console.storage.alert_state import AlertStore
from tests.conftest import TEST_LIMITS
from tests.processes import Receiver, free_port
from tests.waits import wait_until


def rules(url: str) -> str:
    return f"""
[[rule]]
name = "alerts abandoned"
when = "lost_batches"
streams = ["ALERTS"]
at_least = 2
within = "3s"
severity = "critical"
notify = ["webhook:{url}", "nats:alerts.test"]
remedy = "look at the publisher"
"""


@pytest.fixture
async def stack(server, tmp_path):
    conn = await nats.connect(server.url)
    await conn.jetstream().add_stream(StreamConfig(name="ALERTS", subjects=["alerts_s.>"], allow_atomic=True))
    collector = Collector(conn, CollectorSettings(batch_timeout=TEST_LIMITS.timeout, tick_every=0.1, status_every=0.5))
    await collector.start()
    yield conn
    await collector.stop()
    await conn.close()


async def abandon(conn, batch_id: str) -> None:
    batch = AtomicBatch(conn, batch_id=batch_id)
    await batch.add("alerts_s.x", b"1")
    batch.skip_seq()
    with pytest.raises(BatchError):
        await batch.commit("alerts_s.x", b"3")


ALLOWED = NotifyTargets(webhook_hosts=("127.0.0.1",), nats_prefixes=("alerts",))


async def start(conn, text: str, store, metrics=None, targets: NotifyTargets = ALLOWED):
    service = AlertService(conn, EventLogSettings(), parse_rules(text, targets), store, "http://console:8050", metrics,
                           targets=targets)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    await wait_until(lambda: service.caught_up, timeout=15, what="the service caught up")
    return service, stop, task


async def test_firing_then_resolved_reach_a_webhook_and_a_subject_and_a_restart_fires_nothing_again(stack, tmp_path):
    receiver = Receiver()
    heard: list[dict] = []

    async def on_alert(msg):
        heard.append(json.loads(msg.data))
    sub = await stack.subscribe("alerts.test", cb=on_alert)
    metrics = Metrics()
    db = tmp_path / "console.db"
    service, stop, task = await start(stack, rules(receiver.url), AlertStore(db), metrics)
    try:
        await abandon(stack, "al-1")
        await abandon(stack, "al-2")
        await wait_until(lambda: receiver.bodies and heard, timeout=15, what="the firing notice")
        firing = receiver.bodies[0]
        assert (firing["rule"], firing["status"], firing["stream"], firing["count"]) == (
            "alerts abandoned", "firing", "ALERTS", 2)
        assert sorted(firing["batch_ids"]) == ["al-1", "al-2"] and firing["reasons"] == ["incomplete"]
        assert firing["link"] == "http://console:8050/incident?batch=al-2" and "look at the publisher" in firing["text"]
        assert heard[0] == firing
        scraped = metrics.render().decode()
        assert 'batch_console_lost_batches_total{stream="ALERTS",kind="atomic",reason="incomplete"} 2.0' in scraped
        assert 'batch_console_alerts_firing{rule="alerts abandoned",severity="critical"} 1.0' in scraped

        stop.set()  # a restart while it fires: the new process knows it already did
        await task
        service, stop, task = await start(stack, rules(receiver.url), AlertStore(db))  # what a new process opens
        assert service.tick(datetime.now(timezone.utc)) == []
        await wait_until(lambda: len(receiver.bodies) >= 2, timeout=15, what="the resolved notice")
        assert [b["status"] for b in receiver.bodies] == ["firing", "resolved"]
        await wait_until(lambda: len(heard) >= 2, timeout=15, what="the resolved notice on NATS")
    finally:
        stop.set()
        await task
        await sub.unsubscribe()
        receiver.close()


async def test_a_receiver_that_is_down_gets_retries_and_each_attempt_is_kept(stack, tmp_path, monkeypatch):
    monkeypatch.setattr(notify, "BACKOFF", (0.05, 0.05))
    down = f"http://127.0.0.1:{free_port()}/hook"
    db = tmp_path / "console.db"
    service, stop, task = await start(stack, rules(down).replace('"alerts abandoned"', '"down"'), AlertStore(db))
    try:
        await abandon(stack, "dn-1")
        await abandon(stack, "dn-2")
        await wait_until(lambda: len([a for a in service.notifier.attempts if a.target.startswith("webhook")]) >= 3,
                         timeout=15, what="three attempts")
        failed = [a for a in service.notifier.attempts if a.target.startswith("webhook")]
        assert not any(a.ok for a in failed) and "Connection refused" in failed[0].answer
        # what the page reads: each attempt is stored after it is made (a loaded machine stores the third a moment later)
        await wait_until(lambda: len([d for d in AlertStore(db).deliveries() if d["target"].startswith("webhook")]) >= 3,
                         timeout=15, what="three attempts stored")
        kept = [d for d in AlertStore(db).deliveries() if d["target"].startswith("webhook")]
        assert len(kept) >= 3 and not any(d["ok"] for d in kept) and "Connection refused" in kept[0]["answer"]
    finally:
        stop.set()
        await task


async def test_a_redirect_is_not_followed_and_a_target_the_settings_refuse_gets_nothing(stack, tmp_path):
    """A receiver answering 301 gets one POST and the host it points to nothing; a rule read under wider
    settings than the sender's (a file edited by hand) sends nothing where the sender's do not allow."""
    target = Receiver()
    redirecting = Receiver(redirect_to=target.url)
    heard: list[bytes] = []

    async def on_message(msg):
        heard.append(msg.data)
    sub = await stack.subscribe("$JS.API.STREAM.PURGE.ALERTS", cb=on_message)
    service, stop, task = await start(stack, rules(redirecting.url), AlertStore(tmp_path / "console.db"))
    try:
        await abandon(stack, "rd-1")
        await abandon(stack, "rd-2")
        await wait_until(lambda: any(a.target.startswith("webhook") for a in service.notifier.attempts), timeout=15,
                         what="an attempt to the redirecting receiver")
        await stack.flush()
        [attempt] = [a for a in service.notifier.attempts if a.target.startswith("webhook")]
        assert not attempt.ok and attempt.answer == "HTTP 301: a redirect, not followed"
        assert redirecting.methods == ["POST"] and target.methods == []

        # The sender's own settings allow no webhook: the rules were read under wider ones.
        service.notifier.targets = NotifyTargets(nats_prefixes=("alerts",))
        refused = Notice(rule="x", status="firing", severity="critical", stream="ALERTS", count=1, reasons=(),
                         batch_ids=(), since=datetime.now(timezone.utc),
                         notify=(f"webhook:{redirecting.url}", "nats:$JS.API.STREAM.PURGE.ALERTS"))
        await service.notifier.send(refused)
        await stack.flush()
        answers = [a.answer for a in service.notifier.attempts if a.rule == "x"]
        assert len(answers) == 2 and all(a.startswith("refused: ") for a in answers), answers
        assert redirecting.methods == ["POST"] and not heard
    finally:
        stop.set()
        await task
        await sub.unsubscribe()
        redirecting.close()
        target.close()


async def test_a_mute_from_the_alerts_page_holds_at_once_on_a_console_without_a_rules_file(stack, tmp_path):
    """Before, the alerts part watched the shipped rules file it started with; the page's first mute wrote
    DATA_DIR/alert-rules.toml, which it never read until a restart."""
    from console.actions import Actions
    from console.alerting.rules_file import load_rules, rules_path
    from console.alerting.view import AlertsView
    from console.commands import Services
    from console.domain.audit import Actor

    store = AlertStore(tmp_path / "console.db")
    service = AlertService(stack, EventLogSettings(), load_rules(None), store,
                           rules_file=lambda: rules_path(None, tmp_path))
    view = AlertsView(tmp_path, None, tmp_path / "console.db")
    view.actions = Actions(None, Actor("t"), trail_required=False, services=Services(rules=lambda: view))
    name = service.evaluator.rules[0].name
    await view.set_muted(name, True)
    assert (tmp_path / "alert-rules.toml").exists()
    service.tick(datetime.now(timezone.utc))
    assert [r.muted for r in service.evaluator.rules if r.name == name] == [True]
    await view.set_muted(name, False)
    service.tick(datetime.now(timezone.utc))
    assert [r.muted for r in service.evaluator.rules if r.name == name] == [False]
