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
