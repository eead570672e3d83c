"""A step's input (rays, targets, marched samples) prepared one step ahead, on a side CUDA stream.

Why: marching sizes its output on the host (the kept-sample count is read back), so a march on the
training stream makes the host wait until every kernel queued before it has run — the previous
step's backward, all-reduce and optimiser included. The host then launches the next forward into
an empty queue and the GPU idles while it does (the step becomes host-launch bound; the profile
names it "compute under-used"). With ``training.prefetch_march`` the trainer draws and marches
step k+1's rays right after it has queued step k's optimiser, on a side stream whose host reads
wait only for the march's own kernels, while the training stream still works on step k. In data
parallel the ranks' hosts then no longer meet at every step's march, so one rank's late launch is
absorbed by the queue instead of stalling both.

What may run ahead and what may not:

* The march reads the occupancy grid, which changes only at an occupancy update (every
  ``training.occupancy_update_every`` steps, at the start of the step). The trainer does not
  prefetch for a step that starts with an update; that step prepares its input in line, after the
  update, on the training stream. The update's kernels may still be running when the *next*
  step's input is prefetched, so the trainer marks the grid's new state with
  :meth:`InputPrefetcher.mark_shared_state_written` and the side stream waits for that point.
* The random draws (pixel choice, sub-pixel jitter, background, march jitter) happen in the same
  order as without prefetching, so training is bit-identical on the CPU (a test checks it). A
  snapshot taken while a prefetched input is pending rewinds those draws and drops the input
  (:meth:`InputPrefetcher.drop`), so a resumed run draws the same rays as the uninterrupted one.

Memory hand-over: tensors made on the side stream are marked ``record_stream`` for the training
stream when taken, so the caching allocator does not give their memory to the next march while the
training stream still reads them (PyTorch CUDA semantics, "Stream semantics of backward passes"
and ``Tensor.record_stream``). On the CPU there is no side stream; the input is prepared a step
early on the host, which costs nothing and keeps one code path under test.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

__all__ = ["InputPrefetcher", "StepInput"]


@dataclasses.dataclass
class StepInput:
    """What one step trains on.

    Attributes:
        batch: the :class:`~trainer.data.sampler.RayBatch` (n rays).
        n_rays: n, the rays of this rank in the step.
        background: [n, 3] float32 background colour per ray.
        target: [n, 3] float32 pixel colour composited on ``background``.
        samples: :class:`~trainer.render.march.PackedSamples` of the rays (S samples).
        n_samples: S (already read on the host).
        rng_before: the random states before this input's draws (trainer-defined dict), to rewind
            a prefetched input that is dropped; None when prepared in line.
    """

    batch: Any
    n_rays: int
    background: torch.Tensor
    target: torch.Tensor
    samples: Any
    n_samples: int
    rng_before: dict[str, Any] | None = None

    def tensors(self) -> list[torch.Tensor]:
        """Every tensor the input holds (batch and samples fields included)."""
        found = [self.background, self.target]
        for holder in (self.batch, self.samples):
            for field in dataclasses.fields(holder):
                value = getattr(holder, field.name)
                if isinstance(value, torch.Tensor):
                    found.append(value)
        return found


class InputPrefetcher:
    """Holds at most one step input prepared ahead of its step (module docstring).

    Args:
        device: the training device; on CUDA a side stream is created for the preparation.
    """

    def __init__(self, device: torch.device) -> None:
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._pending: StepInput | None = None
        self._ready: Any = None
        self._shared_written: Any = None

    @property
    def pending(self) -> StepInput | None:
        """The prefetched input not yet taken, or None."""
        return self._pending

    def mark_shared_state_written(self) -> None:
        """Call after queuing writes (on the current stream) to state that ``prepare`` reads,
        e.g. an occupancy-grid update: later preparations on the side stream wait for them."""
        if self.stream is not None:
            self._shared_written = torch.cuda.Event()
            self._shared_written.record()

    def prefetch(self, prepare: Callable[[], StepInput], rng_before: dict[str, Any]) -> None:
        """Run ``prepare()`` now, on the side stream on CUDA, and keep its result for the next
        :meth:`take`. ``rng_before`` is stored with it (see :attr:`StepInput.rng_before`).

        The side stream does not wait for the training stream: ``prepare`` must read only what
        the training stream does not write meanwhile (pixels, the occupancy grid between updates),
        or wait for such writes through :meth:`mark_shared_state_written`.
        """
        assert self._pending is None, "one prefetched step input at a time"
        if self.stream is None:
            step_input = prepare()
        else:
            if self._shared_written is not None:
                self.stream.wait_event(self._shared_written)
                self._shared_written = None
            with torch.cuda.stream(self.stream):
                step_input = prepare()
            self._ready = torch.cuda.Event()
            self._ready.record(self.stream)
        step_input.rng_before = rng_before
        self._pending = step_input

    def take(self, n_rays: int) -> StepInput | None:
        """The prefetched input if it holds ``n_rays`` rays (else it stays pending, for the caller
        to :meth:`drop` and rewind), ready for use on the current stream; None when there is none."""
        step_input = self._pending
        if step_input is None or step_input.n_rays != n_rays:
            return None
        self._pending = None
        if self.stream is not None:
            current = torch.cuda.current_stream(self.stream.device)
            current.wait_event(self._ready)
            for tensor in step_input.tensors():
                if tensor.device.type == "cuda":
                    tensor.record_stream(current)
            self._ready = None
        return step_input

    def drop(self) -> StepInput | None:
        """Forget the pending input (returned so the caller can rewind its random draws)."""
        # its tensors were made on the side stream and never used elsewhere: freeing them is safe
        step_input, self._pending, self._ready = self._pending, None, None
        return step_input
