"""Exponential moving average of the trained weights, which evaluation renders with.

tiny-cuda-nn's ``Ema`` optimizer wrapper (``include/tiny-cuda-nn/optimizers/ema.h``; instant-ngp's
NeRF config wraps Adam in it with decay 0.95): after every optimiser step

.. math::
    m_t = β\\,m_{t−1} + (1 − β)\\,w_t, \\qquad \\bar w_t = m_t / (1 − β^t)

(the debiased average, so ``\\bar w_1 = w_1``), and the network renders for inference with
``\\bar w`` while training continues on ``w``. The average is kept in float32 for every parameter.
A parameter object not seen before (a box that moved to this rank, a resumed run) starts its own
average at its next update. The averages are not written into snapshots: after a resume they start
again, and with β = 0.95 they cover the last ~20 steps again within a few dozen steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

__all__ = ["WeightEMA"]


class WeightEMA:
    """Debiased EMA of a list of parameters (see the module docstring).

    Args:
        decay: β in (0, 1).

    Raises:
        ValueError: for a decay outside (0, 1).
    """

    def __init__(self, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"optimizer.ema_decay: expected a number in (0, 1), got {decay!r}")
        self.decay = float(decay)
        self._avg: dict[int, tuple[torch.Tensor, torch.Tensor, list[int]]] = {}  # id → (param, m, [t])

    def update(self, params: Sequence[torch.Tensor]) -> None:
        """Fold the current values of ``params`` into their averages (one multi-tensor lerp)."""
        live = {id(p) for p in params}
        for key in [k for k in self._avg if k not in live]:
            del self._avg[key]
        for p in params:
            entry = self._avg.get(id(p))
            if entry is None or entry[0] is not p or entry[1].shape != p.shape:
                self._avg[id(p)] = (p, torch.zeros(p.shape, dtype=torch.float32, device=p.device), [0])
        if not params:
            return
        averages = [self._avg[id(p)][1] for p in params]
        with torch.no_grad():
            torch._foreach_lerp_(averages, [p.detach().float() for p in params], 1.0 - self.decay)
        for p in params:
            self._avg[id(p)][2][0] += 1

    def average(self, param: torch.Tensor) -> torch.Tensor | None:
        """The debiased average of ``param`` (float32), or None before its first update."""
        entry = self._avg.get(id(param))
        if entry is None or entry[0] is not param or entry[2][0] == 0:
            return None
        return entry[1] / (1.0 - self.decay ** entry[2][0])

    @contextlib.contextmanager
    def applied(self, params: Sequence[torch.Tensor]) -> Iterator[None]:
        """Within the block ``params`` hold their averages (in their own dtype); restored after."""
        saved: list[tuple[torch.Tensor, torch.Tensor]] = []
        with torch.no_grad():
            for p in params:
                average = self.average(p)
                if average is not None:
                    saved.append((p, p.detach().clone()))
                    p.copy_(average.to(p.dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for p, value in saved:
                    p.copy_(value)
