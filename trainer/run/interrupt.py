"""Ctrl-C while one process trains: the step under way finishes, then the run stops with a snapshot
of that step kept (:class:`StopAfterStep`), so Ctrl-C never loses the model trained so far.

Python's own Ctrl-C (a ``KeyboardInterrupt`` raised wherever the main thread is) may land in the
middle of an optimiser update or a CUDA graph capture, where the model is not a step's model and no
snapshot can be written. While the loop trains, the first SIGINT only asks to stop: after the step
it lands in (at the same point a ``--snapshot-every`` snapshot is written), :meth:`check` raises
:class:`StoppedAfterStep`, and the run writes the snapshot before it ends as interrupted. A second
Ctrl-C stops at once (Python's handler is back), keeping only the snapshots already written.

SIGTERM (what ``timeout``, ``docker stop``, SLURM and a sweep send) is taken the same way while the
loop trains: the step under way finishes, its snapshot is kept, and the run ends as terminated
(:class:`TerminatedAfterStep`, exit status 143); a second SIGTERM stops at once. Outside the loop
(start-up, evaluation) SIGTERM keeps its handler (:func:`trainer.run.status.raise_terminated`).

Once the run is ending (the snapshot of the last step, status.json, the lines that say how to
continue), a further SIGINT or SIGTERM is noted and not acted on
(:func:`trainer.contract.signals.signals_held`): that bookkeeping takes a moment, and an exception
in its middle would leave status.json saying ``running``.

A job of several ranks keeps Python's handler: each rank would stop after its own step, and a rank
one step ahead would wait in a collective for the others (its checkpoints are ``--checkpoint-every``'s).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any, Callable

from trainer.contract.textlines import fit_lines
from trainer.run.status import Terminated, raise_terminated

__all__ = ["FIRST_CTRL_C_PARTS", "FIRST_SIGTERM_PARTS", "StopAfterStep", "StoppedAfterStep", "TerminatedAfterStep",
           "first_ctrl_c_text"]

FIRST_CTRL_C_PARTS = ("Ctrl-C: stopping after this step,", "keeping a snapshot of it", "(Ctrl-C again stops at once)")
"""What the first Ctrl-C prints on stderr, as parts of lines under 80 columns (:func:`first_ctrl_c_text`)."""


FIRST_SIGTERM_PARTS = ("SIGTERM: stopping after this step,", "keeping a snapshot of it", "(SIGTERM again stops at once)")
"""What the first SIGTERM during training prints on stderr (parts of lines, as Ctrl-C's)."""


def first_ctrl_c_text(parts: tuple[str, ...] = FIRST_CTRL_C_PARTS) -> str:
    """``parts`` (:data:`FIRST_CTRL_C_PARTS` by default) in lines under
    :func:`~trainer.contract.textlines.line_width` columns, joined by newlines (no newline at the end)."""
    return "\n".join(fit_lines(parts))


class StoppedAfterStep(KeyboardInterrupt):
    """Ctrl-C asked the run to stop, and the step it came in has finished (``step``: the steps done)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"Ctrl-C after step {step}")
        self.step = step


class TerminatedAfterStep(Terminated):
    """SIGTERM asked the run to stop, and the step it came in has finished (``step``: the steps done)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"terminated by signal {int(signal.SIGTERM)} after step {step}")
        self.step = step


class StopAfterStep:
    """A context around the training loop in which the first SIGINT or SIGTERM asks to stop after
    the step under way (module docstring). Outside the main thread it changes nothing, and it
    leaves a signal alone whose handler is not the one it expects (SIGINT: Python's default;
    SIGTERM: :func:`~trainer.run.status.raise_terminated`), e.g. an ignored SIGINT.

    Args:
        steps: the number of steps done so far (read when the stop is raised).
    """

    def __init__(self, steps: Callable[[], int]) -> None:
        self.steps = steps
        self.requested: int | None = None  # the signal that asked to stop
        self._previous: dict[int, Any] = {}
        self._said = {signal.SIGINT: f"\n{first_ctrl_c_text()}\n".encode(),  # built here: the handler only writes
                      signal.SIGTERM: f"\n{first_ctrl_c_text(FIRST_SIGTERM_PARTS)}\n".encode()}

    def __enter__(self) -> "StopAfterStep":
        if threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._ask)
            if signal.getsignal(signal.SIGTERM) is raise_terminated:
                self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._ask)
        return self

    def _ask(self, signum: int, frame: Any) -> None:
        if self.requested is None:
            self.requested = signum
        signal.signal(signum, self._previous[signum])  # the same signal again: at once
        os.write(2, self._said[signum])  # no lock taken inside a handler

    def check(self, *_: Any) -> None:
        """After a step (an ``on_step`` hook): raise :class:`StoppedAfterStep` when Ctrl-C asked to
        stop, :class:`TerminatedAfterStep` when SIGTERM did."""
        requested, self.requested = self.requested, None
        if requested == signal.SIGTERM:
            raise TerminatedAfterStep(self.steps())
        if requested is not None:
            raise StoppedAfterStep(self.steps())

    def after(self, on_step: Callable[[int, float], None] | None) -> Callable[[int, float], None]:
        """``on_step`` followed by :meth:`check`."""

        def hook(step: int, train_time_s: float) -> None:
            if on_step is not None:
                on_step(step, train_time_s)
            self.check()

        return hook

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) == self._ask:
                signal.signal(signum, previous)
        self._previous = {}
        if exc_type is None:
            self.check()  # a signal after the last step's hook: stop before the evaluation
