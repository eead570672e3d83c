"""Degree-4 spherical-harmonics encoding of view directions in one Triton kernel launch.

The fast twin of :func:`trainer.encoding.sh.sh_encode` (which stays the reference and the
differentiable path): same polynomials (tiny-cuda-nn ``encodings/spherical_harmonics.h``), same
order of float32 operations, floating-point contraction off, so the outputs are bitwise those of
the reference in IEEE float32 (the tests check this under ``TRITON_INTERPRET=1``). The reference
takes ~45 kernel launches per call; in a host-bound training step that is where its time goes.
No gradient: view directions never need one in training.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from trainer.encoding.sh import SH_OUTPUT_DIM

__all__ = ["SH_BLOCK", "sh_encode_triton"]

SH_BLOCK = 256


@triton.jit
def _sh_kernel(dirs_ptr, out_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)  # int64: row·16 passes 2^31
    mask = row < n
    x = tl.load(dirs_ptr + row * 3 + 0, mask=mask, other=0.0)
    y = tl.load(dirs_ptr + row * 3 + 1, mask=mask, other=0.0)
    z = tl.load(dirs_ptr + row * 3 + 2, mask=mask, other=0.0)
    xy = x * y
    xz = x * z
    yz = y * z
    x2 = x * x
    y2 = y * y
    z2 = z * z
    base = out_ptr + row * 16
    tl.store(base + 0, tl.zeros_like(x) + 0.28209479177387814, mask=mask)
    tl.store(base + 1, -0.48860251190291987 * y, mask=mask)
    tl.store(base + 2, 0.48860251190291987 * z, mask=mask)
    tl.store(base + 3, -0.48860251190291987 * x, mask=mask)
    tl.store(base + 4, 1.0925484305920792 * xy, mask=mask)
    tl.store(base + 5, -1.0925484305920792 * yz, mask=mask)
    tl.store(base + 6, 0.94617469575755997 * z2 - 0.31539156525251999, mask=mask)
    tl.store(base + 7, -1.0925484305920792 * xz, mask=mask)
    tl.store(base + 8, 0.54627421529603959 * (x2 - y2), mask=mask)
    tl.store(base + 9, 0.59004358992664352 * y * (-3.0 * x2 + y2), mask=mask)
    tl.store(base + 10, 2.8906114426405538 * xy * z, mask=mask)
    tl.store(base + 11, 0.45704579946446572 * y * (1.0 - 5.0 * z2), mask=mask)
    tl.store(base + 12, 0.3731763325901154 * z * (5.0 * z2 - 3.0), mask=mask)
    tl.store(base + 13, 0.45704579946446572 * x * (1.0 - 5.0 * z2), mask=mask)
    tl.store(base + 14, 1.4453057213202769 * z * (x2 - y2), mask=mask)
    tl.store(base + 15, 0.59004358992664352 * x * (-x2 + 3.0 * y2), mask=mask)


def sh_encode_triton(dirs: torch.Tensor, block: int = SH_BLOCK) -> torch.Tensor:
    """Spherical harmonics of unit directions, as :func:`trainer.encoding.sh.sh_encode`.

    Args:
        dirs: [n, 3] float32 unit vectors (x, y, z), on CUDA (or the CPU under TRITON_INTERPRET=1).
        block: rows per program.

    Returns:
        [n, 16] float32, contiguous; no autograd history.
    """
    assert dirs.ndim == 2 and dirs.shape[1] == 3 and dirs.dtype == torch.float32, (tuple(dirs.shape), dirs.dtype)
    dirs = dirs.contiguous()
    n = dirs.shape[0]
    out = torch.empty(n, SH_OUTPUT_DIM, dtype=torch.float32, device=dirs.device)
    if n:
        with torch.cuda.device(dirs.device) if dirs.is_cuda else contextlib.nullcontext():
            _sh_kernel[(triton.cdiv(n, block),)](dirs, out, n, BLOCK=block, num_warps=4, enable_fp_fusion=False)
    return out
