"""Phase timers for the training step: CUDA events (no host sync inside the step) or wall clock.

Each phase is also an NVTX range on CUDA, so Nsight Systems shows the same phases, and, while a
``torch.profiler`` window is open (:attr:`PhaseTimer.record_functions`), a ``record_function``
range, so the Chrome traces carry the phase names too. Times are resolved only when
:meth:`PhaseTimer.collect` is called (once per logging interval).

The timer is also where the deliberate faults of ``faults.data_delay_ms`` and
``faults.compute_slowdown`` act (:class:`PhaseFaults`), so they land inside the phase they slow
down on every trainer (single process, data parallel, subgrid).
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from typing import Any

import torch

# Phases whose host time makes up a step's compute for ``faults.compute_slowdown``.
COMPUTE_PHASES = ("march", "compact", "field_forward", "render", "backward")


@dataclasses.dataclass
class PhaseFaults:
    """Sleeps that slow a phase down on purpose (from ``faults.*``; see :class:`FaultsConfig`).

    Args:
        data_delay_ms: slept at the end of every "data" phase (ms, >= 0).
        compute_slowdown: factor >= 1; at the end of "backward" the rank sleeps
            (factor − 1) × the host time of this step's compute phases (CUDA is synchronised first,
            so the GPU work is included).
    """

    data_delay_ms: float = 0.0
    compute_slowdown: float = 1.0

    @property
    def active(self) -> bool:
        return self.data_delay_ms > 0 or self.compute_slowdown > 1.0


class PhaseTimer:
    """Accumulates per-phase time over an interval of steps.

    Args:
        device: the training device; CUDA devices time with CUDA events, others with
            ``time.perf_counter``.
        enabled: when False, :meth:`phase` times nothing (for overhead comparisons); faults still act.
        faults: deliberate slow-downs, or None.
    """

    def __init__(self, device: torch.device, enabled: bool = True, faults: PhaseFaults | None = None) -> None:
        self.cuda = device.type == "cuda"
        self.enabled = enabled
        self.faults = faults if faults is not None and faults.active else None
        self.record_functions = False
        self._events: list[tuple[str, object, object]] = []
        self._host_ms: dict[str, float] = defaultdict(float)
        self._step_compute_s = 0.0
        self._free_events: list[tuple[object, object]] = []

    def phase(self, name: str) -> "_PhaseScope":
        """Time the enclosed block as phase ``name`` (``with timer.phase("march"): ...``).

        A class-based scope with pooled CUDA events: the timers run in every step of a host-bound
        loop, so they avoid generator context managers and per-phase allocations."""
        return _PhaseScope(self, name)

    def _enter(self, scope: "_PhaseScope") -> None:
        if self.record_functions:
            scope.record = torch.profiler.record_function(f"phase:{scope.name}")
            scope.record.__enter__()
        if self.enabled and self.cuda:
            scope.start, scope.end = self._take_events()
            torch.cuda.nvtx.range_push(scope.name)
            scope.start.record()
        scope.t0 = time.perf_counter()

    def _exit(self, scope: "_PhaseScope") -> None:
        if self.faults is not None:
            self._apply_faults(scope.name, scope.t0)
        if self.enabled:
            if self.cuda:
                scope.end.record()
                torch.cuda.nvtx.range_pop()
                self._events.append((scope.name, scope.start, scope.end))
            else:
                self._host_ms[scope.name] += (time.perf_counter() - scope.t0) * 1e3
        if scope.record is not None:
            scope.record.__exit__(None, None, None)

    def _take_events(self) -> tuple[torch.cuda.Event, torch.cuda.Event]:
        if self._free_events:
            return self._free_events.pop()
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def _apply_faults(self, name: str, t0: float) -> None:
        faults = self.faults
        assert faults is not None
        if name == "data":
            self._step_compute_s = 0.0
            if faults.data_delay_ms > 0:
                time.sleep(faults.data_delay_ms / 1e3)
        elif name in COMPUTE_PHASES and faults.compute_slowdown > 1.0:
            if self.cuda:
                torch.cuda.synchronize()
            self._step_compute_s += time.perf_counter() - t0
            if name == "backward":
                time.sleep((faults.compute_slowdown - 1.0) * self._step_compute_s)
                self._step_compute_s = 0.0

    def collect(self) -> dict[str, float]:
        """Total milliseconds per phase since the last call (synchronises CUDA once), then reset."""
        totals: dict[str, float] = defaultdict(float, self._host_ms)
        for name, start, end in self._events:
            end.synchronize()  # type: ignore[attr-defined]  (phases may run on a side stream)
            totals[name] += start.elapsed_time(end)  # type: ignore[attr-defined]
        self._free_events.extend((start, end) for _, start, end in self._events)
        self._events.clear()
        self._host_ms = defaultdict(float)
        return dict(totals)


class _PhaseScope:
    """One ``with timer.phase(name)`` block (see :meth:`PhaseTimer.phase`)."""

    __slots__ = ("timer", "name", "start", "end", "t0", "record")

    def __init__(self, timer: PhaseTimer, name: str) -> None:
        self.timer = timer
        self.name = name
        self.record = None

    def __enter__(self) -> None:
        if self.timer.enabled or self.timer.faults is not None or self.timer.record_functions:
            self.timer._enter(self)
        else:
            self.t0 = None

    def __exit__(self, *exc: object) -> None:
        if self.t0 is not None:
            self.timer._exit(self)


class DeviceClock:
    """Time of one or more spans without a host sync: CUDA events on the current stream, read
    later (after a sync that happens anyway), or the wall clock on the CPU. Starts running on
    construction; :meth:`stop` / :meth:`start` close and reopen spans (e.g. a step's compute
    around its gradient-sync wait).

    Args:
        device: the training device.
    """

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._spans: list[tuple[Any, Any]] = []
        self._open: Any = None
        self.start()

    def start(self) -> None:
        if self.cuda:
            self._open = torch.cuda.Event(enable_timing=True)
            self._open.record()
        else:
            self._open = time.perf_counter()

    def stop(self) -> None:
        assert self._open is not None, "DeviceClock.stop without start"
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
        else:
            end = time.perf_counter()
        self._spans.append((self._open, end))
        self._open = None

    def elapsed_ms(self) -> float:
        """Sum of the stopped spans, ms (waits for the last CUDA event)."""
        if not self._spans:
            return 0.0
        if self.cuda:
            self._spans[-1][1].synchronize()
            return float(sum(start.elapsed_time(end) for start, end in self._spans))
        return sum(end - start for start, end in self._spans) * 1e3
