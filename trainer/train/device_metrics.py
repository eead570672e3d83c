"""Interval metrics summed on the device and read on the host once per logging interval.

A step that the host never waits for cannot hand its loss or sample count back as host numbers;
:class:`DeviceIntervalMetrics` adds each step's values into one float64 device vector (one stack
and one add per step, both capturable) and :meth:`DeviceIntervalMetrics.read` copies it to the
host when a metrics record is written (the interval's one synchronisation).
"""

from __future__ import annotations

import torch

__all__ = ["DeviceIntervalMetrics", "INTERVAL_FIELDS"]

# what each step adds, in order (sums over the interval; ``overflow_run_max`` is a maximum)
INTERVAL_FIELDS = ("loss", "mse", "trained", "rays", "samples", "skipped", "samples_clipped")


class DeviceIntervalMetrics:
    """Sums of :data:`INTERVAL_FIELDS` over the steps since the last :meth:`read`, plus the longest
    run of consecutive skipped steps (the fp16 guard) and the current run.

    Args:
        device: where the sums live.
    """

    def __init__(self, device: torch.device) -> None:
        self.sums = torch.zeros(len(INTERVAL_FIELDS), dtype=torch.float64, device=device)
        self.skip_run = torch.zeros((), dtype=torch.float64, device=device)
        self.skip_run_max = torch.zeros((), dtype=torch.float64, device=device)
        # the largest batch the sizing wanted, and the marched samples it needs (capacity fitting)
        self.need_max = torch.zeros(2, dtype=torch.float64, device=device)

    def note_need(self, rays_wanted: torch.Tensor, march_needed: torch.Tensor) -> None:
        """Keep the interval's maxima of the rays the batch sizing wanted and the marched samples
        those rays need (0-dim each)."""
        torch.maximum(self.need_max, torch.stack([rays_wanted.double(), march_needed.double()]), out=self.need_max)

    def add(self, loss: torch.Tensor, mse: torch.Tensor, rays: torch.Tensor, samples: torch.Tensor,
            skipped: torch.Tensor, samples_clipped: torch.Tensor) -> None:
        """Add one step: ``loss``, ``mse`` (0-dim, counted only when not ``skipped``), ``rays``,
        ``samples`` and ``samples_clipped`` (0-dim counts), ``skipped`` (0-dim bool)."""
        skipped = skipped.to(torch.float64)
        trained = 1.0 - skipped
        step = torch.stack([loss.detach().double() * trained, mse.double() * trained, trained,
                            rays.double(), samples.double(), skipped, samples_clipped.double()])
        self.sums.add_(step)
        self.skip_run.mul_(skipped).add_(skipped)
        torch.maximum(self.skip_run_max, self.skip_run, out=self.skip_run_max)

    def read(self) -> dict[str, float]:
        """The interval's sums by name, ``skip_run_max``, ``rays_wanted_max`` and
        ``march_needed_max``, then zeroed (one host read)."""
        values = torch.cat([self.sums, self.skip_run_max[None], self.need_max]).tolist()
        self.sums.zero_()
        self.skip_run_max.copy_(self.skip_run)
        self.need_max.zero_()
        n = len(INTERVAL_FIELDS)
        return {**dict(zip(INTERVAL_FIELDS, values[:n])), "skip_run_max": values[n],
                "rays_wanted_max": values[n + 1], "march_needed_max": values[n + 2]}
