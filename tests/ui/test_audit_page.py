"""The audit trail in the browser: an edit made on a page is on the Audit page with who made it and what
changed (every action and every read-only refusal: test_every_action.py)."""

from playwright.sync_api import expect

from tests.processes import probe

# What a crafted client can do: the document's models are its own, so it shows a control the server
# hid and clicks it; the click travels over the websocket like any other.
SHOW_HIDDEN = """label => {
  for (const doc of Bokeh.documents) {
    for (const model of doc.all_models) {
      if (model.label === label) { model.visible = true; return true; }
    }
  }
  return false;
}"""


def propose_batched_off(page, nats_url: str, web_url: str, stream: str) -> None:
    """A stream of the probe's (both kinds allowed) picked on the Streams page, allow_batched unticked."""
    probe(nats_url, "atomic", "--count", "2", "--batch-size", "2", "--stream", stream, "--subject", stream.lower())
    page.goto(web_url + "streams")
    expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)  # the live page, not its inert first copy
    # the listing has reached the page: an option of the select (a row may be outside the table's drawn window)
    expect(page.get_by_label("stream").get_by_role("option", name=stream, exact=True)).to_have_count(1, timeout=30_000)
    page.get_by_label("stream").select_option(stream)
    batched = page.get_by_role("checkbox", name="allow_batched")
    expect(batched).to_be_checked()  # the form is filled from the server first
    batched.uncheck()
    expect(page.get_by_text("allow_batched: True → False")).to_be_visible(timeout=30_000)  # Apply has moved down


def test_an_edit_from_the_browser_is_on_the_audit_page_with_its_user_and_change(console, page):
    nats_url, web_url = console
    propose_batched_off(page, nats_url, web_url, "UI_AUDIT")
    page.get_by_role("button", name="Apply").click()
    expect(page.get_by_text("Applied to UI_AUDIT.")).to_be_visible(timeout=15_000)

    page.goto(web_url + "audit?stream=UI_AUDIT")
    row = page.get_by_role("row").filter(has_text="stream.edit")
    expect(row).to_contain_text("accepted", timeout=30_000)
    expect(row).to_contain_text("local")  # no login on a loopback console
    expect(row).to_contain_text("allow_batched: True -> False")
    expect(row).to_contain_text("127.0.0.1")
    expect(page.get_by_text("Chain intact")).to_be_visible()
