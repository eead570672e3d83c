"""Evaluations at fixed seconds of training (``training.eval_at_s``): the marks a study's pruner
judges its trials at when its budget is in seconds (its rungs), so that every trial is evaluated
once per rung instead of every N steps.

A mark is taken at the first metrics record (every ``training.log_every`` steps, where the device
is synchronised anyway) whose training time reaches it. The training time is the one the ranks
agree on (:meth:`~trainer.train.loop.Trainer.agreed_train_time_s`: rank 0's), read at the same
steps on every rank, so every rank takes the same marks at the same step. Rank 0's clock is the
one its metrics records carry (a sweep reports each mark at its record's whole second, never
below the mark) and its checkpoints keep (a resumed run does not take a mark again). One
evaluation takes every mark its record has reached; marks already behind a resumed run's
training time are not taken again.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["TimeMarks"]


class TimeMarks:
    """The marks still ahead of the run.

    Args:
        marks_s: whole seconds of training (``training.eval_at_s``), in any order.
        trained_s: the training time the run starts at (a resumed run's); marks at or before it
            are behind the run.
    """

    def __init__(self, marks_s: Iterable[int], trained_s: float = 0.0) -> None:
        self.ahead = sorted(float(m) for m in marks_s if m > trained_s)

    @property
    def pending(self) -> bool:
        """Whether a mark is still ahead."""
        return bool(self.ahead)

    def past(self, budget_s: float | None) -> list[float]:
        """The marks ahead at or past ``budget_s`` seconds of training (a time budget; None: none):
        a run that stops at its budget never reaches them."""
        return [] if budget_s is None else [m for m in self.ahead if m >= budget_s]

    def reached(self, train_time_s: float) -> bool:
        """Whether ``train_time_s`` (agreed by the ranks) reaches the next mark; the marks it
        reaches are taken (one evaluation for all of them)."""
        taken = False
        while self.ahead and train_time_s >= self.ahead[0]:
            self.ahead.pop(0)
            taken = True
        return taken
