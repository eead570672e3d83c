"""Reading a device value on the host later without stalling the queue in between."""

from __future__ import annotations

import torch

__all__ = ["HostCopy"]


class HostCopy:
    """A device tensor copied to (pinned) host memory without waiting; :meth:`value` waits for
    that copy only (a CUDA event), not for work queued after it. CPU tensors are kept as they are.

    Args:
        tensor: the tensor to read later (any device).
    """

    def __init__(self, tensor: torch.Tensor) -> None:
        self._event = None
        if tensor.device.type == "cuda":
            host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            host.copy_(tensor, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record()
            tensor = host
        self._tensor = tensor

    def value(self) -> torch.Tensor:
        """The copied tensor on the CPU (waits for the copy to land)."""
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return self._tensor
