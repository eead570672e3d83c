"""Self-contained HTML pages for reports: one file, no network, opens in any browser.

Pages are rendered with a Jinja2 template; plotly figures become ``<div>`` elements and plotly.js is
embedded once per page (``plotly.offline.get_plotlyjs()``), so a report works offline. Tables are
pandas DataFrames (:func:`table_html`): each number is shown with the unit its column (or row)
name ends with, at the precision it is read at (:func:`trainer.contract.metrics.quantity_text`: ``34.22 dB``,
``30.0 s``, ``6.10 M samples/s``), right-aligned; text is left-aligned and wraps.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import html
import math
from typing import Any, Sequence

import jinja2
import numpy as np
import pandas as pd

from trainer.contract import quantity_text

_TEMPLATE = jinja2.Template(
    """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title|e }}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1200px; color: #222; padding: 0 1rem; }
h1 { margin-bottom: 0.2rem; } .subtitle { color: #666; margin-top: 0; }
section { margin: 2rem 0; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.3rem; }
table.report { border-collapse: collapse; font-size: 0.9rem; margin: 0.5rem 0; }
table.report th, table.report td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; vertical-align: top; }
table.report th { background: #f4f4f4; text-align: left; }
table.report td.num { text-align: right; white-space: nowrap; }
table.report td.text { text-align: left; white-space: pre-line; }
table.report td.long { text-align: left; min-width: 14rem; max-width: 28rem; overflow-wrap: anywhere; white-space: pre-line; }
div.wide { overflow-x: auto; }
.note { color: #555; font-size: 0.9rem; } .badge { display: inline-block; padding: 0.1rem 0.5rem; border-radius: 0.3rem; background: #fde8c8; }
.missing { color: #a33; }
</style>
{% if has_figures %}<script type="text/javascript">{{ plotly_js }}</script>{% endif %}
</head>
<body>
<h1>{{ title|e }}</h1>
{% if subtitle %}<p class="subtitle">{{ subtitle|e }}</p>{% endif %}
<p class="note">Written {{ written }} by ngptune.</p>
{% for s in sections %}
<section id="{{ s.anchor }}">
<h2>{{ s.title|e }}</h2>
{{ s.html }}
</section>
{% endfor %}
</body>
</html>
""",
    autoescape=False,
)

_FIGURE_MARKER = 'class="plotly-graph-div"'


@dataclasses.dataclass(frozen=True)
class Section:
    """One titled part of a page; ``html`` is trusted markup (build it with the helpers here)."""

    title: str
    html: str

    @property
    def anchor(self) -> str:
        return "".join(c if c.isalnum() else "-" for c in self.title.lower()).strip("-")


def figure_html(fig: Any) -> str:
    """A plotly figure as a ``<div>`` without plotly.js (the page embeds it once)."""
    fig.update_layout(width=None, autosize=True)  # as wide as the page's column, never wider
    return fig.to_html(full_html=False, include_plotlyjs=False, default_width="100%",
                       config={"displaylogo": False, "responsive": True})


def table_html(df: pd.DataFrame, *, index: bool = False, quantity_column: str | None = None,
               numeric_text: tuple[str, ...] = ()) -> str:
    """A DataFrame as an HTML table: cells escaped; numbers as :func:`trainer.contract.metrics.quantity_text`
    of their column's name (or, with ``quantity_column``, of the name that column holds on their
    row: a table of quantities by trial) in right-aligned ``num`` cells, text in left-aligned
    ``text`` cells that wrap; the columns of ``numeric_text`` hold numbers already written as text
    (``11.1 %``), shown as they are in ``num`` cells."""
    if df.empty:
        return '<p class="note">(no rows)</p>'
    if index:
        df = df.reset_index()
    # a long column name may break after its underscores and dots (<wbr>), not widen the table
    head = "".join(f"<th>{html.escape(str(c)).replace('_', '_<wbr>').replace('.', '.<wbr>')}</th>" for c in df.columns)
    long = {c for c in df.columns if df[c].map(lambda v: isinstance(v, str) and max(map(len, v.splitlines() or [""])) > LONG_TEXT).any()}
    rows = []
    for _, row in df.iterrows():
        cells = []
        for column, value in row.items():
            name = str(row[quantity_column]) if quantity_column is not None and column != quantity_column else str(column)
            if column in numeric_text:
                cells.append(f'<td class="num">{html.escape(str(value))}</td>')
                continue
            cells.append(_cell_html(name, value, column in long))
        rows.append(f"<tr>{''.join(cells)}</tr>")
    # a table wider than the page's column scrolls inside its box; the page itself never does
    return f'<div class="wide"><table class="report"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def transposed(df: pd.DataFrame, key: str, label: str) -> pd.DataFrame:
    """A table of few rows and many columns turned to fit a page: one row per column of ``df``
    (its name in a first column called ``label``), one column per row of ``df``, headed by that
    row's ``key`` value (e.g. ``rank 0``). For :func:`table_html` with ``quantity_column=label``."""
    turned = df.set_index(key).T
    turned.columns = [f"{key} {v}" for v in turned.columns]
    return turned.rename_axis(label).reset_index()


LONG_TEXT = 32
"""A text column holding a line longer than this many characters wraps (``long`` cells, at least
14rem wide); shorter text stays on its lines."""


def _cell_html(name: str, value: Any, long: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return '<td class="num"></td>'
    if isinstance(value, (bool, np.bool_)):
        return f'<td class="text">{"true" if value else "false"}</td>'
    if isinstance(value, (int, float, np.integer, np.floating)):
        return f'<td class="num">{html.escape(quantity_text(name, value.item() if hasattr(value, "item") else value))}</td>'
    return f'<td class="{"long" if long else "text"}">{html.escape(str(value))}</td>'


def text_html(text: str, css_class: str = "note") -> str:
    """A paragraph of escaped text."""
    return f'<p class="{css_class}">{html.escape(text)}</p>'


def render_page(title: str, sections: Sequence[Section], *, subtitle: str | None = None) -> str:
    """The whole self-contained HTML page.

    plotly.js (about 4.5 MB) is embedded only when a section contains a plotly figure.
    """
    has_figures = any(_FIGURE_MARKER in s.html for s in sections)
    plotly_js = ""
    if has_figures:
        from plotly.offline import get_plotlyjs

        plotly_js = get_plotlyjs()
    return _TEMPLATE.render(
        title=title,
        subtitle=subtitle,
        sections=list(sections),
        has_figures=has_figures,
        plotly_js=plotly_js,
        written=_dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
    )
