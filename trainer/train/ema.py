"""Exponential moving average of the trained weights, which evaluation renders with.

tiny-cuda-nn's ``Ema`` optimizer wrapper (``include/tiny-cuda-nn/optimizers/ema.h``; instant-ngp's
NeRF config wraps Adam in it with decay 0.95): after every optimiser step

.. math::
    m_t = β\\,m_{t−1} + (1 − β)\\,w_t, \\qquad \\bar w_t = m_t / (1 − β^t)

(the debiased average, so ``\\bar w_1 = w_1``), and the network renders for inference with
``\\bar w`` while training continues on ``w``. The average is kept in float32 for every parameter,
and its update count ``t`` on the parameter's device, so an update is device work only and a
captured training step (``training.cuda_graphs``) replays it.
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
        # id → (param, m, t): m float32 like the parameter, t a float64 scalar on its device
        self._avg: dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def update(self, params: Sequence[torch.Tensor]) -> None:
        """Fold the current values of ``params`` into their averages (one multi-tensor lerp and
        one multi-tensor count; nothing read on the host)."""
        live = {id(p) for p in params}
        for key in [k for k in self._avg if k not in live]:
            del self._avg[key]
        for p in params:
            entry = self._avg.get(id(p))
            if entry is None or entry[0] is not p or entry[1].shape != p.shape:
                self._avg[id(p)] = (p, torch.zeros(p.shape, dtype=torch.float32, device=p.device),
                                    torch.zeros((), dtype=torch.float64, device=p.device))
        if not params:
            return
        entries = [self._avg[id(p)] for p in params]
        with torch.no_grad():
            torch._foreach_lerp_([e[1] for e in entries], [p.detach().float() for p in params], 1.0 - self.decay)
            torch._foreach_add_([e[2] for e in entries], 1.0)

    def updates(self, param: torch.Tensor) -> int:
        """How many updates the average of ``param`` holds (0: none yet; read from the device)."""
        entry = self._avg.get(id(param))
        return 0 if entry is None or entry[0] is not param else int(entry[2].item())

    def average(self, param: torch.Tensor) -> torch.Tensor | None:
        """The debiased average of ``param`` (float32), or None before its first update."""
        if self.updates(param) == 0:
            return None
        _, mean, count = self._avg[id(param)]
        return mean / (1.0 - torch.pow(self.decay, count)).float()

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
