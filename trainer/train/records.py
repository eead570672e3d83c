"""Interval records: what a run writes to ``metrics[.rank<R>].jsonl`` every ``training.log_every``
steps (columns in :mod:`trainer.contract.metrics`, unit in the name).

An :class:`Interval` counts the steps since the last record on the host (rays, samples, skips)
and sums their loss and squared error on the device; :meth:`IntervalRecords.flush` turns it into
one record with one host read (written to the metrics file and, with ``training.tensorboard``, to
rank 0's TensorBoard scalars, :mod:`trainer.metrics_tensorboard`): the counts and rates (this
rank's as ``rank_*``, the job's without the prefix), the phase times of
:class:`~trainer.train.timing.PhaseTimer`, the step's own columns
(:meth:`~trainer.train.step.Step.interval_values`: device sums of the fixed-capacity step, global
throughput and balance of the distributed steps), memory, and once the start-up report. A record
whose loss or whose trainer's parameters are no longer finite stops the run as diverged once it is
written (:func:`~trainer.train.divergence.check_interval`).

Counts cover every step of an interval; times and rates only its timed steps (an interval that
held start-up steps leaves those out, :mod:`trainer.train.startup`), ``timed_steps`` of them. An
interval of start-up steps only (a record at the step the start-up ends) has no timed step: its
times and rates are over the start-up steps' own time (compilation included), never over the
instant between the start-up's end and the record, and its ``timed_steps`` is 0.
"""

from __future__ import annotations

import dataclasses
import math
import resource
import time
from typing import Any, Callable

import torch

from trainer.contract.metrics import PHASES, MetricsWriter
from trainer.metrics_tensorboard import open_scalars
from trainer.train.divergence import check_interval

__all__ = ["Interval", "IntervalRecords", "RunThroughput", "memory_record"]


@dataclasses.dataclass
class Interval:
    """The steps since the last record.

    Attributes:
        loss_sum: sum of the trained steps' losses (0-dim, on the device).
        mse_sum: sum of their mean squared errors (0-dim, on the device).
        t0: ``time.perf_counter()`` at the interval's start (moved on by time that is not training).
        steps, trained, rays, samples, skipped: host counts (``trained``: steps with a loss).
        untimed: start-up steps at the front of the interval (not in its times and rates).
        startup_t0: the interval's ``t0`` before its start-up steps ended (None without any).
    """

    loss_sum: torch.Tensor
    mse_sum: torch.Tensor
    t0: float
    steps: int = 0
    trained: int = 0
    rays: int = 0
    samples: int = 0
    skipped: int = 0
    untimed: int = 0
    startup_t0: float | None = None

    @classmethod
    def start(cls, device: torch.device) -> "Interval":
        """An empty interval starting now."""
        return cls(torch.zeros((), device=device), torch.zeros((), device=device), time.perf_counter())

    def add(self, stats: Any, loss: torch.Tensor, mse: torch.Tensor) -> None:
        """Count one step (:class:`~trainer.train.step.StepStats`, its loss and MSE); an fp16
        overflow step's loss is not data and a step without samples has none."""
        if stats.trained and not stats.skipped:
            self.loss_sum += loss
            self.mse_sum += mse
            self.trained += 1
        self.steps += 1
        self.rays += stats.n_rays
        self.samples += stats.n_samples
        self.skipped += int(stats.skipped)

    @property
    def startup_only(self) -> bool:
        """Whether every step of the interval was a start-up step."""
        return 0 < self.steps <= self.untimed

    @property
    def timed(self) -> int:
        """Steps whose time the interval's times and rates cover (at least 1): the steps after
        the start-up, or the start-up steps themselves when the interval holds nothing else."""
        return max(self.steps, 1) if self.startup_only else max(max(self.steps, 1) - self.untimed, 1)

    def elapsed_s(self) -> float:
        """Seconds the :attr:`timed` steps took so far (at least 1e-9)."""
        t0 = self.startup_t0 if self.startup_only and self.startup_t0 is not None else self.t0
        return max(time.perf_counter() - t0, 1e-9)


def memory_record(device: torch.device) -> dict[str, float]:
    """Peak host RSS, and on CUDA the peak allocated (since the last record: the peak is reset)
    and the reserved device memory, in MiB."""
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    record = {"host_rss_mib": rss_mib}
    if device.type == "cuda":
        record["mem_allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        record["mem_reserved_mib"] = torch.cuda.memory_reserved(device) / 2**20
        torch.cuda.reset_peak_memory_stats(device)
    return record


def interval_record(trainer: Any, interval: Interval) -> dict[str, Any]:
    """The record of ``interval`` (module docstring): the trainer's step settles what it left
    for later first, then its columns follow the common ones."""
    step = trainer.stepper
    step.settle()
    steps = max(interval.steps, 1)
    timed = interval.timed
    elapsed_s = interval.elapsed_s()
    phases = trainer.timer.collect()
    step_time_ms = elapsed_s * 1e3 / timed
    trained = interval.trained
    mean_mse = float(interval.mse_sum) / trained if trained else 0.0
    scaler = trainer.scaler
    record: dict[str, Any] = {
        "rank": trainer.rank,
        "world_size": trainer.world_size,
        "step": trainer.step,
        "wall_time_s": trainer.train_time_s,
        "unix_time_s": time.time(),
        "loss": float(interval.loss_sum) / trained if trained else None,
        "train_psnr_db": -10.0 * math.log10(mean_mse) if mean_mse > 0 else None,
        "lr": float(trainer.optimizer.param_groups[0]["lr"]),  # (a device tensor in a captured step)
        "rays_per_step": interval.rays / steps,
        "samples_per_step": interval.samples / steps,
        "rays_per_s": interval.rays / steps * timed / elapsed_s,
        "throughput_samples_per_s": interval.samples / steps * timed / elapsed_s,
        "rank_rays_per_s": interval.rays / steps * timed / elapsed_s,
        "rank_throughput_samples_per_s": interval.samples / steps * timed / elapsed_s,
        "steps_per_s": timed / elapsed_s,
        "timed_steps": 0 if interval.startup_only else timed,
        "step_time_ms": step_time_ms,
        "occupancy_fraction": trainer.grid.occupancy_fraction(),
        "skipped_steps": interval.skipped,
        "samples_clipped": 0,  # the dynamic step's march buffer grows to fit
        "grad_scale": scaler.get_scale() if scaler.is_enabled() else 1.0,
        "emulated_interconnect": trainer.cfg.distributed.emulate_interconnect if trainer.world_size > 1 else "none",
    }
    named_ms = 0.0
    for phase in PHASES:
        ms = phases.get(phase, 0.0) / timed
        record[f"{phase}_ms"] = ms
        named_ms += ms
    record["other_ms"] = max(step_time_ms - named_ms, 0.0)
    record.update(step.interval_values(interval, elapsed_s, record))
    record.update(memory_record(trainer.device))
    return record


class RunThroughput:
    """The job's samples per second over the timed steps of every record of this process (since
    its start or resume): the sum over records of ``throughput_samples_per_s`` × the record's timed
    seconds (``timed_steps`` / ``steps_per_s``), over the sum of those seconds. A run's summary and
    its ``status.json`` give this mean, not the last interval's rate (which a short last interval
    makes noisy)."""

    def __init__(self) -> None:
        self.samples = 0.0
        self.seconds = 0.0

    def add(self, record: dict[str, Any]) -> None:
        """Count a record's timed steps (a record of start-up steps only has none)."""
        timed, steps_per_s, rate = record.get("timed_steps"), record.get("steps_per_s"), record.get("throughput_samples_per_s")
        if not timed or not steps_per_s or rate is None or not (math.isfinite(steps_per_s) and math.isfinite(rate)):
            return
        seconds = timed / steps_per_s
        self.samples += rate * seconds
        self.seconds += seconds

    def samples_per_s(self) -> float | None:
        """The mean, or None before a timed step was recorded."""
        return self.samples / self.seconds if self.seconds > 0 else None


class IntervalRecords:
    """The records of one :meth:`~trainer.train.loop.Trainer.train` call.

    Args:
        trainer: the trainer (its step, timer, optimiser, grid, counters).
        on_log: called with every record written (a progress display), or None.
    """

    def __init__(self, trainer: Any, on_log: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.trainer = trainer
        run_dir = trainer.run_dir
        self.writer = MetricsWriter(
            run_dir.metrics_path(trainer.rank),
            open_scalars(trainer.cfg, run_dir, trainer.rank, trainer.device, trainer.step),
        ) if run_dir else None
        self.on_log = on_log
        self.interval = Interval.start(trainer.device)
        self.once: dict[str, Any] = {}

    def add(self, stats: Any, loss: torch.Tensor, mse: torch.Tensor) -> None:
        """Count one step into the open interval."""
        self.interval.add(stats, loss, mse)

    def add_once(self, values: dict[str, Any]) -> None:
        """Columns for the next record only (the start-up report)."""
        self.once.update(values)

    def restart_clock(self) -> None:
        """The interval's time starts now; its steps so far are start-up steps (not timed)."""
        self.interval.startup_t0 = self.interval.t0
        self.interval.t0 = time.perf_counter()
        self.interval.untimed = self.interval.steps

    def exclude(self, seconds: float) -> None:
        """Leave ``seconds`` that were not training (an evaluation) out of the interval's time."""
        self.interval.t0 += seconds
        if self.interval.startup_t0 is not None:
            self.interval.startup_t0 += seconds

    def flush(self, eval_result: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write the interval's record (one device read), with the evaluation made at its step if
        any, and start a new interval. Returns the record.

        Raises:
            DivergedError: the record's loss or a parameter of the trainer's field is NaN or
                infinite (the record is written and passed to ``on_log`` first).
        """
        record = interval_record(self.trainer, self.interval)
        if self.once:
            record.update(self.once)
            self.once = {}
        if eval_result is not None:
            record["eval_psnr_db"] = eval_result["mean_psnr_db"]
            record["eval_ssim"] = eval_result["mean_ssim"]
        if self.writer:
            self.writer.write(record)
        self.trainer.run_throughput.add(record)
        if self.on_log:
            self.on_log(record)
        check_interval(record, self.trainer.field, self.trainer.step)
        self.interval = Interval.start(self.trainer.device)
        return record

    def close(self) -> None:
        """Close the metrics file."""
        if self.writer:
            self.writer.close()
