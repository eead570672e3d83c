"""The profiling window of a run: ``torch.profiler`` over ``profile.trace_steps`` and/or the CUDA
profiler range (cudaProfilerStart/Stop) that ``nsys profile --capture-range=cudaProfilerApi`` waits for.

:class:`TraceSchedule` opens a :class:`TraceWindow` at the window's first step and closes it at its
end step (or when training stops inside it, keeping what was recorded).
"""

from __future__ import annotations

from pathlib import Path

import torch

from trainer.contract.config import ProfileConfig
from trainer.contract.rundir import RunDir
from trainer.train.timing import PhaseTimer

__all__ = ["TraceSchedule", "TraceWindow", "warm_profiler"]


class TraceWindow:
    """One open profiling window; :meth:`start` at its first step, :meth:`stop` after its last.

    Args:
        device: the training device (CUDA activities are recorded on CUDA devices).
        trace_path: where the Chrome trace goes (JSON, ``chrome://tracing`` / Perfetto / Holistic
            Trace Analysis format), or None for no torch.profiler trace.
        cuda_profiler_range: also call ``cudaProfilerStart``/``cudaProfilerStop`` (CUDA only).
        timer: the run's phase timer; while the window is open its phases are ``record_function``
            ranges named ``phase:<name>`` in the trace.
    """

    def __init__(self, device: torch.device, trace_path: Path | None, cuda_profiler_range: bool, timer: PhaseTimer) -> None:
        self.cuda = device.type == "cuda"
        self.trace_path = trace_path
        self.cuda_profiler_range = cuda_profiler_range and self.cuda
        self.timer = timer
        self._profiler: torch.profiler.profile | None = None

    def start(self) -> None:
        if self.trace_path is not None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.cuda:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._profiler = torch.profiler.profile(activities=activities, record_shapes=False, with_stack=False)
            self._profiler.__enter__()
            self.timer.record_functions = True
        if self.cuda_profiler_range:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()

    def stop(self) -> None:
        if self.cuda_profiler_range:
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            self.cuda_profiler_range = False
        if self._profiler is not None:
            self.timer.record_functions = False
            profiler, self._profiler = self._profiler, None
            profiler.__exit__(None, None, None)
            assert self.trace_path is not None
            self.trace_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.trace_path.with_name(f".{self.trace_path.name}.tmp")
            profiler.export_chrome_trace(str(tmp))
            tmp.replace(self.trace_path)


class TraceSchedule:
    """The ``profile.trace_steps`` / ``profile.cuda_profiler_range`` window of a rank's run.

    Args:
        profile: the ``profile`` block (:meth:`~trainer.contract.config.ProfileConfig.window`).
        device: the training device.
        run_dir: where the Chrome trace goes (``traces/``), or None for no trace file.
        rank: this process's rank (names the trace).
        timer: the run's phase timer.
    """

    def __init__(self, profile: ProfileConfig, device: torch.device, run_dir: RunDir | None, rank: int,
                 timer: PhaseTimer) -> None:
        self.profile = profile
        self.device = device
        self.run_dir = run_dir
        self.rank = rank
        self.timer = timer
        self.window: TraceWindow | None = None
        if profile.trace_steps is not None and run_dir is not None:
            warm_profiler()

    def at_step(self, step: int) -> None:
        """Open the window before its first step ``step``, close it at its end step."""
        bounds = self.profile.window()
        if bounds is None:
            return
        start, stop = bounds
        if self.window is None and start <= step < stop:
            trace_path = None
            if self.profile.trace_steps is not None and self.run_dir is not None:
                trace_path = self.run_dir.trace_path(self.rank)
            self.window = TraceWindow(self.device, trace_path, self.profile.cuda_profiler_range, self.timer)
            self.window.start()
        elif self.window is not None and step >= stop:
            self.close()

    def close(self) -> None:
        """Close an open window (training ended inside it: what was recorded is kept)."""
        if self.window is not None:
            self.window.stop()
            self.window = None


def warm_profiler() -> None:
    """Import what opening a ``torch.profiler`` window imports (``torch._dynamo``, 1-2 s on a CPU),
    now, while the trainer is built: left to the window's first step it would land inside a timed
    interval and be counted as step time outside every named phase."""
    import torch._dynamo  # noqa: F401
