import re

from playwright.sync_api import expect

from tests.processes import probe


def test_a_settings_edit_round_trips_and_a_refusal_shows_the_servers_code_and_text(console, page, screenshots):
    nats_url, web_url = console
    probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--stream", "UI_EDIT", "--subject", "ui.edit")
    page.goto(web_url + "streams")
    expect(page.get_by_text("JetStream API level 5")).to_be_visible(timeout=30_000)
    limits = page.get_by_role("row").filter(has_text="batch timeout (idle between two messages)")
    expect(limits).to_contain_text("1.0 s", timeout=30_000)  # the test server's, read from its /varz
    expect(limits).to_contain_text("jetstream.limits.batch.timeout (one setting for both kinds)")
    page.get_by_label("stream").select_option("UI_EDIT")
    batched = page.get_by_role("checkbox", name="allow_batched")
    expect(batched).to_be_checked()  # the probe creates its stream allowing both kinds
    batched.uncheck()
    expect(page.get_by_text("allow_batched: True → False")).to_be_visible()
    expect(page.get_by_text("Switching allow_batched off drops every fast batch open on the stream")).to_be_visible()
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_text("Applied to UI_EDIT.")).to_be_visible(timeout=15_000)
    row = page.get_by_role("row").filter(has_text="UI_EDIT")
    expect(row).to_contain_text("2")  # the required API level is back to 2 (atomic only)

    page.get_by_label("persist_mode").select_option("async")  # the server never allows this on an update
    expect(page.get_by_text("stream configuration update can not change persist mode (server code 10052)")).to_be_visible()
    page.get_by_role("button", name="Apply").click()
    refusal = page.get_by_role("paragraph").filter(has_text="The server refused:")
    expect(refusal).to_contain_text("[10052]", timeout=15_000)  # the server names the first rule it checks
    expect(refusal).to_contain_text("persist mode")
    page.screenshot(path=screenshots / "streams.png", full_page=True)


def test_read_only_mode_shows_settings_but_offers_no_action(console, read_only_url, page):
    nats_url, _ = console
    probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--stream", "UI_RO", "--subject", "ui.ro")
    page.goto(read_only_url + "streams")
    expect(page.get_by_text("Read-only mode: settings are shown, not changed.")).to_be_visible(timeout=30_000)
    expect(page.get_by_role("row").filter(has_text="UI_RO")).to_be_visible()
    expect(page.get_by_role("button", name=re.compile("^(?!switch )"))).to_have_count(0)  # the header's switches only


def test_rows_that_reach_a_table_while_the_browser_rebuilds_it_are_drawn(console, page):
    """Panel's table ignores new data while it is being built; the page gives it them once built (a CI run saw a
    Streams page whose select listed every stream and whose table showed none)."""
    nats_url, web_url = console
    probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--stream", "UI_REBUILT", "--subject", "ui.rebuilt")
    page.goto(web_url + "streams")
    expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)
    # the page's own listing is in (its select's options come with its rows): no later one undoes the change below
    expect(page.get_by_label("stream").get_by_role("option", name="UI_REBUILT", exact=True)).to_have_count(1,
                                                                                                     timeout=30_000)
    expect(page.get_by_role("row").filter(has_text="BATCH_CONSOLE_EVENTS")).to_be_visible(timeout=30_000)
    page.evaluate("""() => {  // one task: the rebuild starts, the new rows arrive before it ends
      const views = [...Bokeh.index.roots].flatMap(root => [...root.owner.all_views()]);
      const table = views.find(v => v.model.constructor.__name__ === "DataTabulator");
      table.render();
      const source = table.model.source;
      source.data = {...source.data, name: source.data.name.map(n => n.replaceAll("BATCH_CONSOLE_", "REBUILT_"))};
    }""")
    expect(page.get_by_role("row").filter(has_text="REBUILT_EVENTS")).to_be_visible(timeout=15_000)
