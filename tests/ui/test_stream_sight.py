"""One rule for every face: a role limited to some streams is shown nothing of another stream. A web
console whose local user holds only `team-viewer` (SIGHT_TEAM* streams) beside the shared admin one,
over the same server, event log and audit trail: the other stream's name, losses, settings, findings
and audit records are absent from every page at 1280 px and from the API, where the admin's console
shows them (the same data, so an absence is the rule's, not an empty page's)."""

from __future__ import annotations

import re
import subprocess

import httpx
import pytest
from playwright.sync_api import expect

from tests.processes import CLI, free_port, probe, wait_http
from tests.ui.reading import page_text
from tests.waits import poll_until

ROLES = """
[[role]]
name = "team-viewer"
actions = ["search.run", "export.*"]
streams = ["SIGHT_TEAM*"]
"""
TEAM, OTHER = "SIGHT_TEAM", "SIGHT_OTHER"
PAGES = ("", "streams", "checks", "history", "audit", "alerts", "budgets", "conformance")


@pytest.fixture(scope="module")
def team_console(console, data_dir, tmp_path_factory):
    """(the team viewer's web URL, its API token, the admin's web URL, {stream: its abandoned batch})."""
    nats_url, admin_url = console
    tmp = tmp_path_factory.mktemp("sight")
    roles = tmp / "roles.toml"
    roles.write_text(ROLES)
    batches = {stream: probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--abandon", "--stream", stream,
                             "--subject", stream.lower())["abandoned_batch"] for stream in (TEAM, OTHER)}
    for stream in (TEAM, OTHER):  # an audit record on each: what someone searched for there
        done = subprocess.run([CLI, "search", stream, "--server", nats_url, "--data-dir", data_dir,
                               "--max-scanned", "1", "--format", "jsonl"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    token = subprocess.run([CLI, "token", "create", "--name", "sight-bot", "--role", "team-viewer", "--roles",
                            str(roles), "--data-dir", data_dir], capture_output=True, text=True, timeout=60)
    assert token.returncode == 0, token.stderr
    port = free_port()
    log = tmp / "web.log"
    web = subprocess.Popen([CLI, "serve", "--server", nats_url, "--port", str(port), "--data-dir", data_dir,
                            "--roles", str(roles), "--local-role", "team-viewer"],
                           stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/", web, log)
        yield f"http://127.0.0.1:{port}/", token.stdout.split()[-1], admin_url, batches, (nats_url, data_dir, roles)
    finally:
        web.terminate()
        web.wait(timeout=20)


def shown(page, url: str, wait_for: str | None) -> str:
    page.goto(url)
    expect(page.get_by_text("NATS connected", exact=True)).to_be_visible(timeout=30_000)
    expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)
    if wait_for is not None:
        expect(page.get_by_text(wait_for).first).to_be_visible(timeout=60_000)
    page.wait_for_load_state("networkidle")
    return page_text(page)


def test_a_team_role_sees_its_streams_alone_on_every_page(team_console, browser):
    team_url, _, admin_url, batches, _ = team_console
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    # the admin's console shows both streams: the data is there
    assert OTHER in shown(page, admin_url, batches[OTHER]) and TEAM in shown(page, admin_url + "audit", OTHER)
    for path in PAGES:
        wait_for = {"": batches[TEAM], "streams": TEAM, "audit": TEAM}.get(path)
        body = shown(page, team_url + path, wait_for)
        assert OTHER not in body and batches[OTHER] not in body, path
    body = shown(page, team_url + f"stream?name={OTHER}", None)  # its own page: as a stream that does not exist
    poll_until(lambda: "stream not found" in page_text(page), 30, "the other stream's page said more")
    assert f"Stream {OTHER}" in body and "allow_atomic" not in page_text(page)
    page.goto(team_url + f"incident?batch={batches[OTHER]}")  # its batch: as if there were none
    expect(page.get_by_text(re.compile("^No lost batch")).first).to_be_visible(timeout=30_000)
    assert OTHER not in page_text(page)


def test_a_team_token_reads_its_streams_alone_through_the_api(team_console):
    team_url, token, _, batches, _ = team_console
    api = httpx.Client(base_url=team_url + "api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    records = api.get("/audit").json()["records"]
    assert any(r["target"].startswith(TEAM) for r in records), records
    assert not any(OTHER in r["target"] or OTHER in r["detail"] for r in records), records
    exported = api.get("/exports/audit", params={"format": "jsonl"})
    assert exported.status_code == 200 and TEAM in exported.text and OTHER not in exported.text
    assert {s["name"] for s in api.get("/streams").json()} & {TEAM, OTHER} == {TEAM}
    assert OTHER not in api.get("/losses").text and batches[TEAM] in api.get("/losses").text


def test_the_cli_as_a_team_role_lists_its_streams_audit_records_alone(team_console):
    nats_url, data_dir, roles = team_console[-1]

    def audit(*role: str) -> subprocess.CompletedProcess:
        return subprocess.run([CLI, "audit", "--server", nats_url, "--data-dir", data_dir, "--roles", str(roles), *role],
                              capture_output=True, text=True, timeout=120)

    team, admin = audit("--local-role", "team-viewer"), audit()
    assert team.returncode == admin.returncode == 0, team.stderr
    assert f"search.run {OTHER}" in admin.stdout and f"search.run {TEAM}" in admin.stdout
    assert f"search.run {TEAM}" in team.stdout and OTHER not in team.stdout
    assert "chain intact" in team.stderr  # the verdict is the whole trail's


def test_a_notebook_as_a_team_role_reads_its_streams_alone(team_console, monkeypatch):
    """The notebook's reads (losses, a batch's incident, the streams, History's queries) through the same
    rule, beside a notebook of the admin over the same server and data (which reads both)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from console.config import AccessSettings, env_name
    from console.widgets import NotebookConsole

    batches = team_console[3]
    nats_url, data_dir, roles = team_console[-1]
    monkeypatch.setenv(env_name(AccessSettings, "roles"), str(roles))

    async def read(role: str) -> dict:
        monkeypatch.setenv(env_name(AccessSettings, "local_role"), role)
        console = await NotebookConsole.connect(nats_url, data_dir=data_dir)
        try:
            await console.caught_up()
            return {"lost": {b.stream for b in console.lost_batches(1000)},
                    "incident": {s: await console.find_incident(batches[s]) is not None for s in (TEAM, OTHER)},
                    "streams": {s.name for s in await console.admin.streams()} & {TEAM, OTHER},
                    "other stream": await _refused(console.admin.stream(OTHER))}
        finally:
            await console.close()

    with ThreadPoolExecutor(1) as aside:  # the module's browser keeps an event loop running in this thread
        admin = aside.submit(asyncio.run, read("admin")).result()
        team = aside.submit(asyncio.run, read("team-viewer")).result()
    assert admin["lost"] >= {TEAM, OTHER} and admin["incident"] == {TEAM: True, OTHER: True}, admin
    assert admin["streams"] == {TEAM, OTHER} and admin["other stream"] is None
    assert OTHER not in team["lost"] and TEAM in team["lost"], team
    assert team["incident"] == {TEAM: True, OTHER: False} and team["streams"] == {TEAM}
    assert team["other stream"] == "stream not found: " + OTHER


async def _refused(read) -> str | None:
    try:
        await read
    except Exception as e:  # noqa: BLE001 - what the notebook's user is told
        return str(e)
    return None
