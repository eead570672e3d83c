"""What every Triton kernel module of the trainer shares.

* :data:`INTERPRET`: whether ``@triton.jit`` wraps kernels for Triton's CPU interpreter
  (``TRITON_INTERPRET=1`` in the environment when Triton reads it, i.e. when the first kernel
  module is imported); that is how the tests check the kernels on machines without a GPU.
"""

from __future__ import annotations

import os

import triton

__all__ = ["INTERPRET"]

_knobs = getattr(triton, "knobs", None)
INTERPRET: bool = (
    bool(_knobs.runtime.interpret)
    if _knobs is not None
    else os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes", "y")
)
