"""The time budget's look-ahead (``training.time_budget_s``): how long the next step is expected
to take, so a run never starts a step it expects to overrun its budget.

A step's expected length is the last timed duration of a step of its kind: one that starts with an
occupancy-grid update (on a CPU it can take many times as long as an ordinary one) or one that does
not; before a step of its kind was timed, the other kind's stands in, and before any was timed the
expectation is 0 s (the first step always runs). Start-up steps are not timed
(:mod:`trainer.train.startup`).

The ranks of a job stop at the same step (:class:`BudgetAgreement`): at a check they agree, by one
all-reduce of the maximum, on the slowest rank's projected training time and the longest expected
step, and each rank derives from these the same decision and the same step of the next check: as
many steps ahead as surely fit in the budget left (at most :data:`BUDGET_CHECK_EVERY`, at least
one), so far from the budget the ranks meet rarely and near it at every step, and the job stops
within one step of its budget. Where the agreed values arrive a check late (NCCL: the host does
not wait for the device), the estimate adds the longest step for each step since they were agreed.
"""

from __future__ import annotations

import math

__all__ = ["BUDGET_CHECK_EVERY", "BudgetAgreement", "StepDurations"]

BUDGET_CHECK_EVERY = 10
"""Most steps between two of the ranks' agreements on the time budget."""


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

    def longest_s(self) -> float:
        """The longest last duration of either kind (0 before any step was timed)."""
        return max(self.by_kind.values(), default=0.0)


class BudgetAgreement:
    """When the ranks of a job agree on the time budget, and whether it is spent (module docstring).

    Every rank holds one and feeds it the same agreed values at the same steps, so every rank
    decides the same: the collective is called at the same steps on every rank.

    Attributes:
        every: most steps between two checks.
        next_check: the step of the next check (None: the next step is one).
    """

    def __init__(self, every: int = BUDGET_CHECK_EVERY) -> None:
        self.every = every
        self.next_check: int | None = None

    def due(self, step: int) -> bool:
        """Whether the ranks agree before ``step`` (the step about to start)."""
        return self.next_check is None or step >= self.next_check

    def decide(self, step: int, agreed: tuple[int, float, float] | None, budget_s: float) -> bool:
        """Whether the job stops before ``step``, and the step of the next check.

        Args:
            step: the step about to start.
            agreed: ``(at_step, projected_s, step_s)``, agreed by the ranks before step
                ``at_step``: the slowest rank's training time after that step (s), the longest
                expected step of any rank (s); None before any agreement arrived.
            budget_s: ``training.time_budget_s``.
        """
        if agreed is None:
            self.next_check = step + 1
            return False
        at_step, projected_s, step_s = agreed
        estimate = projected_s + (step - at_step) * step_s  # the training time after ``step``
        if estimate >= budget_s:
            return True
        fit = math.floor((budget_s - estimate) / step_s) if step_s > 0 else 0  # steps surely inside the budget
        self.next_check = step + max(1, min(self.every, fit))
        return False
