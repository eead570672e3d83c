"""Divergence: a training loss or a trained tensor that is no longer finite (NaN or ±inf).

A learning rate far too large (``optimizer.learning_rate=1e30``) or an overflowing step turns the
parameters into NaN within a few steps; the field then renders nothing, the occupancy grid empties
and, left alone, a run would end "completed" with the background-only PSNR, or fail later with a
message about empty occupancy cells that names the wrong cause. The checks here stop it at once
and say what happened: :class:`DivergedError` names the step and the first non-finite tensor.

Cost: no step is made to wait. The checks run where the host already reads the device — when an
interval's metrics record is written (its loss is a host number there, from the dynamic step's sums
or the fixed-capacity step's device sums, :mod:`trainer.train.device_metrics`) and before a snapshot
is written — and add one read of a ``[n_tensors]`` bool vector each time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from trainer.contract.errors import TrainingError

__all__ = ["DivergedError", "check_interval", "check_state_dict", "diverged_instead", "first_nonfinite"]

LOSS = "loss"
"""The name :class:`DivergedError` gives the training loss when it is the first non-finite value."""

CURE = ("lower optimizer.learning_rate (or training.precision fp32 if a reduced precision overflowed), "
        "and resume from the last finite snapshot or start again")


class DivergedError(TrainingError):
    """Training diverged: the loss or a parameter is NaN or infinite.

    Attributes:
        step: the step at which it was found (the first step of the check that saw it; the values
            went bad at or before it, after the previous check).
        tensor: the first non-finite tensor's name (a parameter, e.g. ``encoding.params``), or
            ``"loss"`` when the parameters are finite but the interval's loss is not.
    """

    def __init__(self, step: int, tensor: str, cause: str | None = None, kept: str | None = None) -> None:
        what = "the training loss is" if tensor == LOSS else f"parameter {tensor} is"
        extra = f" ({cause})" if cause else ""
        model = f"; {kept}" if kept else ""
        super().__init__(f"training diverged at step {step}: {what} not finite (NaN or inf){extra}{model}; {CURE}")
        self.step = step
        self.tensor = tensor
        self.cause = cause

    def keeping(self, model_path: object | None) -> DivergedError:
        """The same error saying where the run's last finite model is (``model_path``: the newest
        snapshot or checkpoint written before the divergence, None when there is none)."""
        kept = (f"the last finite model is {model_path}" if model_path is not None else
                "no snapshot was written before it (--snapshot-every N keeps one)")
        return DivergedError(self.step, self.tensor, self.cause, kept)


def first_nonfinite(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> str | None:
    """The name of the first floating-point tensor holding a NaN or ±inf, or None.

    Args:
        named_tensors: ``(name, tensor)`` pairs (e.g. ``module.named_parameters()``), any device.

    Returns:
        The first bad name in the given order; one device→host read for all of them.
    """
    names: list[str] = []
    finite: list[torch.Tensor] = []
    for name, tensor in named_tensors:
        if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel() > 0:
            names.append(name)
            finite.append(torch.isfinite(tensor.detach()).all().to("cpu", non_blocking=False))
    if not finite:
        return None
    flags = torch.stack(finite).tolist()
    return next((name for name, ok in zip(names, flags) if not ok), None)


def check_interval(record: Mapping[str, Any], model: torch.nn.Module, step: int) -> None:
    """Stop a run whose interval record or model is no longer finite.

    Args:
        record: the interval's metrics record (its ``loss`` a host float or None).
        model: the trained module (its parameters are checked).
        step: the record's step.

    Raises:
        DivergedError: a parameter (named first) or the record's ``loss`` is NaN or infinite.
    """
    tensor = first_nonfinite(model.named_parameters())
    loss = record.get(LOSS)
    if tensor is None and isinstance(loss, float) and not math.isfinite(loss):
        tensor = LOSS
    if tensor is not None:
        raise DivergedError(step, tensor)


def check_state_dict(state: Mapping[str, torch.Tensor], step: int) -> None:
    """Refuse to write a snapshot of a diverged model (it would replace the last usable one).

    Raises:
        DivergedError: a tensor of ``state`` (a model's ``state_dict``) is NaN or infinite.
    """
    tensor = first_nonfinite(state.items())
    if tensor is not None:
        raise DivergedError(step, tensor, "found while writing a snapshot; the snapshot was not written")


def diverged_instead(error: TrainingError, model: torch.nn.Module, step: int) -> DivergedError | None:
    """For a training error that a diverged model causes (no ray sample hits an occupied cell once
    NaN densities emptied the occupancy grid): the :class:`DivergedError` that names the real
    cause, or None when the parameters are finite (the error stands as it is)."""
    if isinstance(error, DivergedError):
        return None
    tensor = first_nonfinite(model.named_parameters())
    return None if tensor is None else DivergedError(step, tensor, f"then: {error}")
