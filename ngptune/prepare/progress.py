"""Progress of ``ngptune prepare``'s stages: a rich bar per stage on a terminal, one line per
finished stage otherwise (both on stderr), and the seconds each stage took."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Iterator

__all__ = ["Stage", "StageProgress"]


class Stage:
    """One running stage: ``advance`` counts units of work done out of ``total``."""

    def __init__(self, owner: "StageProgress", name: str, total: int, unit: str, task: object) -> None:
        self.owner, self.name, self.total, self.unit, self.task = owner, name, int(total), unit, task
        self.done = 0

    def set_total(self, total: int) -> None:
        """The amount of work, once it is known (a video's frame count)."""
        self.total = int(total)
        if self.owner.bar is not None:
            self.owner.bar.update(self.task, total=max(self.total, 1))

    def advance(self, units: int = 1) -> None:
        self.done = min(self.done + int(units), self.total)
        if self.owner.bar is not None:
            self.owner.bar.update(self.task, completed=self.done)


class StageProgress:
    """The stages of one command, in order.

    Attributes:
        seconds: stage name → wall-clock seconds, in the order the stages ran.
        quiet: no bar and no lines.
    """

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.seconds: dict[str, float] = {}
        self.bar = None
        if not quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("[bold]{task.description:<9}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[unit]}"), TimeElapsedColumn(),
                                console=Console(stderr=True))
            self.bar.start()

    @contextlib.contextmanager
    def stage(self, name: str, total: int, unit: str) -> Iterator[Stage]:
        """Run one stage of ``total`` ``unit`` (e.g. 20 "images"); its time goes to :attr:`seconds`."""
        task = self.bar.add_task(name, total=max(int(total), 1), unit=unit) if self.bar is not None else None
        stage = Stage(self, name, total, unit, task)
        start = time.perf_counter()
        try:
            yield stage
        finally:
            self.seconds[name] = time.perf_counter() - start
        if self.bar is None and not self.quiet:
            print(f"{name}: {stage.done}/{stage.total} {unit} in {self.seconds[name]:.1f} s", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
