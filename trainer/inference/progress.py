"""Progress of a render or an export: a rich bar on a terminal, plain lines otherwise; both give
the time left as the training's progress line does (``eta 0:14``, ``eta -:--`` before the first
unit is done: :func:`trainer.contract.textlines.clock_text`)."""

from __future__ import annotations

import sys
import time
from typing import Any

from trainer.contract.metrics import si_number
from trainer.contract.textlines import clock_text

__all__ = ["Progress"]

PLAIN_LINE_EVERY_S = 10.0  # off a terminal: at most one line per this many seconds (and the last)


class Progress:
    """Counts ``total`` units of work (``what``: "frames", "chunks") and the rays or points done.

    Args:
        what: the unit's name.
        total: units in all.
        quiet: no bar and no lines.
        rate_name: what :meth:`advance`'s ``items`` are (shown as a rate, e.g. "rays").
        console: a rich console to draw the bar on (default: stderr's, when it is a terminal).
        total_items: the rays or points of all the units, when known: the time left then comes
            from the items done (a render's rays), so that it is known before the first unit ends.
    """

    def __init__(self, what: str, total: int, quiet: bool = False, rate_name: str = "rays",
                 console: Any = None, total_items: int | None = None) -> None:
        self.what, self.total, self.quiet, self.rate_name = what, int(total), quiet, rate_name
        self.total_items = total_items
        self.done = 0
        self.items = 0
        self.t0 = time.perf_counter()
        self._last_line = self.t0
        self._bar = None
        if not quiet and (console is not None or sys.stderr.isatty()):
            from rich.console import Console
            from rich.progress import BarColumn, Progress as RichProgress, TextColumn

            self._bar = RichProgress(TextColumn(f"[bold]{what}"), BarColumn(),
                                     TextColumn("{task.fields[count]}"), TextColumn("{task.fields[rate]}"),
                                     TextColumn("eta {task.fields[eta]}"),
                                     console=console if console is not None else Console(stderr=True), transient=False)
            self._task = self._bar.add_task(what, total=self.total, count=self.count_text(), rate="",
                                            eta=self.eta_text())
            self._bar.start()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0

    def count_text(self) -> str:
        """The units done of all, thousands separated: ``1,024/500,000``."""
        return f"{self.done:,}/{self.total:,}"

    def rate_text(self) -> str:
        """The rays or points per second so far, with an SI prefix: ``133 k points/s``."""
        rate = self.items / max(self.elapsed_s, 1e-9)
        return f"{si_number(rate)} {self.rate_name}/s"

    def eta_text(self) -> str:
        """The time left at the mean rate of the units done so far, as a clock (``0:14``;
        ``-:--`` before the first unit is done); with ``total_items``, at the mean rate of the
        items done (``-:--`` before the first)."""
        if self.total_items:
            left = (self.total_items - self.items) * self.elapsed_s / self.items if self.items else None
        else:
            left = (self.total - self.done) * self.elapsed_s / self.done if self.done else None
        return clock_text(None if left is None else max(left, 0.0))

    def expect_items(self, total_items: int) -> None:
        """The rays or points of all the units, as now foreseen (a point cloud knows how many rays
        its points need only from the hit rate so far): the time left comes from it from now on."""
        self.total_items = max(int(total_items), self.items)

    def advance(self, units: int = 1, items: int = 0) -> None:
        """``units`` more done, ``items`` more rays/points (``units`` 0: rays of work under way,
        so that a long unit shows progress; off a terminal a line at most every
        :data:`PLAIN_LINE_EVERY_S` seconds, and the last)."""
        self.done += units
        self.items += items
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, count=self.count_text(), rate=self.rate_text(),
                             eta=self.eta_text())
            return
        now = time.perf_counter()
        if now - self._last_line >= PLAIN_LINE_EVERY_S or self.done >= self.total:
            self._last_line = now
            print(f"{self.what} {self.count_text()}  {self.rate_text()}  eta {self.eta_text()}", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
