"""The process-group backend rule and the emulated interconnects.

``distributed.backend`` ``auto`` → NCCL for ranks on CUDA devices, gloo otherwise (DESIGN.md §3;
:func:`choose_backend`, the one place that rule lives; :func:`planned_backend` predicts it for a
launcher or the driver before any rank starts, from the number of CUDA devices the caller counted).
``distributed.emulate_interconnect`` maps to NCCL variables (:data:`EMULATED_INTERCONNECT_ENV`).

Stdlib only: the ranks count their devices with torch (:func:`trainer.parallel.dist_env.visible_cuda_devices`),
the driver asks a trainer process (``python -m trainer.tools.devices``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.contract.errors import ConfigError

if TYPE_CHECKING:
    from trainer.contract.config import TrainConfig

__all__ = [
    "EMULATED_INTERCONNECT_ENV",
    "check_run_emulation",
    "choose_backend",
    "interconnect_env",
    "planned_backend",
]

# ``distributed.emulate_interconnect`` → NCCL variables that make one NVLink host's ranks talk
# like another link (DESIGN.md §5; measured ~26 GB/s and ~3.6 GB/s busbw in ANCHORS.md).
EMULATED_INTERCONNECT_ENV: dict[str, dict[str, str]] = {
    "none": {},
    "nvlink": {},
    "pcie": {"NCCL_P2P_DISABLE": "1"},
    "sockets": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
}


def interconnect_env(name: str, backend: str) -> dict[str, str]:
    """The NCCL variables that emulate interconnect ``name`` (see :data:`EMULATED_INTERCONNECT_ENV`).

    Raises:
        ConfigError: for an unknown name, or any emulation but ``"none"`` on a backend other than NCCL.
    """
    if name not in EMULATED_INTERCONNECT_ENV:
        raise ConfigError(
            f"distributed.emulate_interconnect: expected one of {', '.join(EMULATED_INTERCONNECT_ENV)}, got {name!r}"
        )
    if name != "none" and backend != "nccl":
        raise ConfigError(
            f"distributed.emulate_interconnect: {name!r} works through NCCL variables, but this run uses "
            f"the {backend} backend (CPU); use 'none' or train on GPUs"
        )
    return dict(EMULATED_INTERCONNECT_ENV[name])


def choose_backend(backend: str, on_cuda: bool) -> str:
    """The process-group backend for ``distributed.backend`` (or ``bench-comm --backend``)
    ``backend``: ``auto`` → ``"nccl"`` when the ranks hold CUDA tensors (``on_cuda``), else
    ``"gloo"`` (DESIGN.md §3); an explicit name as given (the caller checks it can work)."""
    if backend == "auto":
        return "nccl" if on_cuda else "gloo"
    return backend


def planned_backend(cfg: TrainConfig, cuda_device_count: int) -> str:
    """The backend the ranks of a training run will choose (:func:`trainer.parallel.dist_env.detect_dist_env`),
    known before any of them starts: on CUDA when ``training.device`` is not ``cpu`` and this host
    shows a CUDA device (``cuda_device_count``)."""
    return choose_backend(cfg.distributed.backend, on_cuda=cfg.training.device != "cpu" and cuda_device_count > 0)


def check_run_emulation(cfg: TrainConfig, cuda_device_count: int) -> None:
    """Refuse ``distributed.emulate_interconnect`` for a training run whose ranks will use gloo
    (:func:`planned_backend`), before any of them starts (they would each fail with the same error).

    Raises:
        ConfigError: naming ``distributed.emulate_interconnect`` (:func:`interconnect_env`).
    """
    interconnect_env(cfg.distributed.emulate_interconnect, planned_backend(cfg, cuda_device_count))
