"""torch.optim's methods without importing ``torch._dynamo`` while nothing is being compiled.

Why: torch wraps ``Optimizer.add_param_group``, ``zero_grad``, ``state_dict`` and
``load_state_dict`` in ``torch._disable_dynamo``, and an optimizer's ``step`` in
``_use_grad_for_differentiable``. Both import ``torch._dynamo`` at their first call, only to keep
a ``torch.compile`` trace out of the method. That import (sympy, torch.fx, torch.distributed.tensor
and ~1000 more modules) takes 1.3 s of CPU on an idle core, more than the rest of a rank's set-up
on the demo scene, and every rank of every trial pays it; the trainer never compiles (its fast
paths are Triton kernels and CUDA graphs, :mod:`trainer.train.capture`).

While ``torch._dynamo`` is not loaded nothing can be compiling, and the wrappers change nothing
but that import: :func:`call_eagerly` and :func:`grad_mode_of_differentiable` then run the method
itself. Once ``torch._dynamo`` is loaded (by anything) they call torch's wrappers, so a
compiled caller gets exactly torch's behaviour.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable, TypeVar

import torch
from torch.optim.optimizer import _use_grad_for_differentiable

__all__ = ["call_eagerly", "dynamo_loaded", "grad_mode_of_differentiable"]

_T = TypeVar("_T")


def _disable_dynamo_code() -> object | None:
    """The code object shared by every ``torch._disable_dynamo`` wrapper (None if torch lacks it)."""
    disable = getattr(torch, "_disable_dynamo", None)
    if disable is None:
        return None
    return getattr(disable(lambda: None), "__code__", None)


_DISABLE_DYNAMO_CODE = _disable_dynamo_code()


def dynamo_loaded() -> bool:
    """Whether ``torch._dynamo`` has been imported in this process."""
    return "torch._dynamo" in sys.modules


def call_eagerly(method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``method(*args, **kwargs)``, skipping ``method``'s ``torch._disable_dynamo`` wrapper (and
    so the import of ``torch._dynamo``) while ``torch._dynamo`` is not loaded.

    Args:
        method: a function, e.g. ``torch.optim.Optimizer.zero_grad`` (the class attribute, called
            with the optimizer as first argument). Any other function is called as it is.

    Returns:
        What ``method`` returns; it raises what ``method`` raises.
    """
    if (_DISABLE_DYNAMO_CODE is not None and getattr(method, "__code__", None) is _DISABLE_DYNAMO_CODE
            and hasattr(method, "__wrapped__") and not dynamo_loaded()):
        method = method.__wrapped__
    return method(*args, **kwargs)


def grad_mode_of_differentiable(step: Callable[..., _T]) -> Callable[..., _T]:
    """Decorator of an optimizer's ``step``: torch's ``_use_grad_for_differentiable`` (autograd
    on during the step only for a ``differentiable`` optimizer, the previous mode restored after),
    without its ``torch._dynamo`` import and graph breaks while ``torch._dynamo`` is not loaded."""
    with_graph_breaks = _use_grad_for_differentiable(step)

    @functools.wraps(step)
    def eager_step(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> _T:
        if dynamo_loaded():
            return with_graph_breaks(self, *args, **kwargs)
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return step(self, *args, **kwargs)

    return eager_step
