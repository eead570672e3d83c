"""Self-contained HTML pages for reports: one file, no network, opens in any browser.

Pages are rendered with a Jinja2 template; plotly figures become ``<div>`` elements and plotly.js is
embedded once per page (``plotly.offline.get_plotlyjs()``), so a report works offline. Tables are
pandas DataFrames rendered with :meth:`pandas.DataFrame.to_html`.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import html
from typing import Any, Sequence

import jinja2
import pandas as pd

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
table.report th, table.report td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: right; }
table.report th { background: #f4f4f4; } table.report td:first-child, table.report th:first-child { text-align: left; }
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
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})


def table_html(df: pd.DataFrame, *, float_format: str = "{:.4g}", index: bool = False) -> str:
    """A DataFrame as an HTML table (cells escaped; floats formatted with ``float_format``)."""
    if df.empty:
        return '<p class="note">(no rows)</p>'
    return df.to_html(
        index=index,
        classes="report",
        border=0,
        escape=True,
        na_rep="",
        float_format=lambda v: float_format.format(v),
    )


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
