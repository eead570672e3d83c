"""ngptune.console: piped output keeps table rows and message lines whole."""

from __future__ import annotations

import io

from rich.table import Table

from ngptune.console import PIPED_WIDTH, make_console


def test_piped_tables_do_not_wrap_numbers(monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setattr("sys.stdout", buffer)  # not a terminal
    console = make_console(file=buffer)
    assert console.width == PIPED_WIDTH
    table = Table()
    for name in ("settings", "op", "size_bytes", "count", "time_us", "algbw", "busbw", "extra column"):
        table.add_column(name)
    table.add_row("NCCL_P2P_DISABLE=1,NCCL_SHM_DISABLE=1", "all_reduce", "1,048,576", "1,000", "123.4", "8.5", "17.0",
                  "x" * 40)
    console.print(table)
    assert "1,048,576" in buffer.getvalue()  # at 80 columns rich folded it over two lines
    assert make_console(width=90, file=buffer).width == 90  # an explicit width wins


def test_printed_lines_fit_80_columns_whole_paths_and_marks_aside():
    from ngptune.console import fitted_text, print_lines, table_width

    path = "/work/reports/" + "a_very_long_study_folder_name" * 3 + "/best_config.json"
    parts = ["recommended (the default, no significant difference in re-runs):", f"trial 0 → {path},",
             "reports/demo/best_env.sh", "[not markup]"]
    text = fitted_text(parts, marks=[("trial 0", "bold")])
    assert text.plain.splitlines() == [
        "recommended (the default, no significant difference in re-runs): trial 0 →", f"  {path},",
        "  reports/demo/best_env.sh [not markup]"]
    start = text.plain.index("trial 0")
    assert [(s.start, s.end, str(s.style)) for s in text.spans] == [(start, start + 7, "bold")]
    buffer = io.StringIO()
    console = make_console(file=buffer, width=PIPED_WIDTH, color_system=None)
    print_lines(console, parts)
    assert buffer.getvalue().splitlines() == text.plain.splitlines()  # neither wrapped again nor read as markup
    assert table_width(console) == 80 and table_width(make_console(file=buffer, width=60)) == 60
