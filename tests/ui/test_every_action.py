"""On a read-only console each action that changes the server is either not offered at all (no route,
no control, nothing a crafted client can show) or refused when a crafted client clicks its hidden
control, and audited as refused. Every action of the registry taken from the browser, each leaving
one audit record with its user and outcome, is tests/ui/test_teams.py (once per role)."""

from __future__ import annotations

import re
import subprocess

from playwright.sync_api import expect

from console.commands import ANSWERS
from console.commands import COMMANDS as ACTIONS
from console.domain.messages import Ack
from console.ui.replay import ACK_LABELS
from tests.processes import CLI, nats_tool, probe
from tests.waits import poll_until
from tests.ui.test_audit_page import SHOW_HIDDEN, propose_batched_off

RECORD = re.compile(r"^\s*(\d+) \S+ \S+ (\S+) (\S+) (\S+) (.*)$")


def trail(nats_url: str, data_dir: str) -> list[tuple[str, str, str]]:
    """(user, action, the rest of the line: target, outcome, detail) of every audit record that says how an
    attempt ended, from the CLI (each taken action's attempt, written ahead of it, left out)."""
    done = subprocess.run([CLI, "audit", "--server", nats_url, "--data-dir", data_dir], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [(m[2], m[4], m[5]) for line in done.stdout.splitlines()
            if (m := RECORD.match(line)) and not re.search(r" attempted( |$)", m[5])]


def new_records(nats_url: str, data_dir: str, before: int, action: str) -> list[tuple[str, str, str]]:
    """The records added since `before`, once one is `action`'s (a download's is stored soon after it)."""
    def added() -> list[tuple[str, str, str]] | None:
        records = trail(nats_url, data_dir)[before:]
        return records if any(name == action for _, name, _ in records) else None

    return poll_until(added, 30, f"no record of {action}", every=0.25)


def test_on_a_read_only_console_no_action_that_changes_the_server_can_be_taken(console, data_dir, read_only_url,
                                                                                  page):
    """Each is refused where a crafted client can still ask for it, and audited; elsewhere it is not
    there to ask for: no route, no control in the document, no durable consumer to fetch from."""
    nats_url, _ = console
    nats_tool("seed-replay", nats_url, "XA_RO")

    def crafted_apply() -> None:
        before = len(trail(nats_url, data_dir))
        propose_batched_off(page, nats_url, read_only_url, "XA_EDIT_RO")
        assert page.evaluate(SHOW_HIDDEN, "Apply")
        page.get_by_role("button", name="Apply").click()
        expect(page.get_by_text("read-only mode: stream.edit is refused")).to_be_visible(timeout=15_000)
        added = new_records(nats_url, data_dir, before, "stream.edit")
        assert [(u, a, "refused: read-only" in rest) for u, a, rest in added] == [("local", "stream.edit", True)]

    def no_probe_route() -> None:
        assert page.goto(read_only_url + "probe").status == 404

    def no_maintenance_route() -> None:
        assert page.goto(read_only_url + "maintenance").status == 404

    def no_durable_consumer() -> None:  # no fetch from `ops`, hence no message to ack, nak, term or extend
        page.goto(read_only_url + "replay?stream=XA_RO&consumer=ops")
        expect(page.get_by_label("consumer")).to_contain_text("peek")
        expect(page.get_by_label("consumer").locator("option")).to_have_count(1)
        page.get_by_role("button", name="Fetch").click()
        expect(page.get_by_text("4 message(s)")).to_be_visible(timeout=15_000)  # peeked: nothing delivered
        for label in ACK_LABELS.values():
            expect(page.get_by_role("button", name=label, exact=True)).to_have_count(0)
        assert nats_tool("ack-pending", nats_url, "XA_RO").strip() == "0"

    def no_rule_controls() -> None:
        page.goto(read_only_url + "alerts")
        expect(page.get_by_text("Firing now")).to_be_visible(timeout=15_000)
        for label in ("Save rule", "Mute", "Unmute"):
            assert not page.evaluate(SHOW_HIDDEN, label), f"{label} is in the read-only document"

    def buttons(path: str, heading: str) -> list[str]:
        page.goto(read_only_url + path)
        expect(page.get_by_role("heading", name=heading)).to_be_visible(timeout=15_000)
        expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)  # the live page, not its first copy
        expect(page.get_by_role("button", name="Dark")).to_be_visible(timeout=30_000)  # the frame's: drawn
        return sorted(page.get_by_role("button").all_inner_texts())

    def no_canary_control() -> None:  # started from the CLI or up, never a page: its buttons are the frame's
        assert buttons("canary", "Canary") == buttons("checks", "Checks")

    def no_consumer_controls() -> None:  # the Consumers page's form is not in the read-only document
        assert buttons("consumers", "Consumers") == buttons("checks", "Checks")

    def no_publish_controls() -> None:  # the stream page's publish form is not in the read-only document
        page.goto(read_only_url + "stream?name=XA_RO")
        expect(page.get_by_role("heading", name="Stream XA_RO")).to_be_visible(timeout=15_000)
        expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)
        for label in ("Publish", "Republish"):
            assert not page.evaluate(SHOW_HIDDEN, label), f"{label} is in the read-only document"

    def no_republish_control() -> None:  # nor the Incident view's republish of a lost batch's kept messages
        lost = probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "XA_RO_INC",
                     "--subject", "xa_ro_inc")["abandoned_batch"]
        found = page.get_by_text(f"atomic abandoned batch {lost}").first

        def shown() -> bool:  # abandoned after the batch timeout, then collected: opened again until it is there
            page.goto(read_only_url + f"incident?batch={lost}")
            try:
                expect(found).to_be_visible(timeout=3_000)
                return True
            except AssertionError:
                return False
        poll_until(shown, 90, f"the incident of {lost}")
        assert not page.evaluate(SHOW_HIDDEN, "Republish kept messages"), "in the read-only document"
        for label in ("Pause for", "Resume", "Reset to seq", "Unpin", "Delete"):
            assert not page.evaluate(SHOW_HIDDEN, label), f"{label} is in the read-only document"

    how = {"stream.edit": crafted_apply, "probe.run": no_probe_route, "consumer.fetch": no_durable_consumer,
           "canary.run": no_canary_control, "maintain.drain": no_maintenance_route,
           "maintain.restart": no_maintenance_route,
           **{ANSWERS[kind].name: no_durable_consumer for kind in Ack},
           "alert_rule.save": no_rule_controls, "alert_rule.mute": no_rule_controls,
           "alert_rule.unmute": no_rule_controls,
           **{name: no_consumer_controls for name in ("consumer.pause", "consumer.resume", "consumer.reset",
                                                       "consumer.unpin", "consumer.delete")},
           "message.publish": no_publish_controls, "message.republish": no_publish_controls,
           "batch.republish": no_republish_control}
    changing = {name for name, action in ACTIONS.items() if action.changes_server}
    assert set(how) == changing, "an action that changes the server the read-only test does not try"
    for check in dict.fromkeys(how.values()):
        check()
