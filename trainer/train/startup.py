"""Start-up: what a run does before its training clock starts, and how long it took.

A run's first steps compile the Triton kernels (13–15 s on a fresh GPU host), run the first
occupancy-grid pass over every cell and, for the captured step, warm up and capture its CUDA graph.
None of that is training: the trainer runs these *start-up steps*
(:meth:`~trainer.train.step.Step.startup_steps`: the captured step's eager warm-up, its capture
and first replay; one step for the others) before it starts the clock that
``training.time_budget_s`` (``--time-budget``, a study's ``budget.seconds``) and the
``wall_time_s`` metric count. They are real optimiser steps (the step counter counts them); their
seconds, together with the trainer's set-up (pixel table, model), are ``startup_s``, reported in
the first metrics record, in ``status.json`` and on the console.

Whether the kernels came from Triton's on-disk cache is told by the number of cache entries the
start-up added (:func:`triton_cache_entries`): 0 means every kernel was loaded, not compiled.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from trainer.contract.textlines import counted, fit_lines

__all__ = ["StartupClock", "StartupReport", "triton_cache_dir", "triton_cache_entries"]


def triton_cache_dir() -> Path:
    """Triton's kernel cache folder (``TRITON_CACHE_DIR``, else ``~/.triton/cache``)."""
    configured = os.environ.get("TRITON_CACHE_DIR")
    return Path(configured) if configured else Path.home() / ".triton" / "cache"


def triton_cache_entries() -> int:
    """Compiled kernels in Triton's cache folder (one subfolder each; 0 when there is none)."""
    try:
        return sum(1 for entry in os.scandir(triton_cache_dir()) if entry.is_dir())
    except OSError:
        return 0


@dataclasses.dataclass(frozen=True)
class StartupReport:
    """What a run's start-up cost.

    Attributes:
        startup_s: seconds from the trainer's construction to the end of the start-up steps.
        startup_steps: optimiser steps run during start-up.
        kernels_compiled: Triton cache entries the start-up added (0: all kernels from the cache).
        step_kind: the training step (``captured``, ``fixed`` or ``dynamic``).
        step_reason: why not the captured step (empty when it is).
    """

    startup_s: float
    startup_steps: int
    kernels_compiled: int
    step_kind: str
    step_reason: str

    def line(self) -> str:
        """The console's lines (under 80 columns, :func:`~trainer.contract.textlines.fit_lines`):
        start-up seconds, where the kernels came from, the step."""
        kernels = ("kernels from the cache" if self.kernels_compiled == 0
                   else f"{counted(self.kernels_compiled, 'kernel')} compiled")
        step = self.step_kind + (f" — {self.step_reason}" if self.step_reason else "")
        return "\n".join(fit_lines([f"start-up {self.startup_s:.1f} s", f"({kernels};",
                                    f"{counted(self.startup_steps, 'step')}),", "then the clock;", f"step: {step}"]))

    def record(self) -> dict[str, object]:
        """The metrics columns of the report."""
        return {"startup_s": self.startup_s, "startup_steps": self.startup_steps,
                "kernels_compiled": self.kernels_compiled, "step_kind": self.step_kind}


class StartupClock:
    """Times a trainer's start-up from its construction (create it first thing)."""

    def __init__(self) -> None:
        self.created_s = time.perf_counter()
        self.cache_before = triton_cache_entries()

    def report(self, steps: int, step_kind: str, step_reason: str) -> StartupReport:
        """The start-up's report once its ``steps`` steps are done (the device is idle)."""
        return StartupReport(
            startup_s=time.perf_counter() - self.created_s,
            startup_steps=steps,
            kernels_compiled=max(0, triton_cache_entries() - self.cache_before),
            step_kind=step_kind,
            step_reason=step_reason,
        )
