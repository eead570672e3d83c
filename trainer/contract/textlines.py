"""Lines a person reads at the end of a command, kept under 80 columns.

A summary is built from parts (``trained to step 530 in 90.0 s,``, ``6.10 M samples/s,``, ...);
:func:`fit_lines` packs them into lines of at most :data:`LINE_WIDTH` characters, breaking only
between parts, so a quantity and its unit stay on one line; the lines after the first start with
:data:`CONTINUATION`. A part too long for a line of its own (a long path, a sentence) is broken
at its spaces (never between a number and its unit: ``-0.06 dB``, ``76.2 k samples/s``), or left
whole when it has none. :func:`joined` puts such lines back on one line;
:func:`counted` writes a count with its noun in the singular or the plural (``1 step``, ``2 steps``).

Durations read the same in every command: a measured one with :func:`seconds_text` (``13.6 s``,
``42.1 ms``), an estimated one with :func:`estimate_text` (``9.1 s``, ``4 min 54 s``), a time left
or elapsed on a progress line with :func:`clock_text` (``eta 0:14``); a live line's running clock
with :class:`TrainedClock` (the seconds trained, the budget's clock).

A rank whose lines the launcher repeats on its console after a prefix (``rank 0: ``) learns the
prefix from :data:`CONSOLE_PREFIX_ENV`; :func:`line_width`, the width :func:`fit_lines` fills by
default, leaves room for it.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence

__all__ = ["CONSOLE_PREFIX_ENV", "CONTINUATION", "LINE_WIDTH", "MAX_BAR", "MIN_BAR", "NUMBERED_WORDS", "TrainedClock", "clock_text",
           "counted", "estimate_text", "fit_lines", "fit_progress_line", "joined", "line_width", "listed", "seconds_text",
           "unit_words"]

LINE_WIDTH = 79
"""Most characters of one line (an 80-column terminal does not wrap it)."""

CONTINUATION = "  "
"""Start of each line that continues the one before it."""


CONSOLE_PREFIX_ENV = "TRAINER_CONSOLE_PREFIX"
"""Environment variable holding what a launcher puts before each line of this process's output
on its console (``rank 0: ``); unset or empty when the lines are shown as they are."""


def line_width(environ: Mapping[str, str] | None = None) -> int:
    """Most characters of one line this process prints: :data:`LINE_WIDTH` less the length of
    the prefix :data:`CONSOLE_PREFIX_ENV` names in ``environ`` (default ``os.environ``), but at
    least half of :data:`LINE_WIDTH`."""
    prefix = (os.environ if environ is None else environ).get(CONSOLE_PREFIX_ENV, "")
    return max(LINE_WIDTH - len(prefix), LINE_WIDTH // 2)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, plural unless ``count`` is 1 (``plural``, default ``noun + "s"``),
    thousands separated by commas: ``1 step``, ``0 steps``, ``2 ranks``, ``2,819,456 triangles``."""
    return f"{count:,} {noun if count == 1 else (plural or noun + 's')}"


def seconds_text(seconds: float) -> str:
    """A measured duration ``seconds`` (s) with one decimal: seconds from a second up (``12.3 s``),
    milliseconds below (``42.1 ms``)."""
    return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds * 1e3:.1f} ms"


def estimate_text(seconds: float) -> str:
    """An estimated duration ``seconds`` (s), the one way every estimate is written (the final
    evaluation's before it and beside its measured time, a render's, a mesh export's):
    milliseconds with one decimal under a second (``42.1 ms``, as :func:`seconds_text`), seconds
    with one decimal under a minute (``9.1 s``), minutes and whole seconds under an hour
    (``4 min 54 s``), hours and whole minutes from there (``2 h 0 min``)."""
    if seconds < 0.9995:  # what would read "1000.0 ms" reads "1.0 s"
        return seconds_text(max(seconds, 0.0))
    if round(seconds, 1) < 60:
        return f"{max(seconds, 0.0):.1f} s"
    whole = int(round(seconds))
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    minutes = int(round(seconds / 60))
    return f"{minutes // 60} h {minutes % 60} min"


def clock_text(seconds: float | None) -> str:
    """A time left or elapsed, ``seconds`` (s) rounded to whole seconds, as a clock: ``M:SS``
    (``0:14``, ``12:34``), ``H:MM:SS`` from an hour; ``-:--`` when unknown (None)."""
    if seconds is None:
        return "-:--"
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return f"{seconds // 60}:{seconds % 60:02d}"


class TrainedClock:
    """The clock of a live progress line: the seconds trained as last reported, running on from
    that report between reports (a step's time budget counts these seconds, not start-up), or
    before any report the seconds since the clock started (start-up, an evaluation); an
    evaluation restarts it and may report its own seconds the same way.
    """

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.trained: tuple[float, float] | None = None  # (seconds trained, perf_counter when reported)

    def report(self, train_time_s: float | None) -> None:
        """Training (or the evaluation under way) has run ``train_time_s`` seconds now (None: not
        yet, the clock counts from its start)."""
        self.trained = None if train_time_s is None else (float(train_time_s), time.perf_counter())

    def restart(self) -> None:
        """Count from now, with nothing trained reported (an evaluation begins)."""
        self.started, self.trained = time.perf_counter(), None

    def text(self) -> str:
        """The clock now, as :func:`clock_text` writes it."""
        now = time.perf_counter()
        return clock_text(self.trained[0] + now - self.trained[1] if self.trained else now - self.started)


def joined(lines: Sequence[str], indent: str = CONTINUATION) -> str:
    """The statement :func:`fit_lines` broke into ``lines``, on one line again: each line after
    the first loses its leading ``indent`` and is joined to the one before by a space."""
    rest = [line[len(indent):] if line.startswith(indent) else line for line in lines[1:]]
    return " ".join([*lines[:1], *rest])


def listed(parts: Sequence[str], separator: str = ",") -> list[str]:
    """``parts`` with ``separator`` after each but the last (for :func:`fit_lines`)."""
    return [f"{part}{separator}" for part in parts[:-1]] + list(parts[-1:])


#: a word that is a unit (with the punctuation after it): kept on the line of the number before it
UNIT_WORD = re.compile(r"^(dB|ms|s|min|h|%|px|[kMGT]?B|[kMGT]iB|[kMGT]?B/s|[a-z]+/s|[kMGT])\W*$")
#: a word that ends a quantity a unit can follow: a number, or a number and its SI prefix
QUANTITY_END = re.compile(r"(\d|\d [kMGT])$")


NUMBERED_WORDS = ("trial", "rank", "step")
"""Words kept on a line with the number after them by :func:`unit_words`."""


def unit_words(text: str) -> list[str]:
    """``text`` split at its spaces, each unit joined to the number before it (and an SI prefix's
    unit to both), a mean ``±`` its spread kept whole and :data:`NUMBERED_WORDS` kept with their
    number: ``"gain -0.06 dB); 76.2 k samples/s"`` → ``["gain", "-0.06 dB);", "76.2 k samples/s"]``,
    ``"trial 4 19.27 ± 0.17 dB"`` → ``["trial 4", "19.27 ± 0.17 dB"]``."""
    words: list[str] = []
    for word in text.split():
        if words and (word == "±" or words[-1].endswith(" ±")  # a mean ± its sd stays whole
                      or (words[-1] in NUMBERED_WORDS and word[:1].isdigit())  # "trial 4", "rank 1"
                      or (UNIT_WORD.match(word) and QUANTITY_END.search(words[-1]))):
            words[-1] += " " + word
        else:
            words.append(word)
    return words


def fit_lines(parts: Sequence[str], width: int | None = None, indent: str = CONTINUATION,
              separator: str = " ") -> list[str]:
    """``parts`` joined by ``separator`` (default a single space) into lines of at most ``width``
    characters (default :func:`line_width`; module docstring); empty parts are left out, and the
    first keeps its leading spaces. Returns ``[]`` for no parts.

    Raises:
        ValueError: ``width`` is not larger than ``len(indent)`` + 10.
    """
    width = line_width() if width is None else width
    if width <= len(indent) + 10:
        raise ValueError(f"fit_lines: width {width} leaves no room after the indent {indent!r}")
    pieces: list[str] = []
    for part in parts:
        if not part.strip():
            continue
        if len(indent) + len(part.strip()) <= width:
            pieces.append(part.rstrip())
            continue
        words = unit_words(part)  # no line holds it whole: broken at its spaces, its words are parts then
        if not pieces:
            words[0] = part[: len(part) - len(part.lstrip())] + words[0]
        pieces += words
    lines: list[str] = []
    current = ""
    for piece in pieces:
        if current and len(current) + len(separator) + len(piece.lstrip()) <= width:
            current += separator + piece.lstrip()
        else:
            if current:
                lines.append(current)
            current = indent + piece.lstrip() if lines else piece
    if current:
        lines.append(current)
    return lines


MIN_BAR = 8  # bar characters kept however narrow the terminal
MAX_BAR = 40


def fit_progress_line(width: int, label: str, fraction: float, kept: list[str], extras: list[str]) -> str:
    """One progress line of at most ``width`` characters: ``label``, a bar of ``fraction`` (0..1),
    the ``kept`` parts (never left out), then as many ``extras`` as fit, in order (the last ones
    drop first). The bar takes the room left, between :data:`MIN_BAR` and :data:`MAX_BAR`
    characters; below ``MIN_BAR`` columns of room it shrinks, and a line that still does not fit
    is cut at ``width`` (the kept parts first)."""
    fixed = " ".join(kept)
    shown: list[str] = []
    for extra in extras:
        if len(label) + 1 + MIN_BAR + 1 + len(" ".join([fixed, *shown, extra])) <= width:
            shown.append(extra)
        else:
            break
    tail = " ".join([fixed, *shown])
    room = width - len(label) - 2 - len(tail)
    bar_width = max(0, min(MAX_BAR, room))
    filled = round(max(0.0, min(1.0, fraction)) * bar_width)
    bar = "━" * filled + "─" * (bar_width - filled) if bar_width else ""
    line = " ".join(part for part in (label, bar, tail) if part)
    return line[:width]
