"""The Budgets page in Chromium at 1280 px, over a real SQLite file holding three days of counts as the
analytics job writes them (tests/analytics/test_budgets.py runs the job itself) and a lost batch: an
objective burning on the workbook's paging pair says so and lists the loss that spent it, linked to its
incident; one within its budget says so; an objective's name is shown as text; a hostile ?objective=
leaves the page up; without an objectives file the page says how to give one."""

from __future__ import annotations

import re
import subprocess
from datetime import datetime, timedelta, timezone

import httpx
import pytest
from playwright.sync_api import expect
from sqlmodel import Session

from console.broker.server import EmbeddedServer
from console.storage import sqlite
from console.storage.budgets import replace_counts
from console.storage.tables import AbandonedBatch
from tests.api_console import token
from tests.processes import CLI, free_port, wait_http

OBJECTIVES = '''
[[objective]]
name = "orders"
streams = ["ORDERS"]
lost_messages_per_million = 10

[[objective]]
name = "<b>payments</b>"
streams = ["PAYMENTS"]
lost_messages_per_million = 10
lost_batches_per_thousand = 1
'''


def seed(db, now: datetime) -> None:
    engine = sqlite.open_db(db)
    start = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0) - timedelta(days=3)
    rows = []
    # to now's bucket and the one after it: a live job writes each bucket as it begins, so the 5-minute
    # window is never empty; without the next one, a test that ran past a 5-minute mark found it empty
    for i in range(3 * 288 + 2):
        bucket = start + timedelta(minutes=5 * i)
        recent = bucket > now - timedelta(hours=2)
        rows.append({"bucket": bucket, "stream": "ORDERS", "publisher": "", "stored": 100_000, "fast_stored": 0,
                     "lost_messages": 20 if recent else 0, "batches": 0, "lost_batches": 0, "atomic_uncounted": 0})
        rows.append({"bucket": bucket, "stream": "PAYMENTS", "publisher": "", "stored": 100_000, "fast_stored": 0,
                     "lost_messages": 0, "batches": 50, "lost_batches": 0, "atomic_uncounted": 0})
    with Session(engine) as session:
        replace_counts(session, [(start, now + timedelta(days=1))], rows)
        session.add(AbandonedBatch(event_id="e1", time=now - timedelta(minutes=30), stream="ORDERS",
                                   batch_id="spent-it", kind="fast", reason="gap", publisher="order-svc (python 2.7), user a",
                                   log_seq=1, leader_elections=0, stream_updates=0, other_abandonments=0, gaps_nearby=1))
        session.commit()


TOKENS: dict[str, str] = {}


@pytest.fixture(scope="module")
def budgets_web(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("budgets")
    (tmp / "objectives.toml").write_text(OBJECTIVES)
    (tmp / "roles.toml").write_text('[[role]]\nname = "payments-team"\nactions = []\nstreams = ["PAY*"]\n')
    seed(tmp / "console.db", datetime.now(timezone.utc))
    for role in ("admin", "payments-team"):
        TOKENS[role] = token(tmp, tmp / "roles.toml", "create", "--name", f"{role}-bot", "--role", role)
    with EmbeddedServer(tmp / "nats") as server:
        webs, urls = [], []
        try:
            for name, extra in (("with", ["--objectives", str(tmp / "objectives.toml"), "--roles",
                                          str(tmp / "roles.toml")]), ("without", [])):
                port = free_port()
                log = tmp / f"web-{name}.log"
                webs.append(subprocess.Popen([CLI, "serve", "--server", server.url, "--port", str(port), "--data-dir",
                                              str(tmp), *extra], stdout=open(log, "w"), stderr=subprocess.STDOUT))
                urls.append(f"http://127.0.0.1:{port}/")
                wait_http(urls[-1], webs[-1], log)
            yield tuple(urls)
        finally:
            for web in webs:
                web.terminate()
                web.wait(timeout=20)


def test_a_burning_objective_says_so_and_lists_what_spent_it(budgets_web, page, screenshots):
    url, _ = budgets_web
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(url + "budgets")
    rows = page.get_by_role("row")
    expect(rows.filter(has_text="orders").first).to_contain_text(
        "burning 20.0x over 1h and 5m (page)", timeout=30_000)
    expect(rows.filter(has_text="<b>payments</b>").first).to_contain_text("within")  # shown as text, not bold
    expect(page.locator("b", has_text="payments")).to_have_count(0)
    expect(page.get_by_text("What spent the budget of orders")).to_be_visible()
    loss = rows.filter(has_text="spent-it")
    expect(loss).to_contain_text("order-svc (python 2.7)")
    expect(loss.get_by_role("link", name="investigate")).to_have_attribute("href", "/incident?batch=spent-it")
    expect(page.locator("canvas").first).to_be_visible()  # the budget spent, drawn
    page.screenshot(path=screenshots / "budgets.png", full_page=True)


@pytest.mark.parametrize("objective", ["<script>alert(1)</script>", "x" * 300, "a\x07b", "orders\u202e"])
def test_a_hostile_objective_in_the_url_leaves_the_page_up(budgets_web, page, objective):
    url, _ = budgets_web
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(url + "budgets?objective=" + objective.replace("\x07", "%07"))
    expect(page.get_by_role("row").filter(has_text="orders").first).to_be_visible(timeout=30_000)
    assert dialogs == []


def test_without_objectives_the_page_says_how_to_give_them(budgets_web, page):
    _, without = budgets_web
    page.goto(without + "budgets")
    expect(page.get_by_text("No loss objectives")).to_be_visible(timeout=30_000)
    expect(page.get_by_text("lost_messages_per_million = 10")).to_be_visible()
    drawn = """() => { let n = 0; const walk = (root) => { for (const c of root.querySelectorAll('canvas'))
        if (c.getBoundingClientRect().height > 0) n++; for (const el of root.querySelectorAll('*'))
        if (el.shadowRoot) walk(el.shadowRoot); }; walk(document); return n; }"""
    page.wait_for_load_state("networkidle")
    assert page.evaluate(drawn) == 0  # no empty plot frame beside the words


def test_the_api_says_what_the_page_says_to_each_role_and_refuses_what_it_must(budgets_web):
    url, _ = budgets_web

    def get(path: str, role: str = "admin") -> httpx.Response:
        return httpx.get(url + "api/v1" + path, headers={"Authorization": f"Bearer {TOKENS[role]}"}, timeout=30)

    found = {(b["objective"], b["measure"]): b for b in get("/budgets").json()}
    orders = found[("orders", "messages")]
    # 24 recent buckets of 20 lost and 100,000 stored, and the next one once the clock has reached it
    assert (orders["lost"], orders["total"]) in ((480, 86_500_480), (500, 86_600_500)), orders
    assert orders["state"].startswith("burning 20.0x")
    assert abs(orders["spent"] - orders["lost"] / (1e-5 * orders["total"])) < 1e-9  # of the totals it gave
    assert orders["burn_rates"]["1h"] > 14.4
    [spent_it] = get("/budgets/orders/losses").json()
    assert spent_it["batch_id"] == "spent-it" and spent_it["publisher"].startswith("order-svc")
    assert {b["objective"] for b in get("/budgets", "payments-team").json()} == {"<b>payments</b>"}
    assert get("/budgets/orders/losses", "payments-team").status_code == 404  # another team's: as if none
    assert get("/budgets/nothing-of-that-name/losses").status_code == 404
    assert get("/budgets/" + "x" * 101 + "/losses").status_code == 422
    assert get("/budgets/a%07b/losses").status_code == 422
    assert httpx.get(url + "api/v1/budgets", timeout=30).status_code == 401


def test_an_edited_objectives_file_holds_without_a_restart_and_a_broken_edit_keeps_the_one_before(
        budgets_web, page, tmp_path_factory):
    url, _ = budgets_web
    path = next(p for p in tmp_path_factory.getbasetemp().glob("budgets*/objectives.toml"))
    rows = page.get_by_role("row")
    try:
        path.write_text(OBJECTIVES + '\n[[objective]]\nname = "added-later"\nstreams = ["ORDERS"]\n'
                                     'lost_batches_per_thousand = 5\n')
        page.goto(url + "budgets")
        expect(rows.filter(has_text="added-later").first).to_be_visible(timeout=30_000)  # no restart
        path.write_text(OBJECTIVES + '\n[[objective]]\nname = "broken"\nstreams = ["ORDERS"]\n'
                                     'lost_batches_per_thousand = 5\nwindow = "forever"\n')
        page.goto(url + "budgets")
        expect(page.get_by_text("are kept until it is mended")).to_be_visible(timeout=30_000)
        expect(page.get_by_text(re.compile(r"line \d+"))).to_be_visible()  # the error, with its line
        expect(rows.filter(has_text="added-later").first).to_be_visible()  # what worked is kept
        expect(rows.filter(has_text="broken")).to_have_count(0)
    finally:
        path.write_text(OBJECTIVES)
    page.goto(url + "budgets")
    expect(rows.filter(has_text="added-later")).to_have_count(0, timeout=30_000)
    expect(page.get_by_text("are kept until it is mended")).to_have_count(0)
