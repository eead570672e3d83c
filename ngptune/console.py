"""The rich console the commands print tables and messages with.

On a terminal rich measures its width; piped into a file or another program it would assume 80
columns and wrap table cells mid-number (``1,048,57`` / ``6``) and long message lines. Piped output
gets a wide fixed width instead, so every row and line stays whole.
"""

from __future__ import annotations

import sys

from rich.console import Console

__all__ = ["PIPED_WIDTH", "make_console"]

PIPED_WIDTH = 200  # columns of piped output


def make_console(**options) -> Console:
    """A ``rich.console.Console`` (``options`` passed on) that keeps lines whole when stdout is not a terminal."""
    if not sys.stdout.isatty() and "width" not in options:
        options["width"] = PIPED_WIDTH
    options.setdefault("soft_wrap", False)
    return Console(**options)
