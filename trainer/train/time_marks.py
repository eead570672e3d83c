"""Evaluations at fixed seconds of training (``training.eval_at_s``): the marks a study's pruner
judges its trials at when its budget is in seconds (its rungs), so that every trial is evaluated
once per rung instead of every N steps.

A mark is taken at the first check whose training time reaches it. The ranks check at each
metrics record (every ``training.log_every`` steps, where the device is synchronised anyway), at
the end of a run its time budget stops and, between records, at the step the pace predicts for
the next mark (:meth:`TimeMarks.due`; the first check one step after the clock starts, each no
further ahead than the clock has run): a record interval longer than the gap between two marks
does not fold them into one late evaluation. Each check
synchronises the device and, with several ranks, all-reduces rank 0's training time
(:meth:`~trainer.train.loop.Trainer.agreed_train_time_s`). The next check's step is computed from
those agreed values alone, so every rank checks, and takes every mark, at the same step. Rank 0's
clock is the one its metrics records carry (a sweep reports each mark at its record's whole
second, never below the mark) and its checkpoints keep (a resumed run does not take a mark
again). One evaluation takes every mark its check has reached.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["TimeMarks"]


class TimeMarks:
    """The marks still ahead of the run, and the step of the next check between records.

    Args:
        marks_s: whole seconds of training (``training.eval_at_s``), in any order.
        trained_s: the training time the run starts at (a resumed run's; the same on every rank);
            marks at or before it are behind the run.
    """

    def __init__(self, marks_s: Iterable[int], trained_s: float = 0.0) -> None:
        self.ahead = sorted(float(m) for m in marks_s if m > trained_s)
        self.trained_s = float(trained_s)
        self.check_step: int | None = None
        self.last_check: tuple[int, float] | None = None
        self.clock_start: tuple[int, float] | None = None

    @property
    def pending(self) -> bool:
        """Whether a mark is still ahead."""
        return bool(self.ahead)

    def past(self, budget_s: float | None) -> list[float]:
        """The marks ahead at or past ``budget_s`` seconds of training (a time budget; None: none):
        a run that stops at its budget never reaches them."""
        return [] if budget_s is None else [m for m in self.ahead if m >= budget_s]

    def start(self, step: int) -> None:
        """The training clock starts at ``step`` (after start-up) at :attr:`trained_s`: the first
        check between records is the next step's, which measures the pace."""
        self.last_check = self.clock_start = (step, self.trained_s)
        self.check_step = step + 1 if self.ahead else None

    def due(self, step: int) -> bool:
        """Whether ``step`` is the check between records that the pace predicts for the next mark."""
        return self.check_step is not None and step >= self.check_step

    def reached(self, train_time_s: float, step: int | None = None) -> bool:
        """Whether ``train_time_s`` (agreed by the ranks) reaches the next mark; the marks it
        reaches are taken (one evaluation for all of them). With ``step`` (the step checked), the
        next check is scheduled: at the step the pace reaches the next mark (at least one step on;
        none when the clock stood still). The pace, in agreed seconds per step, is the slower of
        the pace since the previous check and since the clock started, and the next check is no
        more steps ahead than the clock has run: a short stretch of steps can miss the slow ones
        that come at intervals (occupancy updates), and a check predicted too early only checks
        again, where one predicted too late takes the mark late."""
        taken = False
        while self.ahead and train_time_s >= self.ahead[0]:
            self.ahead.pop(0)
            taken = True
        if step is not None:
            previous, self.last_check, self.check_step = self.last_check, (step, train_time_s), None
            anchors = [a for a in (previous, self.clock_start) if a is not None and step > a[0] and train_time_s > a[1]]
            paces = [(train_time_s - t) / (step - s) for s, t in anchors]
            if self.ahead and paces:
                # no further ahead than the steps measured so far: the first paces come from few steps
                measured = step - self.clock_start[0] if self.clock_start is not None else 1
                ahead = math.ceil((self.ahead[0] - train_time_s) / max(paces))
                self.check_step = step + max(1, min(ahead, measured))
        return taken
