"""Every action in the registry, taken from the browser as a user takes it: each leaves exactly one
audit record, with the browser's user and the outcome; on a read-only console each one that changes
the server is either not offered at all (no route, no control, nothing a crafted client can show) or
refused when a crafted client clicks its hidden control, and audited as refused."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Callable

from playwright.sync_api import Page, expect

from console.actions import ACTIONS, message_action
from console.domain.messages import Ack
from console.ui.replay import ACK_LABELS
from tests.processes import CLI, nats_tool, probe
from tests.waits import poll_until
from tests.ui.test_audit_page import SHOW_HIDDEN, propose_batched_off

RULE = '[[rule]]\nname = "every action"\nwhen = "lost_batches"\nat_least = 1000000\nwithin = "5m"\n'
RECORD = re.compile(r"^\s*(\d+) \S+ \S+ (\S+) (\S+) (\S+) (.*)$")


def trail(nats_url: str, data_dir: str) -> list[tuple[str, str, str]]:
    """(user, action, the rest of the line: target, outcome, detail) of every audit record, from the CLI."""
    done = subprocess.run([CLI, "audit", "--server", nats_url, "--data-dir", data_dir], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [(m[2], m[4], m[5]) for line in done.stdout.splitlines() if (m := RECORD.match(line))]


def new_records(nats_url: str, data_dir: str, before: int, action: str) -> list[tuple[str, str, str]]:
    """The records added since `before`, once one is `action`'s (a download's is stored soon after it)."""
    def added() -> list[tuple[str, str, str]] | None:
        records = trail(nats_url, data_dir)[before:]
        return records if any(name == action for _, name, _ in records) else None

    return poll_until(added, 30, f"no record of {action}", every=0.25)


def edit_stream(page: Page, nats_url: str, web_url: str) -> str:
    propose_batched_off(page, nats_url, web_url, "XA_EDIT")
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_text("Applied to XA_EDIT.")).to_be_visible(timeout=15_000)
    return "XA_EDIT"


def run_probe(page: Page, nats_url: str, web_url: str) -> str:
    page.goto(web_url + "probe")
    page.get_by_label("stream (created allowing both kinds when missing)").fill("XA_PROBE")
    page.get_by_label("subject").fill("xa.probe")
    page.get_by_label("messages", exact=True).fill("3")
    page.get_by_role("button", name="Publish probe").click()
    expect(page.get_by_text("atomic probe on XA_PROBE")).to_be_visible(timeout=30_000)
    return "XA_PROBE atomic x3"


def open_consumer(page: Page, web_url: str) -> None:
    page.goto(web_url + "replay?stream=XA_REPLAY")
    consumer = page.get_by_label("consumer")
    expect(consumer).to_contain_text("ops (4 pending", timeout=30_000)
    consumer.select_option(index=1)


def fetch(page: Page, nats_url: str, web_url: str) -> str:
    open_consumer(page, web_url)
    page.get_by_label("max messages").fill("4")
    page.get_by_role("button", name="Fetch").click()
    expect(page.get_by_text("4 message(s)")).to_be_visible(timeout=15_000)
    return "XA_REPLAY/ops 4"


def answer(kind: Ack) -> Callable[[Page, str, str], str]:
    """The answer `kind` to the message of the fetch above whose card is the kind's place in Ack."""
    index = list(Ack).index(kind)

    def act(page: Page, nats_url: str, web_url: str) -> str:
        page.get_by_role("button", name=ACK_LABELS[kind], exact=True).nth(index).click()
        expect(page.get_by_text(f"{ACK_LABELS[kind]} confirmed by the server")).to_be_visible(timeout=15_000)
        return "XA_REPLAY/ops seq"

    return act


def save_rule(page: Page, nats_url: str, web_url: str) -> str:
    page.goto(web_url + "alerts")
    page.get_by_label("rule (TOML)").fill(RULE)
    page.get_by_role("button", name="Save rule").click()
    expect(page.get_by_text("Saved every action")).to_be_visible(timeout=15_000)
    return "every action"


def mute(muted: bool) -> Callable[[Page, str, str], str]:
    label = "Mute" if muted else "Unmute"

    def act(page: Page, nats_url: str, web_url: str) -> str:
        page.get_by_label("rule", exact=True).select_option("every action")
        page.get_by_role("button", name=label, exact=True).click()
        expect(page.get_by_text(f"every action {label.lower()}d.")).to_be_visible(timeout=15_000)
        return "every action"

    return act


def export_csv(page: Page, nats_url: str, web_url: str) -> str:
    page.goto(web_url + "history")
    with page.expect_download():
        page.get_by_role("button", name="Download CSV").click()
    return "abandoned_batches"


def export_report(page: Page, nats_url: str, web_url: str) -> str:
    batch = probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", "XA_INC",
                  "--subject", "xa.inc")["abandoned_batch"]
    page.goto(web_url)
    expect(page.get_by_text(batch)).to_be_visible(timeout=30_000)  # abandoned at the batch timeout, then on Live
    page.goto(web_url + f"incident?batch={batch}")
    download = page.get_by_role("button", name="Download report (Markdown)")
    expect(download).to_be_visible(timeout=30_000)
    with page.expect_download():
        download.click()
    return batch


def search_and_export(page: Page, nats_url: str, web_url: str) -> str:
    page.goto(web_url + "search?stream=XA_REPLAY&max_matches=2")
    expect(page.get_by_text("stopped at the limit max_matches")).to_be_visible(timeout=30_000)
    return "XA_REPLAY"


def export_search(page: Page, nats_url: str, web_url: str) -> str:
    page.get_by_label("format").select_option("parquet")
    with page.expect_download():
        page.get_by_role("button", name="Download matches").click()
    return "XA_REPLAY parquet 2 matches"


# In the order they run: the answers need the fetch before them, mute and unmute the saved rule.
IN_THE_BROWSER: dict[str, Callable[[Page, str, str], str]] = {
    "stream.edit": edit_stream, "probe.run": run_probe, "consumer.fetch": fetch,
    **{message_action(kind): answer(kind) for kind in Ack},
    "alert_rule.save": save_rule, "alert_rule.mute": mute(True), "alert_rule.unmute": mute(False),
    "export.csv": export_csv, "export.report": export_report,
    "search.run": search_and_export, "export.search": export_search,
}


def test_every_action_from_the_browser_leaves_one_record_with_its_user_and_outcome(console, data_dir, page):
    # Its streams sort after the other tests' (XA_): the Streams table draws only its first screen of rows
    assert set(IN_THE_BROWSER) == set(ACTIONS), "an action of the registry the browser test does not take"
    nats_url, web_url = console
    nats_tool("seed-replay", nats_url, "XA_REPLAY")
    rules = Path(data_dir) / "alert-rules.toml"
    kept = rules.read_text() if rules.exists() else None
    try:
        for action, take in IN_THE_BROWSER.items():
            before = len(trail(nats_url, data_dir))
            target = take(page, nats_url, web_url)
            added = new_records(nats_url, data_dir, before, action)
            assert [(user, name) for user, name, _ in added] == [("local", action)], added
            rest = added[0][2]
            assert rest.startswith(target) and " accepted" in rest, (action, rest)
    finally:
        if kept is None:
            rules.unlink(missing_ok=True)
        else:
            rules.write_text(kept)


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

    how = {"stream.edit": crafted_apply, "probe.run": no_probe_route, "consumer.fetch": no_durable_consumer,
           **{message_action(kind): no_durable_consumer for kind in Ack},
           "alert_rule.save": no_rule_controls, "alert_rule.mute": no_rule_controls,
           "alert_rule.unmute": no_rule_controls}
    changing = {name for name, action in ACTIONS.items() if action.changes_server}
    assert set(how) == changing, "an action that changes the server the read-only test does not try"
    for check in dict.fromkeys(how.values()):
        check()
