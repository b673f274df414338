"""What a page says, as a reader sees it: Panel draws each pane in a shadow root, whose text the
document's body does not hold (`inner_text("body")` of a Panel page is empty)."""

TEXT = """() => {
  const found = [];
  const walk = (root) => {
    found.push(root === document ? document.body.innerText : root.textContent);
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) walk(el.shadowRoot);
  };
  walk(document);
  return found.join('\\n');
}"""


def page_text(page) -> str:
    """Every text the page holds, its shadow roots' too."""
    return page.evaluate(TEXT)
