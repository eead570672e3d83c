"""Metric records and evaluations as TensorBoard scalars (``tensorboard --logdir runs/``).

The :class:`~trainer.contract.metrics.MetricsWriter` of rank 0 hands each record it writes to
:class:`TensorBoardScalars` (``training.tensorboard``, on when the ``tensorboard`` package is
installed), so the scalars are written at the logging interval, never per step. Events go into the
run folder (:attr:`trainer.contract.rundir.RunDir.tensorboard_dir`) through ``torch.utils.tensorboard``'s
``SummaryWriter``, flushed after every record, so a killed run keeps what it logged; sweep trials
are runs in the study folder, so ``tensorboard --logdir <study>/trials`` compares them.

Tags (the step is the record's ``step``): ``train/`` loss, PSNR, learning rate, skipped steps,
clipped samples, gradient scale; ``speed/`` steps/s, samples/s, rays/s, step time; ``batch/`` rays
and samples per step and samples per ray; ``phase_ms/<phase>`` the mean time per step of each
phase; ``memory/`` device (allocated, reserved) and host memory; ``gpu/`` utilisation and memory
used from NVML on CUDA (when NVML answers); ``model/occupancy_fraction``; ``parallel/``
imbalance, ray share, gradient bytes and bus bandwidth; ``eval/`` PSNR, SSIM and the background's
PSNR of each evaluation (:func:`write_evaluation`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from trainer.contract.metrics import PHASES

__all__ = ["TAGS", "TensorBoardScalars", "open_scalars", "tensorboard_available", "write_evaluation"]

TAGS: dict[str, str] = {
    "loss": "train/loss",
    "train_psnr_db": "train/psnr_db",
    "lr": "train/lr",
    "skipped_steps": "train/skipped_steps",
    "samples_clipped": "train/samples_clipped",
    "grad_scale": "train/grad_scale",
    "steps_per_s": "speed/steps_per_s",
    "throughput_samples_per_s": "speed/samples_per_s",
    "rays_per_s": "speed/rays_per_s",
    "step_time_ms": "speed/step_time_ms",
    "rays_per_step": "batch/rays_per_step",
    "samples_per_step": "batch/samples_per_step",
    **{f"{phase}_ms": f"phase_ms/{phase}" for phase in (*PHASES, "other")},
    "mem_allocated_mib": "memory/device_allocated_mib",
    "mem_reserved_mib": "memory/device_reserved_mib",
    "host_rss_mib": "memory/host_rss_mib",
    "occupancy_fraction": "model/occupancy_fraction",
    "imbalance": "parallel/imbalance",
    "ray_share": "parallel/ray_share",
    "comm_bytes_per_step": "parallel/comm_bytes_per_step",
    "comm_busbw_gb_per_s": "parallel/comm_busbw_gb_per_s",
}
"""Metrics column → TensorBoard tag. Columns not named here (the record's identity: step, rank,
wall time; the evaluation's, written by :func:`write_evaluation`) are not scalars of their own."""

EVAL_TAGS = {"mean_psnr_db": "eval/psnr_db", "mean_ssim": "eval/ssim", "background_psnr_db": "eval/background_psnr_db"}


def tensorboard_available() -> bool:
    """Whether ``torch.utils.tensorboard`` imports (it needs the ``tensorboard`` package)."""
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        return False
    return True


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class TensorBoardScalars:
    """One run's TensorBoard event file (module docstring).

    Args:
        log_dir: the folder of the event files (created when missing).
        device: the training device; on CUDA each record adds NVML's utilisation and memory.
        purge_step: the step after a resumed run's first: events from this step on left by the
            earlier run are dropped from view (TensorBoard's ``purge_step``), its events up to the
            step the run resumed at are kept.
    """

    def __init__(self, log_dir: Path, device: Any = None, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step or None)
        self._cuda_index = (device.index or 0) if getattr(device, "type", None) == "cuda" else None
        self._key = _folder_key(log_dir)
        _OPEN.setdefault(self._key, self)

    def write(self, record: dict[str, Any]) -> None:
        """The scalars of one metrics record (:data:`TAGS`, samples per ray, NVML's readings)."""
        step = int(record["step"])
        for column, tag in TAGS.items():
            if _finite(record.get(column)):
                self._writer.add_scalar(tag, float(record[column]), step)
        rays, samples = record.get("rays_per_step"), record.get("samples_per_step")
        if _finite(rays) and _finite(samples) and rays > 0:
            self._writer.add_scalar("batch/samples_per_ray", samples / rays, step)
        for tag, value in self._gpu_readings().items():
            self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def _gpu_readings(self) -> dict[str, float]:
        """``gpu/utilization_percent`` and ``gpu/memory_used_mib`` from NVML, or nothing (CPU, or
        NVML not answering)."""
        if self._cuda_index is None:
            return {}
        import torch

        readings = {}
        for tag, name, scale in (("gpu/utilization_percent", "utilization", 1.0),
                                 ("gpu/memory_used_mib", "device_memory_used", 2.0**-20)):
            try:
                readings[tag] = float(getattr(torch.cuda, name)(self._cuda_index)) * scale
            except Exception:  # noqa: BLE001 — NVML missing or refusing, an older torch: the record has the allocator's memory
                continue
        return readings

    def write_evaluation(self, result: dict[str, Any]) -> None:
        """The means of one evaluation (``eval.json``'s ``mean_psnr_db``, ``mean_ssim``,
        ``background_psnr_db``) at its ``step``."""
        for key, tag in EVAL_TAGS.items():
            if _finite(result.get(key)):
                self._writer.add_scalar(tag, float(result[key]), int(result["step"]))
        self._writer.flush()

    def close(self) -> None:
        if _OPEN.get(self._key) is self:
            del _OPEN[self._key]
        self._writer.close()


_OPEN: dict[str, TensorBoardScalars] = {}
"""Event folder → the training's writer while it is open, so evaluations during training add to
its event file instead of starting one each (:func:`write_evaluation`)."""


def _folder_key(log_dir: Path) -> str:
    return str(Path(log_dir).resolve())


def open_scalars(cfg: Any, run_dir: Any, rank: int, device: Any = None, start_step: int = 0) -> TensorBoardScalars | None:
    """The run's :class:`TensorBoardScalars` when ``training.tensorboard`` is on, the package is
    installed, there is a run directory and this is rank 0; else None.

    Args:
        cfg: the run's config; run_dir: its :class:`~trainer.contract.rundir.RunDir` or None; rank: this
            process's rank; device: the training device; start_step: the step training starts at
            (a resumed run's: the earlier run's record at that step stays, later ones are purged).
    """
    if run_dir is None or rank != 0 or not cfg.training.tensorboard or not tensorboard_available():
        return None
    return TensorBoardScalars(run_dir.tensorboard_dir, device, purge_step=start_step + 1 if start_step else None)


def write_evaluation(cfg: Any, run_dir: Any, result: dict[str, Any]) -> None:
    """One evaluation's scalars into the run's events (nothing when :func:`open_scalars` would
    give None): through the training's writer while it is open (the evaluations during training),
    else a short-lived writer of its own (the final evaluation comes after the training's writer
    closed), so a run keeps one event file per writer, not one per evaluation."""
    if run_dir is not None and cfg.training.tensorboard:
        live = _OPEN.get(_folder_key(run_dir.tensorboard_dir))
        if live is not None:
            live.write_evaluation(result)
            return
    scalars = open_scalars(cfg, run_dir, 0)
    if scalars is not None:
        try:
            scalars.write_evaluation(result)
        finally:
            scalars.close()
