"""The first answer's plain-HTML copy of a page (console.ui.preview), rendered without a server."""

import pandas as pd
import panel as pn

from console.ui.preview import attach, static_html, table_html
from console.ui.formatting import WRAPPED


def test_a_table_shows_its_first_rows_with_headers_in_words_and_escapes_what_is_not_built_html():
    frame = pd.DataFrame({"batch_id": [f"<b>{i}</b>" for i in range(30)],
                          "stream": ['<a href="/stream?name=S">S</a>'] * 30})
    shown = table_html(frame, rows=25)
    assert "<th>batch</th>" in shown  # formatting.TITLES, as the live table
    assert "&lt;b&gt;0&lt;/b&gt;" in shown and "<b>0</b>" not in shown
    assert '<a href="/stream?name=S">S</a>' in shown  # stream cells are built escaped by the pages
    assert "&lt;b&gt;24&lt;/b&gt;" in shown and "&lt;b&gt;25&lt;/b&gt;" not in shown
    assert "5 more" in shown


def test_a_layout_keeps_text_tables_and_plot_titles_and_draws_controls_disabled():
    from bokeh.plotting import figure

    plot = figure(title="Lost batches per minute", height=123)
    layout = pn.Column(pn.pane.Markdown("## Lost batches, live"), pn.widgets.Button(label="Apply"),
                       pn.Row(pn.pane.Bokeh(plot)), pn.pane.Str("a < b"),
                       pn.widgets.Tabulator(pd.DataFrame({"reason": ["timeout"]})))
    shown = static_html(layout)
    assert "<h2>Lost batches, live</h2>" in shown
    assert '<button type="button" disabled aria-hidden="true">Apply</button>' in shown
    assert "Lost batches per minute" in shown and "height:123px" in shown
    assert f"<pre style=\"{WRAPPED}\">a &lt; b</pre>" in shown  # a long status line wraps inside the window
    assert "<td>timeout</td>" in shown


def test_a_control_shows_its_name_and_value_escaped_and_never_a_password():
    shown = static_html(pn.Row(pn.widgets.TextInput(name="stream", value='"><script>alert(1)</script>'),
                               pn.widgets.PasswordInput(name="token", value="hunter2"),
                               pn.widgets.Checkbox(name="failing only", value=True)))
    assert 'value="&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;"' in shown and "<script>" not in shown
    assert "hunter2" not in shown and ">token<" in shown
    assert 'type="checkbox" disabled checked> failing only' in shown
    assert shown.count('aria-hidden="true"') == 3  # a picture of each control: no query by role or label finds it


def test_a_hidden_part_is_not_shown():
    assert "secret" not in static_html(pn.Column(pn.pane.Markdown("secret", visible=False)))


def test_the_first_answer_keeps_only_inert_markup_whatever_a_page_built():
    """A page's HTML pane runs no script in Panel's shadow root; the server's own HTML would."""
    from bokeh.document import Document

    doc = Document()
    attach(doc, '<p onclick="x()">a</p><script>alert(1)</script><img src=x onerror=alert(1)>'
                '<a href="javascript:alert(1)">j</a><a href="/stream?name=S" title="t">S</a>')
    kept = doc.template_variables["bc_preview"]
    assert "<script" not in kept and "onerror" not in kept and "onclick" not in kept and "javascript:" not in kept
    assert '<a href="/stream?name=S" title="t">S</a>' in kept and "<p>a</p>" in kept
