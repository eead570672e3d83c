"""Which :class:`~trainer.train.step.Step` a trainer runs, and why: the one place that picks it.

``training.cuda_graphs``:

* ``auto`` (default): the fixed-capacity step captured in a CUDA graph where nothing blocks
  capture (:func:`capture_blockers`), else the dynamic step, with the reason;
* ``on``: the captured step, a ConfigError naming the blockers when there are any;
* ``off``: the fixed-capacity step run eagerly (its twin; the CPU);
* ``dynamic``: the dynamic step.

A distributed trainer runs its own step (data parallel or subgrid; not captured), which takes
``auto`` or ``dynamic`` when there are several ranks.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from trainer.contract.errors import ConfigError
from trainer.data.sampler import MAX_DIRECTION_MAP_PIXELS
from trainer.train.capture import CapturedStep
from trainer.train.dynamic_step import DynamicStep
from trainer.train.fixed_step import FixedCapacityStep
from trainer.train.step import Step

__all__ = ["StepChoice", "capture_blockers", "choose_step"]


def capture_blockers(trainer: Any) -> list[str]:
    """Why this trainer's step cannot be captured (empty: it can)."""
    t = trainer.cfg.training
    if trainer.device.type != "cuda":
        return [f"training.device is {trainer.device}: CUDA graph capture needs CUDA"]
    reasons = []
    if trainer.march_backend != "triton":
        reasons.append("training.march_backend is not the Triton marcher")
    if not trainer.triton_render:
        reasons.append("training.render_backend is not Triton")
    if not trainer.sampler.triton_rays:
        reasons.append("the training rays are not built by the Triton kernel (training.rays_backend torch, or "
                       "distorted cameras whose direction maps would pass "
                       f"{MAX_DIRECTION_MAP_PIXELS:,} pixels)")
    if trainer.sampler.placement != "device":
        reasons.append(f"the training pixels are not on the device (data.placement {trainer.sampler.placement})")
    if t.precision == "fp16":
        reasons.append("training.precision fp16 (the captured step covers fp32, tf32 and bf16)")
    if not hasattr(torch.cuda.CUDAGraph, "register_generator_state"):
        reasons.append(f"torch {torch.__version__} cannot register custom generators with a CUDA graph")
    return reasons


@dataclasses.dataclass(frozen=True)
class StepChoice:
    """Which training step a trainer runs and why.

    Attributes:
        kind: ``"captured"`` (fixed capacity, CUDA graph replays), ``"fixed"`` (fixed capacity,
            eager) or ``"dynamic"`` (the dynamic step, and the distributed steps).
        reason: why not the captured step (empty when it is).
    """

    kind: str
    reason: str = ""


def choose_step(trainer: Any, parallel_step: Callable[[Any], Step] | None = None) -> tuple[Step, StepChoice]:
    """The step of ``training.cuda_graphs`` for ``trainer`` (module docstring), with the choice
    and its reason.

    Args:
        trainer: the trainer the step runs in (config, device, backends, sampler, world size).
        parallel_step: a distributed trainer's step (built from the trainer), None for one process.

    Raises:
        ConfigError: ``on`` with blockers; ``on``/``off`` in a distributed trainer of several ranks.
    """
    mode = trainer.cfg.training.cuda_graphs
    if parallel_step is not None:
        if mode == "dynamic":
            return parallel_step(trainer), StepChoice("dynamic", "training.cuda_graphs is 'dynamic'")
        if trainer.world_size > 1 and mode != "auto":
            raise ConfigError(f"training.cuda_graphs: {mode!r} runs one process; distributed trainers take "
                              "'auto' or 'dynamic'")
        ranks = f"{trainer.world_size} rank{'s' if trainer.world_size > 1 else ''}"
        return parallel_step(trainer), StepChoice("dynamic", f"{ranks}: the distributed steps are not captured")
    if mode == "dynamic":
        return DynamicStep(trainer), StepChoice("dynamic", "training.cuda_graphs is 'dynamic'")
    blockers = capture_blockers(trainer)
    if mode == "on" and blockers:
        raise ConfigError("training.cuda_graphs: 'on' cannot capture this step: " + "; ".join(blockers))
    if mode == "auto" and blockers:
        return DynamicStep(trainer), StepChoice("dynamic", "; ".join(blockers))
    step = FixedCapacityStep(trainer)
    if mode == "off":
        return step, StepChoice("fixed", "training.cuda_graphs is 'off'")
    step.graph = CapturedStep(step.run, trainer)
    return step, StepChoice("captured")
