"""The optimiser phases of a training step: learning rate, backward, Adam step, fp16 loss scale,
weight average (DESIGN.md §2: Adam(lr 1e-2, β=(0.9, 0.99), ε=1e-15), L2 on MLP weights only,
step decay; optional EMA of the weights).

:func:`build_adam` makes the optimiser of a config over a field's two parameter groups;
:class:`Optimization` owns it with the ``GradScaler`` (fp16) and the weight average, and runs the
"backward" and "optimizer" phases of the steps that read their outcome on the host (the dynamic,
data-parallel and subgrid steps; the fixed-capacity step keeps its skip flag on the device and
uses the same parts).
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from trainer.contract.config import OptimizerConfig, TrainConfig
from trainer.contract.errors import TrainingError
from trainer.train.ema import WeightEMA
from trainer.train.grid_adam import GridAdam
from trainer.train.timing import PhaseTimer

__all__ = ["MAX_CONSECUTIVE_OVERFLOWS", "Optimization", "build_adam", "lr_factor"]

MAX_CONSECUTIVE_OVERFLOWS = 50  # fp16 steps the scaler may skip in a row before training stops


def lr_factor(step: int, decay_start: int, decay_interval: int, decay_base: float) -> float:
    """Step decay of tiny-cuda-nn's ExponentialDecay: ``decay_base ** (1 + (step - start) // interval)``
    once ``step >= decay_start``, else 1."""
    if step < decay_start:
        return 1.0
    return decay_base ** (1 + (step - decay_start) // decay_interval)


def build_adam(opt: OptimizerConfig, encoding_params: list, mlp_params: list, device: torch.device,
               l2_reg: float, appearance_params: list | None = None) -> GridAdam:
    """Adam with the config's hyper-parameters over two or three groups: ``encoding_params`` without
    weight decay (lazy with ``optimizer.lazy_grid_updates``, see :class:`GridAdam`),
    ``mlp_params`` with weight decay ``l2_reg`` (``optimizer.l2_reg`` as the run resolved it,
    :meth:`~trainer.contract.config.OptimizerConfig.resolved_l2_reg`; group order: encoding, MLP), and a third group of
    ``appearance_params`` (the per-image colour maps of ``training.appearance``) without weight
    decay when there are any. On CUDA PyTorch's fused kernel (one launch per parameter group
    instead of ~15 for the multi-tensor path) for the dense groups; foreach (the twin) elsewhere."""
    groups = [
        {"params": encoding_params, "weight_decay": 0.0, "lazy": opt.lazy_grid_updates},
        {"params": mlp_params, "weight_decay": l2_reg, "lazy": False},
    ]
    if appearance_params:
        groups.append({"params": appearance_params, "weight_decay": 0.0, "lazy": False})
    return GridAdam(
        groups,
        lr=opt.learning_rate,
        betas=(opt.beta1, opt.beta2),
        eps=opt.epsilon,
        fused=device.type == "cuda",
    )


class Optimization:
    """The optimiser of a trainer with its loss scaler and weight average.

    Args:
        cfg: the run's config (``optimizer`` block; ``training.precision`` fp16 enables the scaler).
        optimizer: the Adam of :func:`build_adam` (replaced by assigning :attr:`optimizer`, e.g.
            when the subgrid trainer re-cuts its boxes).
        device: the training device.
        timer: the run's phase timer.
        parameters: the trained parameters now (the weight average's; the model may be replaced).

    Attributes:
        optimizer: the optimiser.
        scaler: ``torch.amp.GradScaler``, enabled for fp16 steps only.
        weight_ema: the :class:`WeightEMA` of ``optimizer.ema_decay``, else None.
        overflow_run: fp16 steps skipped in a row so far.
    """

    def __init__(self, cfg: TrainConfig, optimizer: torch.optim.Optimizer, device: torch.device, timer: PhaseTimer,
                 parameters: Callable[[], Iterable[torch.nn.Parameter]]) -> None:
        self.cfg = cfg.optimizer
        self.optimizer = optimizer
        self.scaler = torch.amp.GradScaler(device.type, enabled=cfg.training.precision == "fp16")
        decay = cfg.optimizer.ema_decay
        self.weight_ema = WeightEMA(decay) if decay is not None else None
        self.timer = timer
        self.parameters = parameters
        self.overflow_run = 0

    def learning_rate(self, step: int) -> float:
        """The rate of ``step``: tiny-cuda-nn's ExponentialDecay on ``optimizer.learning_rate``."""
        opt = self.cfg
        return opt.learning_rate * lr_factor(step, opt.decay_start, opt.decay_interval, opt.decay_base)

    def set_learning_rate(self, step: int) -> None:
        """Every parameter group's rate to that of ``step`` (a host number)."""
        lr = self.learning_rate(step)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def restart_weight_average(self) -> None:
        """Start the weight average again (after a snapshot load or a warm start: it is not saved)."""
        if self.weight_ema is not None:
            self.weight_ema = WeightEMA(self.weight_ema.decay)

    def backward(self, loss: torch.Tensor) -> None:
        """The "backward" phase: clear the gradients, back-propagate the (scaled) ``loss`` (0-dim)."""
        with self.timer.phase("backward"):
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()

    def step(self, step: int) -> bool:
        """The "optimizer" phase of step ``step``: learning rate, (scaled) Adam step, scaler update,
        weight average. Returns whether the grad scaler skipped the step (inf/nan gradients; the
        weights and their average stay as they were).

        Raises:
            TrainingError: :data:`MAX_CONSECUTIVE_OVERFLOWS` fp16 steps skipped in a row.
        """
        with self.timer.phase("optimizer"):
            self.set_learning_rate(step)
            scale_before = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
            self.scaler.step(self.optimizer)
            self.scaler.update()
            skipped = self.scaler.is_enabled() and self.scaler.get_scale() < scale_before
            if self.weight_ema is not None and not skipped:
                self.weight_ema.update(list(self.parameters()))
        self.overflow_run = self.overflow_run + 1 if skipped else 0
        if self.overflow_run >= MAX_CONSECUTIVE_OVERFLOWS:
            raise TrainingError(
                f"fp16 gradients overflowed on {self.overflow_run} consecutive steps (grad scale now "
                f"{self.scaler.get_scale():.3g}): the model does not fit fp16's range; use "
                "training.precision bf16 or fp32"
            )
        return skipped
