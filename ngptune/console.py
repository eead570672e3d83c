"""The rich console the commands print tables and messages with.

On a terminal rich measures its width; piped into a file or another program it would assume 80
columns and wrap table cells mid-number (``1,048,57`` / ``6``) and long message lines. Piped output
gets a wide fixed width instead, so every row and line stays whole. :func:`print_trimmed` prints
a table without the spaces rich pads its lines with.
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console

__all__ = ["PIPED_WIDTH", "make_console", "print_trimmed"]

PIPED_WIDTH = 200  # columns of piped output


def make_console(**options) -> Console:
    """A ``rich.console.Console`` (``options`` passed on) that keeps lines whole when stdout is not a terminal."""
    if not sys.stdout.isatty() and "width" not in options:
        options["width"] = PIPED_WIDTH
    options.setdefault("soft_wrap", False)
    return Console(**options)


def print_trimmed(console: Console, renderable: Any, width: int) -> None:
    """Print ``renderable`` (a rich table, ...) on ``console`` laid out ``width`` columns wide,
    each line without its trailing spaces (rich pads a table's cells and centres its title with
    them); styles are kept."""
    from rich.text import Text

    for segments in console.render_lines(renderable, console.options.update_width(width), pad=False):
        line = Text()
        for segment in segments:
            if not segment.control:
                line.append(segment.text, segment.style)
        line.rstrip()
        console.print(line, soft_wrap=True)
