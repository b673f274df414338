"""The browser tests' measure of a page's tables at the width they run at (1280 px): every column an
operator decides on inside the window, and no column title cut."""

from playwright.sync_api import expect

WITHOUT_TABLES = {"/probe", "/replay"}  # a form; Replay shows messages as cards
KEY_COLUMNS = ("state", "severity", "verdict", "failing", "stream", "reason", "outcome", "investigate", "publisher",
               "API level", "mean time between")


def key_columns_in_view_and_no_text_cut(page, path: str) -> None:
    expect(page.locator("#bc-preview")).to_have_count(0, timeout=30_000)  # the live page's tables, not the copy's
    page.wait_for_load_state("networkidle")
    out_of_view = page.evaluate("""([keys, withTables]) => {
        const titles = [];  // Panel draws each table in a shadow root: looked for in every one
        const walk = (root) => {
            titles.push(...root.querySelectorAll('.tabulator-col .tabulator-col-title'));
            for (const el of root.querySelectorAll('*')) if (el.shadowRoot) walk(el.shadowRoot);
        };
        walk(document);
        if (!titles.length && withTables) return ['no table headers found'];
        const found = [];
        for (const title of titles) {
            const box = title.getBoundingClientRect();
            if (!box.width) continue;  // a hidden table
            const name = title.textContent.trim();
            if (!name) continue;  // the row-header and filler columns: no title to cut
            if (keys.includes(name) && box.right > window.innerWidth) found.push(name + ' out of view');
            if (title.scrollWidth > title.clientWidth + 1) found.push(name + ' cut');
        }
        return found;
    }""", [list(KEY_COLUMNS), path not in WITHOUT_TABLES])
    assert not out_of_view, f"{path}: {out_of_view}"
