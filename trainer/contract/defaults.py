"""What a training run takes when a flag is left out: the config on a CPU, the run folder, and the
warning for a GPU-sized config about to train on a CPU.

The trainer (:mod:`trainer.cli`) and the driver (``ngptune profile``, which decides before the run
what the run will do) apply the same rules; the caller says whether the run is on a CPU
(:func:`runs_on_cpu`, from the number of CUDA devices it counted).

Stdlib only.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.contract.textlines import fit_lines

if TYPE_CHECKING:
    from trainer.contract.config import TrainConfig

__all__ = [
    "CPU_FRIENDLY_SAMPLES_PER_STEP",
    "CPU_PRESET",
    "cpu_config_warning",
    "default_config_path",
    "default_run_dir",
    "run_device",
    "runs_on_cpu",
]

CPU_PRESET = Path(__file__).resolve().parents[2] / "configs" / "small.json"
"""The config a run without ``--config`` takes on a CPU (:func:`default_config_path`)."""

CPU_FRIENDLY_SAMPLES_PER_STEP = 2**14
"""``training.target_samples_per_step`` above this is a GPU-sized config (:func:`cpu_config_warning`)."""


def runs_on_cpu(device: str | None, cuda_device_count: int) -> bool:
    """Whether a run with ``training.device`` ``device`` (None: the default ``auto``) trains on the
    CPU of a host that shows ``cuda_device_count`` CUDA devices: ``cpu``, or ``auto`` without one.
    A ``cuda`` device is not the CPU (without one, the config check refuses it)."""
    return device == "cpu" or (device in (None, "auto") and cuda_device_count == 0)


def run_device(device: str | None, cuda_device_count: int) -> str:
    """The device a run with ``training.device`` ``device`` (None: the default ``auto``) trains on,
    as its first line names it: ``cpu`` (:func:`runs_on_cpu`), ``cuda`` for ``auto`` with a CUDA
    device, else ``device`` as given (``cuda:1``)."""
    if runs_on_cpu(device, cuda_device_count):
        return "cpu"
    return "cuda" if device in (None, "auto") else device


def default_config_path(config: Path | None, on_cpu: bool) -> Path | None:
    """The config file a run reads: ``config`` as given when there is one; without it, on a CPU
    (``on_cpu``, :func:`runs_on_cpu`) :data:`CPU_PRESET` when it exists (the built-in defaults are
    sized for a GPU: one step of them takes seconds there), else None (the built-in defaults)."""
    if config is not None or not on_cpu or not CPU_PRESET.is_file():
        return config
    return CPU_PRESET


#: ``training.precision`` values that autocast to 16-bit floats: on a CPU they run slower than float32.
HALF_PRECISIONS = ("bf16", "fp16")


def cpu_config_warning(cfg: TrainConfig, on_cpu: bool) -> str | None:
    """A hint, in lines under 80 columns (:func:`~trainer.contract.textlines.fit_lines`), when a
    GPU-sized config is about to train on the CPU (each step of the default 2^18-sample config
    takes seconds there), or a 16-bit precision (a CPU has no fast 16-bit products: the README's
    fox line trained at half the samples/s with ``--precision bf16``), else None."""
    if not on_cpu:
        return None
    notes = []
    if cfg.training.target_samples_per_step > CPU_FRIENDLY_SAMPLES_PER_STEP:
        notes.append(
            f"note: training on the CPU with {cfg.training.target_samples_per_step:,} samples per step, "
            "a GPU-sized config (seconds per step); for a quick CPU run use --config configs/small.json "
            "(fewer samples, a smaller grid and fewer march steps)")
    if cfg.training.precision in HALF_PRECISIONS:
        notes.append(
            f"note: training.precision {cfg.training.precision} on the CPU: 16-bit products are slower "
            "than float32 there (about half the samples/s); fp32 or tf32 (the default) trains faster")
    return "\n".join("\n".join(fit_lines([note])) for note in notes) or None


def default_run_dir(scene_path: Path) -> Path:
    """``runs/<YYYYmmdd-HHMMSS>-<scene folder name>``: the run folder without ``--out``."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{scene_path.name or 'scene'}"
