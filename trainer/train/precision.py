"""Numeric precision of the training step (``training.precision``): the autocast context of the
field's forward passes and the TF32 switch of CUDA matmuls."""

from __future__ import annotations

import contextlib

import torch

__all__ = ["autocast", "set_matmul_precision"]


def autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    """The autocast context for ``precision``: bfloat16 for ``"bf16"``, float16 for ``"fp16"``
    (the caller scales gradients), disabled for ``"fp32"`` and ``"tf32"``."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if precision == "fp16":
        return torch.autocast(device_type=device.type, dtype=torch.float16)
    return torch.autocast(device_type=device.type, enabled=False)


def set_matmul_precision(device: torch.device, precision: str) -> None:
    """TF32 matmuls and convolutions on a CUDA ``device`` for ``"tf32"``, off for the other
    precisions (process-wide PyTorch switches; nothing on other devices)."""
    tf32 = precision == "tf32"
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
