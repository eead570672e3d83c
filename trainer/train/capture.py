"""The fixed-capacity step captured once in a CUDA graph and replayed (``training.cuda_graphs``).

A replay costs the host one launch for the whole step (march, compaction, field forward and
backward, compositing, loss, Adam with the hash grid's lazy update, batch sizing, interval sums),
so the step no longer waits for the host (PyTorch, "CUDA Graphs": ``torch.cuda.CUDAGraph``,
whole-network capture). Why a ``CUDAGraph`` and not ``torch.compile(mode="reduce-overhead")``:
the step's kernels are already Triton kernels with hand-written backward functions and data-
dependent loops; compile would trace them as opaque calls and add guards and recompiles for the
same CUDA graph underneath (``docs/benchmarks.md``, "Training step rate, one GPU", keeps the
measurement of ``torch.compile`` on the step's reference compositing and loss).

How (:class:`CapturedStep`):

* the first :data:`WARMUP_STEPS` steps run eagerly on a side stream (the documented warm-up that
  lets autograd, the optimiser state and the kernels' caches settle); they are real steps;
* the next step is captured (the custom CUDA generators registered with the graph, so each replay
  draws new numbers and their states stay readable for snapshots) and replayed; each later step
  is one replay;
* the learning rate lives in one device tensor that both parameter groups read; the host computes
  the schedule (it knows the step without asking the device) and writes the tensor only when the
  value changes (once per ``optimizer.decay_interval``), outside the graph;
* the occupancy-grid update runs eagerly between replays at its cadence: the grid's tensors are
  updated in place, so the graph reads the new grid;
* phase times (``profile.phase_timers``): a replay has no phases; the first step of every logging
  interval runs the same body eagerly with the timers on (the sampling mode), and the interval's
  phase columns are that step's times;
* a snapshot load or anything else that replaces the optimiser's tensors calls
  :meth:`CapturedStep.reset`; the next step captures again.

:func:`trainer.train.step_choice.capture_blockers` lists what the captured step does not cover;
``on`` is then a ConfigError naming them, and ``auto`` (the default) runs the dynamic step and
says why (:attr:`~trainer.train.step_choice.StepChoice.reason`). ``dynamic`` asks for the dynamic
step outright.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

__all__ = ["CapturedStep", "WARMUP_STEPS"]

WARMUP_STEPS = 3


class CapturedStep:
    """``body`` (one step, queued on the current stream) warmed up, captured and replayed.

    Args:
        body: the step body (:meth:`FixedCapacityStep.run`).
        trainer: its trainer (optimiser, timer, generators, learning-rate schedule).
    """

    def __init__(self, body: Callable[[], None], trainer: Any) -> None:
        self.body = body
        self.trainer = trainer
        self.graph: torch.cuda.CUDAGraph | None = None
        self.eager_steps = 0
        self.timed_steps = 0
        self.lr = torch.zeros((), device=trainer.device)
        self.side = torch.cuda.Stream(trainer.device)
        self._lr_value: float | None = None

    def take_timed_steps(self) -> int:
        """Eager (timed) steps since the last call."""
        timed, self.timed_steps = self.timed_steps, 0
        return timed

    def reset(self) -> None:
        """Forget the graph (the next step warms up and captures again)."""
        self.graph, self.eager_steps = None, 0

    def _generators(self) -> list[torch.Generator]:
        tr = self.trainer
        found = [tr.generator, tr.grid_generator, *tr.sampler.generators()]
        unique: dict[int, torch.Generator] = {}
        for generator in found:
            if generator is not None and generator.device.type == "cuda":
                unique.setdefault(id(generator), generator)
        return list(unique.values())

    def _set_lr(self) -> None:
        """The schedule's rate for this step into the shared tensor (written only on change)."""
        tr = self.trainer
        tr.optim.set_learning_rate(tr.step)  # host numbers in the groups
        value = float(tr.optimizer.param_groups[0]["lr"])
        if value != self._lr_value:
            self.lr.fill_(value)
            self._lr_value = value
        for group in tr.optimizer.param_groups:
            group["lr"] = self.lr
            group["capturable"] = True  # (fused groups keep their step on the device already)

    def advance(self, sample_phases: bool) -> None:
        """Run one step: eagerly while warming up (or when ``sample_phases``), else a replay
        (capturing first when there is no graph)."""
        tr = self.trainer
        self._set_lr()
        if self.eager_steps < WARMUP_STEPS or sample_phases:
            self.eager_steps += 1
            self.timed_steps += 1
            side = self.side
            side.wait_stream(torch.cuda.current_stream(tr.device))
            with torch.cuda.stream(side):
                self.body()
            torch.cuda.current_stream(tr.device).wait_stream(side)
            return
        if self.graph is None:
            self._capture()
        self.graph.replay()

    def _capture(self) -> None:
        tr = self.trainer
        torch.cuda.synchronize(tr.device)
        graph = torch.cuda.CUDAGraph()
        for generator in self._generators():
            graph.register_generator_state(generator)
        timer = tr.timer
        enabled, record = timer.enabled, timer.record_functions
        timer.enabled, timer.record_functions = False, False
        tr.optimizer.zero_grad(set_to_none=True)
        try:
            with torch.cuda.graph(graph):
                self.body()
        finally:
            timer.enabled, timer.record_functions = enabled, record
        self.graph = graph
