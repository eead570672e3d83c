"""The time budget's look-ahead (``training.time_budget_s``): how long the next step is expected
to take, so a run never starts a step it expects to overrun its budget.

A step's expected length is the last timed duration of a step of its kind: one that starts with an
occupancy-grid update (on a CPU it can take many times as long as an ordinary one) or one that does
not; before a step of its kind was timed, the other kind's stands in, and before any was timed the
expectation is 0 s (the first step always runs). Start-up steps are not timed
(:mod:`trainer.train.startup`).
"""

from __future__ import annotations

__all__ = ["StepDurations"]


class StepDurations:
    """The last duration of each kind of timed step (module docstring).

    Attributes:
        by_kind: occupancy-update step (True) or ordinary step (False) → its last duration in
            seconds.
    """

    def __init__(self) -> None:
        self.by_kind: dict[bool, float] = {}

    def note(self, occupancy_step: bool, seconds: float) -> None:
        """A timed step of this kind took ``seconds``."""
        self.by_kind[occupancy_step] = seconds

    def expected_s(self, occupancy_step: bool) -> float:
        """Seconds the next step of this kind is expected to take (module docstring)."""
        expected = self.by_kind.get(occupancy_step)
        if expected is None:
            expected = next(iter(self.by_kind.values()), 0.0)
        return expected
