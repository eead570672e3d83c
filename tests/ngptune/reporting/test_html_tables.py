"""Report tables and charts fit the page: a wide table scrolls inside its box, a per-rank summary
has a column per rank, a chart takes the column's width."""

from __future__ import annotations

import pandas as pd

from ngptune.reporting.html import figure_html, table_html, transposed


def test_every_table_scrolls_inside_its_box():
    html = table_html(pd.DataFrame({"step_time_ms": [3.5], "scene": ["lego"]}))
    assert html.startswith('<div class="wide"><table class="report">') and html.endswith("</table></div>")


def test_a_per_rank_summary_has_a_row_per_quantity_and_a_column_per_rank():
    summary = pd.DataFrame({"rank": [0, 1], "step_time_ms": [3.25, 3.5], "throughput_samples_per_s": [7.76e4, 7.76e4]})
    turned = transposed(summary, "rank", "quantity")
    assert list(turned.columns) == ["quantity", "rank 0", "rank 1"]
    assert list(turned["quantity"]) == ["step_time_ms", "throughput_samples_per_s"]
    html = table_html(turned, quantity_column="quantity")
    assert "3.5 ms" in html and "77.6 k samples/s" in html  # each row's unit, from its quantity


def test_a_chart_takes_the_width_of_the_page_column():
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=[1, 2], y=["a", "b"], orientation="h"))
    fig.update_layout(width=1200)  # as some of Optuna's plots set it
    html = figure_html(fig)
    assert '"responsive": true' in html and '"width":1200' not in html.replace(" ", "")
