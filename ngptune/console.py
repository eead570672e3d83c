"""The rich console the commands print tables and messages with, and lines under 80 columns.

On a terminal rich measures its width; piped into a file or another program it would assume 80
columns and wrap table cells mid-number (``1,048,57`` / ``6``) and long message lines. Piped output
gets a wide fixed width instead, so every row and line stays whole; what a person reads is kept
under 80 columns by the command itself: :func:`print_lines` packs a statement's parts with
:func:`trainer.contract.fit_lines`, :func:`table_width` is the width a table is printed at, and
:func:`print_trimmed` prints a table without the spaces rich pads its lines with.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.text import Text

from trainer.contract import CONTINUATION, LINE_WIDTH, fit_lines

__all__ = ["PIPED_WIDTH", "fitted_text", "make_console", "print_lines", "print_trimmed", "table_width"]

PIPED_WIDTH = 200  # columns of piped output


def make_console(**options) -> Console:
    """A ``rich.console.Console`` (``options`` passed on) that keeps lines whole when stdout is not a terminal."""
    if not sys.stdout.isatty() and "width" not in options:
        options["width"] = PIPED_WIDTH
    options.setdefault("soft_wrap", False)
    return Console(**options)


def table_width(console: Console) -> int:
    """Columns a table is printed at: the console's width, at most 80 (a piped console's 200 too)."""
    return min(console.width, LINE_WIDTH + 1)


def fitted_text(parts: Sequence[str], *, style: str = "", marks: Sequence[tuple[str, str]] = (),
                indent: str = CONTINUATION) -> Text:
    """``parts`` packed into lines under 80 columns (:func:`trainer.contract.fit_lines`, the lines
    after the first starting with ``indent``) as one rich ``Text`` in ``style``; each
    ``(words, style)`` of ``marks`` styles the first place ``words`` occur (``("trial 3", "bold")``).
    The parts are plain text: square brackets are printed as they are."""
    text = Text("\n".join(fit_lines(parts, indent=indent)), style=style)
    for words, mark in marks:
        start = text.plain.find(words)
        if words and start >= 0:
            text.stylize(mark, start, start + len(words))
    return text


def print_lines(console: Console, parts: Sequence[str], *, style: str = "", marks: Sequence[tuple[str, str]] = (),
                indent: str = CONTINUATION) -> None:
    """Print :func:`fitted_text` of ``parts`` on ``console`` as it is (rich neither wraps nor
    highlights it)."""
    console.print(fitted_text(parts, style=style, marks=marks, indent=indent), soft_wrap=True, highlight=False)


def print_trimmed(console: Console, renderable: Any, width: int) -> None:
    """Print ``renderable`` (a rich table, ...) on ``console`` laid out ``width`` columns wide,
    each line without its trailing spaces (rich pads a table's cells and centres its title with
    them); styles are kept."""
    for segments in console.render_lines(renderable, console.options.update_width(width), pad=False):
        line = Text()
        for segment in segments:
            if not segment.control:
                line.append(segment.text, segment.style)
        line.rstrip()
        console.print(line, soft_wrap=True)
