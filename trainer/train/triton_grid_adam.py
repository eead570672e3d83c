"""The Triton kernel of :class:`trainer.train.grid_adam.GridAdam`'s lazy groups.

:func:`lazy_adam_triton` does one lazy Adam update of one parameter in one launch; the formula,
the bias-correction handling and the slow twin (:func:`trainer.train.grid_adam.lazy_adam_torch`)
are in :mod:`trainer.train.grid_adam`'s docstring. This module imports Triton at import time and
is imported only when a lazy group runs on the kernel, so the optimizer works without Triton.
"""

from __future__ import annotations

import contextlib
import math

import torch
import triton
import triton.language as tl

from trainer.triton_support import INTERPRET

__all__ = ["LAZY_ADAM_BLOCK", "lazy_adam_triton"]

LAZY_ADAM_BLOCK = 1024  # elements per program
_GRAD_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _lazy_adam_kernel(param_ptr, grad_ptr, exp_avg_ptr, exp_avg_sq_ptr, step_ptr, grad_scale_ptr, found_inf_ptr,
                      lr_ptr, n, step_count, lr, beta1, beta2, one_minus_beta1, one_minus_beta2, log2_beta1, log2_beta2,
                      eps, weight_decay, STEP_ON_DEVICE: tl.constexpr, HAS_GRAD_SCALE: tl.constexpr,
                      HAS_FOUND_INF: tl.constexpr, LR_ON_DEVICE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # int64: tables pass 2^31 bytes
    g = tl.load(grad_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    if HAS_GRAD_SCALE:
        g = tl.div_rn(g, tl.load(grad_scale_ptr))
    if HAS_FOUND_INF:  # a skipped step: as if every gradient were 0
        g = tl.where(tl.load(found_inf_ptr) == 0.0, g, 0.0)
    hit = g != 0.0  # false past the end too (other=0)
    p = tl.load(param_ptr + offs, mask=hit, other=0.0)
    m = tl.load(exp_avg_ptr + offs, mask=hit, other=0.0)
    v = tl.load(exp_avg_sq_ptr + offs, mask=hit, other=0.0)
    # bias corrections 1 − β^t in float64: β^t = 2^(t·log2 β) loses nothing that matters here
    if STEP_ON_DEVICE:
        t = tl.load(step_ptr).to(tl.float64)
    else:
        t = tl.cast(step_count, tl.float64)
    if LR_ON_DEVICE:  # a float32 tensor: the value a float lr argument would have
        lr = tl.load(lr_ptr)
    step_size = (lr / (1.0 - tl.exp2(t * log2_beta1))).to(tl.float32)
    bias_correction2_sqrt = tl.sqrt(1.0 - tl.exp2(t * log2_beta2)).to(tl.float32)
    if weight_decay != 0.0:
        g = g + weight_decay * p
    m = m * beta1 + one_minus_beta1 * g
    v = v * beta2 + one_minus_beta2 * g * g
    denom = tl.div_rn(tl.sqrt_rn(v), bias_correction2_sqrt) + eps
    p = p - tl.div_rn(step_size * m, denom)
    tl.store(param_ptr + offs, p, mask=hit)
    tl.store(exp_avg_ptr + offs, m, mask=hit)
    tl.store(exp_avg_sq_ptr + offs, v, mask=hit)


def _log2_or_minus_inf(beta: float) -> float:
    """log2 β, −inf for β = 0 (so that β^t = 0 for every t ≥ 1)."""
    return math.log2(beta) if beta > 0 else -math.inf


def lazy_adam_triton(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                     step: torch.Tensor | float, *, lr: float | torch.Tensor, beta1: float, beta2: float, eps: float,
                     weight_decay: float = 0.0, grad_scale: torch.Tensor | None = None,
                     found_inf: torch.Tensor | None = None, block: int = LAZY_ADAM_BLOCK) -> None:
    """One lazy Adam update of one parameter, in place, in one Triton launch (formula: :mod:`trainer.train.grid_adam`).

    Args:
        param: float32, contiguous, on CUDA (or the CPU under ``TRITON_INTERPRET=1``); updated.
        grad: same shape, float32, float16 or bfloat16 (computed in float32); read only.
        exp_avg, exp_avg_sq: float32, param's shape, contiguous; the moments, updated.
        step: the step count ``t`` after this step's increment: a tensor on ``param``'s device is
            read by the kernel (no host sync); a CPU tensor or a number is read on the host.
        lr, beta1, beta2, eps, weight_decay: Adam's hyper-parameters (``weight_decay``: L2 added to
            the nonzero gradients); ``lr`` may be a 0-dim float32 tensor on ``param``'s device, read
            by the kernel (a learning rate that a captured CUDA graph's replays see change).
        grad_scale: optional 0-dim float32 tensor; the gradient is divided by it (GradScaler's
            scale when the optimizer unscales itself).
        found_inf: optional 0-dim float32 tensor; nonzero means nothing is updated.
        block: elements per program.

    Raises:
        ValueError: dtypes, shapes or layouts other than the above, or CPU tensors without the
            interpreter.
    """
    _check_kernel_operands(param, grad, exp_avg, exp_avg_sq)
    n = param.numel()
    if n == 0:
        return
    device = param.device
    step_on_device = isinstance(step, torch.Tensor) and step.device == device
    scale = None if grad_scale is None else grad_scale.to(device, torch.float32, non_blocking=True)
    inf = None if found_inf is None else found_inf.to(device, torch.float32, non_blocking=True)
    lr_on_device = isinstance(lr, torch.Tensor)
    if lr_on_device and (lr.device != device or lr.dtype != torch.float32 or lr.numel() != 1):
        raise ValueError(f"lazy_adam_triton: a tensor lr must be one float32 element on {device}, got "
                         f"{lr.dtype} {tuple(lr.shape)} on {lr.device}")
    with torch.cuda.device(device) if param.is_cuda else contextlib.nullcontext():
        _lazy_adam_kernel[(triton.cdiv(n, block),)](
            param, grad.contiguous(), exp_avg, exp_avg_sq,
            step if step_on_device else param,  # the pointer is unused when the count comes by value
            param if scale is None else scale, param if inf is None else inf, lr if lr_on_device else param,
            n, 0.0 if step_on_device else float(step), 0.0 if lr_on_device else float(lr), float(beta1), float(beta2),
            1.0 - beta1, 1.0 - beta2, _log2_or_minus_inf(beta1), _log2_or_minus_inf(beta2),
            float(eps), float(weight_decay),
            STEP_ON_DEVICE=step_on_device, HAS_GRAD_SCALE=scale is not None, HAS_FOUND_INF=inf is not None,
            LR_ON_DEVICE=lr_on_device, BLOCK=block, num_warps=4, enable_fp_fusion=False)


def _check_kernel_operands(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor,
                           exp_avg_sq: torch.Tensor) -> None:
    """Raise ValueError unless the operands suit :func:`lazy_adam_triton`."""
    if not (param.is_cuda or (INTERPRET and param.device.type == "cpu")):
        raise ValueError(f"lazy_adam_triton: parameter on {param.device}: the kernel needs a CUDA tensor "
                         "(or TRITON_INTERPRET=1 before the first import, for CPU tensors); use lazy_backend='torch'")
    for name, tensor in (("param", param), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)):
        if tensor.dtype != torch.float32 or not tensor.is_contiguous() or tensor.shape != param.shape:
            raise ValueError(f"lazy_adam_triton: {name}: expected a contiguous float32 tensor of shape "
                             f"{tuple(param.shape)}, got {tensor.dtype} {tuple(tensor.shape)} "
                             f"(contiguous={tensor.is_contiguous()}); use lazy_backend='torch' for other layouts")
    if grad.dtype not in _GRAD_DTYPES or grad.shape != param.shape:
        raise ValueError(f"lazy_adam_triton: grad: expected float32, float16 or bfloat16 of shape "
                         f"{tuple(param.shape)}, got {grad.dtype} {tuple(grad.shape)}")
