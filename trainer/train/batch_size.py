"""Batch sizing of the steps that size on the host: rays per step so that samples per step approach
``training.target_samples_per_step`` (instant-ngp's rule, DESIGN.md §2).

After each step, ``samples per ray`` enters an exponential average (0.9 old, 0.1 new) and the next
step draws ``⌈target / average⌉₆₄`` rays, at least 64 and at most ``training.max_rays_per_step``
(both times ``scale``: the data-parallel global batch). With ``training.compact_samples`` the
count that sizes a step is the kept count of a step :data:`KEPT_READ_LAG` steps back, copied to the
host without waiting (:meth:`BatchSizer.note_kept`, :meth:`BatchSizer.settle_kept`). The
fixed-capacity step sizes its batch on the device instead (:mod:`trainer.train.fixed_step`).
"""

from __future__ import annotations

import collections
import math
from typing import Any, Iterable

import torch

from trainer.contract.config import TrainingConfig
from trainer.train.hostcopy import HostCopy

__all__ = ["BatchSizer", "CAPACITY_GRANULARITY", "KEPT_READ_LAG", "RAY_GRANULARITY"]

RAY_GRANULARITY = 64  # rays per step are a multiple of this (instant-ngp uses 256 on GPUs)
CAPACITY_GRANULARITY = 256  # a compacted batch holds a multiple of this many samples
KEPT_READ_LAG = 1  # training.compact_samples: a step's kept count sizes the rays this many steps later


class BatchSizer:
    """Rays per step from the samples per ray seen so far (module docstring).

    Args:
        t: the ``training`` block (initial, target and maximum batch).

    Attributes:
        n_rays: rays of the next step.
        samples_per_ray_ema: the average samples per ray (None before the first count).
        kept_pending: (rays, kept count on its way to the host) of steps not yet sized on.
    """

    def __init__(self, t: TrainingConfig) -> None:
        self.target_samples = t.target_samples_per_step
        self.max_rays = t.max_rays_per_step
        self.n_rays = int(t.initial_rays_per_step)
        self.samples_per_ray_ema: float | None = None
        self.kept_pending: collections.deque[tuple[int, HostCopy]] = collections.deque()

    def resize(self, n_rays: int, n_samples: int, scale: float = 1) -> None:
        """Size the next batch on a step of ``n_rays`` rays that had ``n_samples`` samples;
        ``scale`` multiplies both the sample target and the ray limit (data parallel: the
        global batch of ``scale`` GPUs)."""
        per_ray = n_samples / max(n_rays, 1)
        ema = self.samples_per_ray_ema
        self.samples_per_ray_ema = per_ray if ema is None else 0.9 * ema + 0.1 * per_ray
        wanted = self.target_samples * scale / max(self.samples_per_ray_ema, 1e-3)
        wanted = int(math.ceil(wanted / RAY_GRANULARITY)) * RAY_GRANULARITY
        self.n_rays = max(RAY_GRANULARITY, min(int(self.max_rays * scale), wanted))

    def compact_capacity(self, n_rays: int, n_marched: int) -> int:
        """Samples of a compacted batch: the rays times the kept samples per ray seen so far (about
        ``target_samples_per_step`` once the ray count has adapted), a multiple of 256, at most the
        marched count; the marched count until a kept count has been read."""
        ema = self.samples_per_ray_ema
        if ema is None:
            return n_marched
        wanted = int(math.ceil(n_rays * ema / CAPACITY_GRANULARITY)) * CAPACITY_GRANULARITY
        return max(1, min(n_marched, wanted))

    def note_kept(self, n_rays: int, n_kept: torch.Tensor) -> None:
        """Send a step's kept count (0-dim device tensor) to the host without waiting; it sizes
        the batch when :meth:`settle_kept` reads it."""
        self.kept_pending.append((n_rays, HostCopy(n_kept)))

    def settle_kept(self, keep: int = 0) -> None:
        """Size the batch on the kept counts of earlier steps, oldest first, until at most
        ``keep`` are pending (each read waits only for its own step's count)."""
        while len(self.kept_pending) > keep:
            n_rays, kept = self.kept_pending.popleft()
            n_kept = int(kept.value())
            if n_kept > 0:
                self.resize(n_rays, n_kept)

    def state(self) -> dict[str, Any]:
        """``n_rays``, ``samples_per_ray_ema`` (-1 when unset) and ``kept_pending`` ([rays, kept]
        pairs, read now; saved, not applied: applying them would size the next step early and make
        a run with snapshots differ from one without), as snapshots hold them."""
        return {
            "n_rays": self.n_rays,
            "samples_per_ray_ema": -1.0 if self.samples_per_ray_ema is None else self.samples_per_ray_ema,
            "kept_pending": [[n_rays, int(kept.value())] for n_rays, kept in self.kept_pending],
        }

    def restore(self, n_rays: int, samples_per_ray_ema: float | None, kept_pending: Iterable[Any] = ()) -> None:
        """The sizing state of a resume: rays of the next step, the average (None: unset) and the
        [rays, kept] pairs still to be sized on (this trainer's own pending counts are dropped)."""
        self.n_rays = int(n_rays)
        self.samples_per_ray_ema = samples_per_ray_ema
        self.kept_pending.clear()
        for rays, n_kept in kept_pending:
            self.kept_pending.append((int(rays), HostCopy(torch.tensor(int(n_kept)))))
