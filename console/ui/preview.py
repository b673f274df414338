"""The page as plain HTML in the server's first answer, painted before Bokeh's and Panel's scripts
(~3.5 MB, most of a cold load) have run: the same components the session just built, their text
and the first rows of their tables, read-only. The live page replaces it as soon as it is drawn.

The scripts move from the head to after the preview, so the browser paints the preview while it
still loads them; nothing here is interactive: a control (a button, a form field) is drawn disabled,
with its label and value, so a form reads as itself before it works."""

from __future__ import annotations

import html
from typing import Any

import nh3
import pandas as pd
import panel as pn
from markdown_it import MarkdownIt

from console.ui.formatting import HTML_COLUMNS, TITLES, WRAPPED

ROWS = 25  # a first screen of each table
_markdown = MarkdownIt("commonmark", {"html": True}).enable("table")

# Panel's page with the preview first, the scripts after it, and a watcher that removes the preview
# once the Panel root is put into the page.
TEMPLATE = """
{% block js_resources %}{% endblock %}
{% block postamble %}<style>
#bc-preview { font-family: system-ui, sans-serif; font-size: 14px; padding: 5px 10px; color: #1d2330; }
#bc-preview h2 { font-size: 1.3em; } #bc-preview h3 { font-size: 1.1em; }
#bc-preview nav { display: flex; flex-wrap: wrap; gap: .2rem .9rem; } #bc-preview .name { font-weight: 700; }
#bc-preview header.bc { display: flex; flex-wrap: wrap; gap: .4rem 1.2rem; align-items: center; padding: .55rem 1rem;
  background: #1f3b5a; color: #fff; border-radius: 6px; font-size: 17px; }
#bc-preview header.bc a { color: #cfe3ff; text-decoration: none; } #bc-preview header.bc button { display: none; }
#bc-preview header.bc .badges { margin-left: auto; display: flex; gap: .35rem; }
#bc-preview .badge { padding: .12rem .55rem; border-radius: 999px; font-size: .85em; font-weight: 600; color: #fff;
  background: #5c6b80; } #bc-preview .badge.ok { background: #2b8a3e; } #bc-preview .badge.bad { background: #c92a2a; }
#bc-preview .badge.warn { background: #e67700; }
#bc-preview .bc-banner { margin-top: .4rem; padding: .5rem 1rem; border-radius: 6px; background: #c92a2a; color: #fff; }
#bc-preview table { border-collapse: collapse; width: 100%; font-size: 13px; margin: .4rem 0; }
#bc-preview th, #bc-preview td { border-bottom: 1px solid #dde1e6; padding: 3px 6px; text-align: left; }
#bc-preview .bc-controls { display: flex; flex-wrap: wrap; gap: 10px; align-items: end; margin: .3rem 0; }
#bc-preview label { display: inline-flex; flex-direction: column; font-size: 13px; gap: 2px; }
#bc-preview input, #bc-preview button { font: inherit; padding: 4px 8px; min-height: 30px; box-sizing: border-box; }
#bc-preview .bc-plot { border: 1px solid #eef0f3; color: #5c6b80; padding: 6px; box-sizing: border-box; }
{% if theme_name == "dark" %}#bc-preview { color: #e6e6e6; }{% endif %}
</style>{% endblock %}
{% block contents %}
<div id="bc-preview" aria-busy="true">{{ bc_preview }}</div>
{{ bokeh_js }}
{{ super() }}
<script>
(function () {
  // Bokeh renders a root's whole tree, then puts it into the page in one step: the preview goes in
  // the same task, so the two are never on screen (nor in the DOM) together.
  var preview = document.getElementById("bc-preview");
  var roots = document.querySelectorAll("[data-root-id]");
  var watch = new MutationObserver(function () { preview.remove(); watch.disconnect(); });
  for (var i = 0; i < roots.length; i++) watch.observe(roots[i], {childList: true});
})();
(function () {
  // Panel's table drops new rows that reach it while it is being (re)built, and showed none of a page's
  // first listing: rows that came then are given to the table once it is built.
  var model = window.Bokeh && Bokeh.Panel && Bokeh.Panel.DataTabulator;
  if (!model) return;
  var view = model.prototype.default_view.prototype, setData = view.setData, built = view.tableBuilt;
  view.setData = function () {
    if (this._initializing || this._building || !this.tabulator || !this.tabulator.initialized) this.bcMissed = true;
    return setData.apply(this, arguments);
  };
  view.tableBuilt = function () {
    built.apply(this, arguments);
    if (this.bcMissed) { this.bcMissed = false; this.setData(); }
  };
})();
</script>
{% endblock %}
"""


# What the preview may hold. Panel puts a pane's HTML into a shadow root, where a <script> never runs;
# in the page's own HTML it would: whatever a page builds, the first answer keeps only inert markup.
INERT_TAGS = {"a", "b", "i", "em", "strong", "code", "pre", "p", "br", "ul", "ol", "li", "h1", "h2", "h3", "h4",
              "table", "thead", "tbody", "tr", "th", "td", "div", "span", "header", "nav", "hr", "blockquote",
              "label", "input", "button"}
INERT_ATTRIBUTES = {"*": {"class", "title", "role", "style", "aria-label", "aria-current", "aria-hidden"}, "a": {"href"},
                    "input": {"disabled", "value", "type", "checked", "placeholder"}, "button": {"disabled", "type"}}


def attach(document: Any, preview_html: str) -> None:
    """Serve `document` with `preview_html` (made inert) painted first."""
    document.template = TEMPLATE
    document.template_variables["bc_preview"] = nh3.clean(preview_html, tags=INERT_TAGS, attributes=INERT_ATTRIBUTES,
                                                          url_schemes={"http", "https"}, link_rel=None)


def table_html(frame: pd.DataFrame, titles: dict[str, str] | None = None, rows: int = ROWS) -> str:
    """The first `rows` rows as an HTML table: the pages' HTML cells as they are (built escaped),
    every other cell escaped."""
    titles = {**TITLES, **(titles or {})}
    head = "".join(f"<th>{html.escape(str(titles.get(c, c)))}</th>" for c in frame.columns)
    body = []
    for row in frame.head(rows).itertuples(index=False):
        cells = (str(v) if c in HTML_COLUMNS else html.escape("" if pd.isna(v) else str(v))
                 for c, v in zip(frame.columns, row))
        body.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    more = f"<p>… {len(frame) - rows:,} more</p>" if len(frame) > rows else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"


def static_html(item: Any) -> str:
    """What a layout of panes, tables and plots shows, as plain HTML; controls are left out."""
    if isinstance(item, pn.viewable.Viewer):
        return static_html(item.__panel__())
    if isinstance(item, pn.layout.ListLike):
        inner = "".join(static_html(child) for child in item if child.visible)
        return f'<div class="bc-controls">{inner}</div>' if isinstance(item, pn.Row) else inner
    if isinstance(item, pn.widgets.Tabulator):
        if not isinstance(item.value, pd.DataFrame) or not len(item.value.columns):
            return ""
        return table_html(item.value, item.titles or {})
    if isinstance(item, pn.pane.Markdown):
        return str(_markdown.render(str(item.object or "")))
    if isinstance(item, pn.pane.Str):
        return f"<pre style=\"{WRAPPED}\">{html.escape(str(item.object or ''))}</pre>"
    if isinstance(item, pn.pane.HTML):
        return str(item.object or "")
    if isinstance(item, pn.widgets.Widget):
        return _control_html(item)
    if isinstance(item, pn.pane.Bokeh):
        title = getattr(getattr(item.object, "title", None), "text", "") or ""
        height = getattr(item.object, "height", None) or 200
        return f'<div class="bc-plot" style="height:{int(height)}px;flex:1">{html.escape(title)}</div>'
    return ""


def _control_html(widget: Any) -> str:
    """A control as it will look, disabled: a button its label, a field its name and value. Hidden from
    assistive technology (and so from a query by role or label): it is a picture of the control, which
    the live page's own replaces, and may be disabled only because it is not live yet."""
    e = html.escape
    if isinstance(widget, (pn.widgets.Button, pn.widgets.FileDownload)):
        return f'<button type="button" disabled aria-hidden="true">{e(str(widget.label or widget.name or ""))}</button>'
    name = e(str(widget.name or ""))
    if isinstance(widget, pn.widgets.Checkbox):
        checked = " checked" if widget.value else ""
        return (f'<label style="flex-direction:row" aria-hidden="true"><input type="checkbox" disabled{checked}> '
                f'{name}</label>')
    value = getattr(widget, "value", None)
    if isinstance(value, (tuple, list)):
        value = " – ".join(str(v) for v in value)
    secret = isinstance(widget, pn.widgets.PasswordInput)  # a password is never in a page's HTML
    shown = e("" if value is None or secret else str(value))
    placeholder = e(str(getattr(widget, "placeholder", "") or ""))
    return (f'<label aria-hidden="true">{name}<input type="text" disabled value="{shown}" '
            f'placeholder="{placeholder}"></label>')
