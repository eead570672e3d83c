"""Ctrl-C while one process trains: the step under way finishes, then the run stops with a snapshot
of that step kept (:class:`StopAfterStep`), so Ctrl-C never loses the model trained so far.

Python's own Ctrl-C (a ``KeyboardInterrupt`` raised wherever the main thread is) may land in the
middle of an optimiser update or a CUDA graph capture, where the model is not a step's model and no
snapshot can be written. While the loop trains, the first SIGINT only asks to stop: after the step
it lands in (at the same point a ``--snapshot-every`` snapshot is written), :meth:`check` raises
:class:`StoppedAfterStep`, and the run writes the snapshot before it ends as interrupted. A second
Ctrl-C stops at once (Python's handler is back), keeping only the snapshots already written.

A job of several ranks keeps Python's handler: each rank would stop after its own step, and a rank
one step ahead would wait in a collective for the others (its checkpoints are ``--checkpoint-every``'s).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable

from trainer.contract.textlines import fit_lines

__all__ = ["FIRST_CTRL_C_PARTS", "StopAfterStep", "StoppedAfterStep", "first_ctrl_c_text"]

FIRST_CTRL_C_PARTS = ("Ctrl-C: stopping after this step,", "keeping a snapshot of it", "(Ctrl-C again stops at once)")
"""What the first Ctrl-C prints on stderr, as parts of lines under 80 columns (:func:`first_ctrl_c_text`)."""


def first_ctrl_c_text() -> str:
    """:data:`FIRST_CTRL_C_PARTS` in lines under :func:`~trainer.contract.textlines.line_width`
    columns, joined by newlines (no newline at the end)."""
    return "\n".join(fit_lines(FIRST_CTRL_C_PARTS))


class StoppedAfterStep(KeyboardInterrupt):
    """Ctrl-C asked the run to stop, and the step it came in has finished (``step``: the steps done)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"Ctrl-C after step {step}")
        self.step = step


class StopAfterStep:
    """A context around the training loop in which the first SIGINT asks to stop after the step
    under way (module docstring). Outside the main thread, or where SIGINT is not Python's default
    handler (ignored, or another handler), it changes nothing.

    Args:
        steps: the number of steps done so far (read when the stop is raised).
    """

    def __init__(self, steps: Callable[[], int]) -> None:
        self.steps = steps
        self.requested = False
        self._previous: Any = None
        self._said = f"\n{first_ctrl_c_text()}\n".encode()  # built here: the handler only writes it

    def __enter__(self) -> "StopAfterStep":
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            self._previous = signal.signal(signal.SIGINT, self._ask)
        return self

    def _ask(self, signum: int, frame: Any) -> None:
        self.requested = True
        signal.signal(signal.SIGINT, self._previous)  # a second Ctrl-C: KeyboardInterrupt at once
        os.write(2, self._said)  # no lock taken inside a handler

    def check(self, *_: Any) -> None:
        """After a step (an ``on_step`` hook): raise :class:`StoppedAfterStep` when Ctrl-C asked to stop."""
        if self.requested:
            self.requested = False
            raise StoppedAfterStep(self.steps())

    def after(self, on_step: Callable[[int, float], None] | None) -> Callable[[int, float], None]:
        """``on_step`` followed by :meth:`check`."""

        def hook(step: int, train_time_s: float) -> None:
            if on_step is not None:
                on_step(step, train_time_s)
            self.check()

        return hook

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._previous is not None and signal.getsignal(signal.SIGINT) == self._ask:
            signal.signal(signal.SIGINT, self._previous)
        self._previous = None
        if exc_type is None:
            self.check()  # Ctrl-C after the last step's hook: stop before the evaluation
