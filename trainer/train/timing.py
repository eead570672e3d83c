"""Phase timers for the training step: CUDA events (no host sync inside the step) or wall clock.

Each phase is also an NVTX range on CUDA, so Nsight Systems shows the same phases.
Times are resolved only when :meth:`PhaseTimer.collect` is called (once per logging interval).
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from typing import Iterator

import torch


class PhaseTimer:
    """Accumulates per-phase time over an interval of steps.

    Args:
        device: the training device; CUDA devices time with CUDA events, others with
            ``time.perf_counter``.
        enabled: when False, :meth:`phase` is a no-op context (for overhead comparisons).
    """

    def __init__(self, device: torch.device, enabled: bool = True) -> None:
        self.cuda = device.type == "cuda"
        self.enabled = enabled
        self._events: list[tuple[str, object, object]] = []
        self._host_ms: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the enclosed block as phase ``name``."""
        if not self.enabled:
            yield
            return
        if self.cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.nvtx.range_push(name)
            start.record()
            try:
                yield
            finally:
                end.record()
                torch.cuda.nvtx.range_pop()
                self._events.append((name, start, end))
        else:
            t0 = time.perf_counter()
            try:
                yield
            finally:
                self._host_ms[name] += (time.perf_counter() - t0) * 1e3

    def collect(self) -> dict[str, float]:
        """Total milliseconds per phase since the last call (synchronises CUDA once), then reset."""
        totals: dict[str, float] = defaultdict(float, self._host_ms)
        if self._events:
            self._events[-1][2].synchronize()  # type: ignore[attr-defined]
            for name, start, end in self._events:
                totals[name] += start.elapsed_time(end)  # type: ignore[attr-defined]
        self._events.clear()
        self._host_ms = defaultdict(float)
        return dict(totals)
