"""How many step-budget trials share one GPU by default (:mod:`ngptune.tuning.concurrency` applies it).

Kept apart from the scheduling code so that ``ngptune sweep --help`` can name the value without
importing the study and objective modules.
"""

from __future__ import annotations

__all__ = ["STEP_BUDGET_TRIALS_PER_GPU", "STEP_BUDGET_TRIALS_PER_GPU_ENV"]

#: Trials per GPU of a step-budget study on a GPU host when ``--trials-per-gpu`` is not given: the K
#: of the most trials per hour on one GPU (``bench/sweep_fidelity.py packing``, docs/benchmarks.md,
#: "Trials packed on one GPU": 114, 250 and 451 trials per hour for K = 1, 2, 4 on one H200, lego_400);
#: an environment variable of this name overrides it.
STEP_BUDGET_TRIALS_PER_GPU = 4
STEP_BUDGET_TRIALS_PER_GPU_ENV = "NGPTUNE_STEP_BUDGET_TRIALS_PER_GPU"
