"""The photometric loss of the training step (``loss`` block, tiny-cuda-nn loss names)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainer.contract.config import LossConfig

__all__ = ["drop_rays", "photometric_loss"]


def photometric_loss(pred: torch.Tensor, target: torch.Tensor, loss: LossConfig) -> torch.Tensor:
    """Per-element loss summed (the caller normalises). ``pred``, ``target``: [n, 3] float32.

    ``loss.otype``: Huber (``loss.huber_delta``), L2, L1 or RelativeL2 (tiny-cuda-nn:
    (pred − target)² / (pred.detach()² + 0.01)).
    """
    otype = loss.otype
    if otype == "Huber":
        return F.huber_loss(pred, target, delta=loss.huber_delta, reduction="sum")
    if otype == "L2":
        return ((pred - target) ** 2).sum()
    if otype == "L1":
        return (pred - target).abs().sum()
    # RelativeL2 (tiny-cuda-nn): (pred - target)^2 / (pred.detach()^2 + 0.01)
    return ((pred - target) ** 2 / (pred.detach() ** 2 + 1e-2)).sum()


def drop_rays(rgb: torch.Tensor, ray_fits: torch.Tensor | None, target: torch.Tensor) -> torch.Tensor:
    """Rendered colours [n, 3] with the rays a compacted batch left out (``ray_fits`` [n] bool
    false) replaced by their targets: no loss and no gradient from them (None: every ray counts)."""
    if ray_fits is None:
        return rgb
    return torch.where(ray_fits[:, None], rgb, target)
