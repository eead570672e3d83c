"""Adam whose hash-grid groups leave alone the entries that got no gradient ("lazy" Adam).

Why: tiny-cuda-nn's Adam (``include/tiny-cuda-nn/optimizers/adam.h``, kernel ``adam_step``)
returns early for every non-matrix parameter (the hash-grid entries) whose gradient is exactly 0
in a step: its value and both moments stay as they are. Dense Adam (:class:`torch.optim.Adam`)
instead keeps moving an entry with its decaying first moment for many steps after a single hit:
with β1 = 0.9, β2 = 0.99 (and the bias corrections near 1) the later steps add up to
``Σ_k (β1/√β2)^k = 1/(1 − β1/√β2) ≈ 10.5`` times the step of the hit itself. Most entries of a
hash table are hit only now and then, so dense Adam lets them drift; the lazy update does not.

:class:`GridAdam` is :class:`torch.optim.Adam` plus a per-group option ``lazy``:

* non-lazy groups: torch's own update (the functional ``torch.optim.adam.adam`` with the group's
  flags: single-tensor, foreach or fused), bitwise what ``torch.optim.Adam`` does;
* lazy groups, per element ``i`` with ``g_i`` its gradient (unscaled, see GradScaler below)::

      g_i == 0:  p_i, m_i, v_i unchanged
      else:      g_i += weight_decay · p_i                   (L2, only where g_i != 0)
                 m_i  = β1 m_i + (1 − β1) g_i
                 v_i  = β2 v_i + (1 − β2) g_i²
                 p_i -= lr / (1 − β1^t) · m_i / (√v_i / √(1 − β2^t) + eps)

  with ``t`` the parameter's step count after this step's increment: one count per parameter
  tensor, as ``torch.optim.SparseAdam`` keeps it (and torch Adam's formula and ``eps`` placement,
  Kingma & Ba 2015, Algorithm 1).

Differences from tiny-cuda-nn: tcnn keeps a step counter per element (``param_steps``), so an
entry's bias correction counts only the steps that hit it; we keep one count per parameter
(SparseAdam's convention) so that the optimizer state has exactly torch Adam's keys and layout
(``step``, ``exp_avg``, ``exp_avg_sq``) and checkpoints stay interchangeable. tcnn also folds the
bias correction into the learning rate (``eps`` added to ``√v`` before the ``√(1 − β2^t)``
factor, i.e. an ``eps`` larger by ``1/√(1 − β2^t)`` than ours) and applies no L2 to non-matrix
parameters (ours applies a group's ``weight_decay`` to the hit elements).

Fast path: on CUDA one Triton launch per lazy parameter (:func:`trainer.train.triton_grid_adam.lazy_adam_triton`: gradient,
parameter and moments in place; parameter and moments float32, gradient float32, float16 or
bfloat16, computed in float32; int64 offsets; contraction off, IEEE square root and division;
elements without gradient are neither loaded nor stored), plus the ``step += 1`` that torch's
fused Adam also launches when the step tensor is on the device.
It never reads the device from the host: the bias corrections ``1 − β^t`` are computed inside
the kernel in float64, from the step tensor itself when that lives on the parameter's device
(``fused`` or ``capturable`` groups) or from the count read on the host when it lives on the CPU
(torch's default; reading a CPU tensor is no device sync). Its slow twin :func:`lazy_adam_torch`
does the same math with ``torch.where`` and runs on the CPU; ``GridAdam(lazy_backend=...)``
selects either. Under ``TRITON_INTERPRET=1`` (set before this module is first imported) the kernel
also runs on CPU tensors, which is how the tests check it without a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch
from torch.optim.adam import adam

from trainer.train.eager_optim import call_eagerly, grad_mode_of_differentiable

__all__ = ["CONFIG_HYPERPARAMETERS", "LAZY_BACKENDS", "GridAdam", "lazy_adam_torch", "lazy_kernel_importable"]

#: Group hyper-parameters that come from the run's config, never from a loaded state
#: (``optimizer.beta1``/``beta2``, ``epsilon``, ``l2_reg`` as the run resolved it).
CONFIG_HYPERPARAMETERS = ("betas", "eps", "weight_decay")

LAZY_BACKENDS = ("auto", "triton", "torch")
# Adam options a lazy group cannot honour: tcnn's lazy update has no AMSGrad maximum, no
# maximisation, no decoupled (AdamW) decay, and the kernel is not differentiable.
_NOT_LAZY = ("amsgrad", "maximize", "decoupled_weight_decay", "differentiable")


def lazy_adam_torch(param: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
                    step: torch.Tensor | float, *, lr: float, beta1: float, beta2: float, eps: float,
                    weight_decay: float = 0.0, grad_scale: torch.Tensor | None = None,
                    found_inf: torch.Tensor | None = None) -> None:
    """The slow twin of :func:`lazy_adam_triton`: the same update in plain torch (``torch.where``).

    Arguments as :func:`lazy_adam_triton`, on any device and any real floating dtype (the gradient
    is cast to the parameter's dtype). A ``step`` tensor off the CPU stays on its device (the bias
    corrections become float32 tensors there, as in torch's capturable Adam); else it is read on
    the host. About a dozen launches per update on CUDA: the reference, not the fast path.
    """
    t: torch.Tensor | float = step if isinstance(step, torch.Tensor) and not step.is_cpu else float(step)
    bias_correction1 = 1 - beta1**t
    bias_correction2_sqrt = (1 - beta2**t) ** 0.5
    g = grad.to(param.dtype)
    if grad_scale is not None:
        g = g / grad_scale.to(param.device)
    hit = g != 0
    if found_inf is not None:
        hit &= found_inf.to(param.device) == 0
    if weight_decay != 0:
        g = g + weight_decay * param
    m = exp_avg * beta1 + (1 - beta1) * g
    v = exp_avg_sq * beta2 + (1 - beta2) * g * g
    p = param - (lr / bias_correction1) * m / (v.sqrt() / bias_correction2_sqrt + eps)
    for tensor, new in ((param, p), (exp_avg, m), (exp_avg_sq, v)):
        tensor.copy_(torch.where(hit, new, tensor))


class GridAdam(torch.optim.Adam):
    """:class:`torch.optim.Adam` with lazy groups: zero-gradient elements keep value and moments.

    Args:
        params: parameters or parameter groups, as for :class:`torch.optim.Adam`; a group may set
            ``lazy`` (bool) to override the default below.
        lr, betas, eps, weight_decay, amsgrad, **adam_options: those of :class:`torch.optim.Adam`
            in this torch version (``foreach``, ``maximize``, ``capturable``, ``differentiable``,
            ``fused``, ``decoupled_weight_decay``), as defaults of every group.
        lazy: default of the per-group option ``lazy``: update only the elements with a nonzero
            gradient (module docstring; meant for the hash-grid group). Non-lazy groups get
            exactly torch Adam's update.
        lazy_backend: how lazy groups compute: ``"auto"`` (the Triton kernel for CUDA
            parameters, the torch twin elsewhere), ``"triton"`` (always the kernel: CUDA, or the
            CPU under ``TRITON_INTERPRET=1``) or ``"torch"`` (always the twin). Not saved in the
            state dict.

    State: per parameter exactly torch Adam's (``step`` a 0-dim float32 tensor, on the
    parameter's device in ``fused`` or ``capturable`` groups and on the CPU otherwise;
    ``exp_avg``, ``exp_avg_sq``), so ``state_dict``/``load_state_dict`` and checkpoints written by
    torch Adam work both ways. Group dicts carry ``lazy``: a loaded state dict sets it, as torch
    sets ``lr`` and the other group options from it; one without it (torch Adam's) leaves each
    group's current ``lazy`` as it is. Parameters whose ``.grad`` is None are
    skipped; every other parameter's ``step`` counts every ``step()`` call.

    Its methods do not import ``torch._dynamo`` while nothing has loaded it
    (:mod:`trainer.train.eager_optim`; seconds of every rank's start-up on a CPU).

    GradScaler: as with torch Adam, ``fused=True`` at construction makes the optimizer unscale
    and skip on its own (``_step_supports_amp_scaling``): ``scaler.step`` hands it the scale and
    the found-inf flag as device tensors, lazy groups divide by the one and update nothing when the
    other is set (their ``step`` incremented, then decremented by it, as fused Adam does), all
    without a host sync. Otherwise GradScaler unscales the gradients itself and skips the whole
    ``step()`` on inf/NaN (a host read of the flag, as for torch's non-fused Adam).

    Raises:
        ValueError: ``lazy_backend`` not one of :data:`LAZY_BACKENDS`; a group whose ``lazy`` is
            not a bool; a lazy group with ``amsgrad``, ``maximize``, ``decoupled_weight_decay``
            or ``differentiable`` set, a tensor ``lr`` or ``betas``, or complex parameters (the
            message names the group, ``param_groups[i]``), at construction, in
            ``add_param_group`` and in ``load_state_dict``. :func:`lazy_adam_triton`'s
            ValueError in ``step()`` for parameters the kernel does not take (e.g. float64).

    Example:
        >>> grid = torch.nn.Parameter(torch.zeros(8, 2))
        >>> mlp = torch.nn.Parameter(torch.ones(4))
        >>> opt = GridAdam([{"params": [grid], "lazy": True}, {"params": [mlp]}], lr=1e-2, betas=(0.9, 0.99))
        >>> grid.grad = torch.zeros(8, 2); grid.grad[3, 0] = 1.0; mlp.grad = torch.ones(4)
        >>> opt.step()
        >>> int((grid != 0).sum()), sorted(opt.state[grid])
        (1, ['exp_avg', 'exp_avg_sq', 'step'])
    """

    def __init__(self, params: Iterable[Any], lr: float | torch.Tensor = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, *, lazy: bool = False, lazy_backend: str = "auto", **adam_options: Any):
        if lazy_backend not in LAZY_BACKENDS:
            raise ValueError(f"lazy_backend: expected one of {LAZY_BACKENDS}, got {lazy_backend!r}")
        self.lazy_backend = lazy_backend
        self._lazy_default = lazy  # read by add_param_group while Adam.__init__ adds the groups
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         **adam_options)
        self.defaults["lazy"] = lazy

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """:meth:`torch.optim.Optimizer.add_param_group`, with ``lazy`` defaulted and checked.

        Raises:
            ValueError: as the class says, naming the new group's index.
        """
        param_group.setdefault("lazy", self._lazy_default)
        call_eagerly(torch.optim.Adam.add_param_group, self, param_group)
        _check_group(len(self.param_groups) - 1, self.param_groups[-1])

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """:meth:`torch.optim.Optimizer.load_state_dict`, except that each group keeps this
        optimizer's :data:`CONFIG_HYPERPARAMETERS` (a resumed run trains with its own config's
        moment decays, epsilon and weight decay, which the resume's warning names when they
        changed; torch would restore the saved ones), and saved groups without ``lazy`` (torch
        Adam's) keep this optimizer's. Moments, step counts and learning rates come from the saved
        state.

        Raises:
            ValueError: as torch does for mismatching groups, or a loaded lazy group that the class
                rejects.
        """
        saved = state_dict["param_groups"]
        if len(saved) == len(self.param_groups):  # else torch raises on the mismatch
            merged = [{"lazy": own["lazy"], **group, **{k: own[k] for k in CONFIG_HYPERPARAMETERS if k in own}}
                      for own, group in zip(self.param_groups, saved)]
            state_dict = {**state_dict, "param_groups": merged}
        call_eagerly(torch.optim.Adam.load_state_dict, self, state_dict)
        for index, group in enumerate(self.param_groups):
            _check_group(index, group)

    def state_dict(self) -> dict[str, Any]:
        """:meth:`torch.optim.Optimizer.state_dict` (module :mod:`trainer.train.eager_optim`: without
        importing ``torch._dynamo``)."""
        return call_eagerly(torch.optim.Adam.state_dict, self)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """:meth:`torch.optim.Optimizer.zero_grad` (module :mod:`trainer.train.eager_optim`: without
        importing ``torch._dynamo``)."""
        call_eagerly(torch.optim.Adam.zero_grad, self, set_to_none)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.__dict__.setdefault("lazy_backend", "auto")  # an unpickled optimizer
        self.__dict__.setdefault("_lazy_default", self.defaults.get("lazy", False))
        for group in self.param_groups:
            group.setdefault("lazy", self._lazy_default)

    @grad_mode_of_differentiable
    def step(self, closure: Any = None) -> Any:
        """One Adam step over every group (lazy groups lazily). Returns ``closure()``'s loss, if given.

        Raises:
            RuntimeError: sparse gradients (as torch Adam).
            ValueError: a lazy parameter the chosen backend does not take (:func:`lazy_adam_triton`).
        """
        health_check = getattr(self, "_accelerator_graph_capture_health_check", None)
        (health_check or self._cuda_graph_capture_health_check)()  # torch < 2.6 has only the CUDA one
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["lazy"]:
                with torch.no_grad():
                    self._lazy_group_step(group)
            else:
                self._adam_group_step(group)
        return loss

    def _adam_group_step(self, group: dict[str, Any]) -> None:
        """torch Adam's ``step`` body for one group (its ``_init_group`` and functional ``adam``)."""
        params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps = [], [], [], [], [], []
        has_complex = self._init_group(group, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps)
        beta1, beta2 = group["betas"]
        newer = {"decoupled_weight_decay": group["decoupled_weight_decay"]} if "decoupled_weight_decay" in group else {}
        adam(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, amsgrad=group["amsgrad"],
             has_complex=has_complex, beta1=beta1, beta2=beta2, lr=group["lr"], weight_decay=group["weight_decay"],
             eps=group["eps"], maximize=group["maximize"], foreach=group["foreach"], capturable=group["capturable"],
             differentiable=group["differentiable"], fused=group["fused"],
             grad_scale=getattr(self, "grad_scale", None), found_inf=getattr(self, "found_inf", None), **newer)

    def _lazy_group_step(self, group: dict[str, Any]) -> None:
        """The lazy update of one group: state as torch Adam creates it, then one call per parameter."""
        params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
        self._init_group(group, params, grads, exp_avgs, exp_avg_sqs, [], steps)
        beta1, beta2 = group["betas"]
        grad_scale, found_inf = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        for param, grad, exp_avg, exp_avg_sq, step in zip(params, grads, exp_avgs, exp_avg_sqs, steps):
            step += 1
            update = lazy_adam_torch
            if self._uses_triton(param):
                from trainer.train.triton_grid_adam import lazy_adam_triton as update
            update(param, grad, exp_avg, exp_avg_sq, step, lr=group["lr"], beta1=beta1, beta2=beta2, eps=group["eps"],
                   weight_decay=group["weight_decay"], grad_scale=grad_scale, found_inf=found_inf)
            if found_inf is not None:  # a skipped step does not count (fused Adam's rule)
                step -= found_inf.to(step.device)

    def _uses_triton(self, param: torch.Tensor) -> bool:
        """Whether the lazy update of ``param`` runs the Triton kernel (``lazy_backend``)."""
        return self.lazy_backend == "triton" or (
            self.lazy_backend == "auto" and param.is_cuda and lazy_kernel_importable())


@functools.cache
def lazy_kernel_importable() -> bool:
    """Whether the Triton kernel module imports (Triton is an optional dependency: without it,
    ``lazy_backend="auto"`` takes the torch twin and ``"triton"`` raises the ImportError)."""
    try:
        import trainer.train.triton_grid_adam  # noqa: F401
    except ImportError:
        return False
    return True


def _check_group(index: int, group: dict[str, Any]) -> None:
    """Raise ValueError, naming ``param_groups[index]``, for a ``lazy`` option the update cannot honour."""
    where = f"param_groups[{index}]"
    lazy = group["lazy"]
    if not isinstance(lazy, bool):
        raise ValueError(f"{where}.lazy: expected a bool, got {lazy!r}")
    if not lazy:
        return
    for key in _NOT_LAZY:
        if group.get(key, False):
            raise ValueError(f"{where}.{key}: a lazy group (lazy=True) does not support {key}={group[key]!r}")
    if any(isinstance(beta, torch.Tensor) for beta in group["betas"]):
        raise ValueError(f"{where}: a lazy group takes betas as numbers, got betas={group['betas']!r}")
    if any(torch.is_complex(p) for p in group["params"]):
        raise ValueError(f"{where}: a lazy group takes real parameters, got a complex one")
