"""The field's two MLPs after the hash grid in one Triton launch forward and one backward.

The fast twin of :class:`trainer.model.field.NGPField`'s PyTorch path (which stays the reference):

    h   = W_d2 · relu(W_d1 · x)                       density MLP, x = hash-grid features [S, L·F]
    σ   = exp(h₀)                                     (trunc_exp: gradient exp(min(h₀, 15)))
    rgb = sigmoid(W_c3 · relu(W_c2 · relu(W_c1 · [h₁..h₁₅, SH(d)])))     colour MLP

for instant-ngp's default shapes (density MLP with one hidden layer, colour MLP with two, ReLU,
no output activation, no biases; tiny-cuda-nn's ``FullyFusedMLP`` in ``nerf_network.h``). The
PyTorch path issues ~17 launches forward and ~30 backward for this (a GEMM, an activation and a
copy per layer, the concatenation, the activations' backward); the step is host-bound (see
docs/benchmarks.md), so fewer launches is the point. Each program keeps a block of samples in
registers through all five layers; nothing between layers goes to memory. Backward recomputes the
activations (cheaper than storing five [S, 64] tensors), and each program sums its samples' weight
gradients in registers and writes one partial row; the rows are summed by one ``torch.sum``.

Products use ``tl.dot`` in one of three input precisions (:data:`DOT_PRECISIONS`), chosen by the
field from ``training.precision``: ``"ieee"`` (float32 inputs, no tensor cores; the reference runs
with float32 matmul precision "highest" and results agree to float32 rounding, not bitwise),
``"tf32"`` (tensor-core TF32 inputs, 10-bit mantissa, float32 sums; what ``torch.backends.cuda.
matmul.allow_tf32`` gives the PyTorch path) and ``"bf16"`` (bfloat16 inputs, float32 sums; the
reference under bf16 autocast). Activations and sums stay float32 in every case.

Programs are persistent: a grid of at most ``programs_per_sm`` programs per SM (:data:`KERNEL_SETTINGS`),
each loading the five weight matrices once and walking tiles of samples;
the backward's weight-gradient partial sums are one row per program. :func:`fused_density` takes an
optional device count of live rows (the march buffers' valid slots): tiles past it are written as
zero density without running the MLP, so a fixed-capacity step pays for the samples it marched,
not for its capacity.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import triton
import triton.language as tl

from trainer.triton_support import INTERPRET

__all__ = ["DOT_PRECISIONS", "KERNEL_SETTINGS", "PROBE_SAMPLES", "dense_features", "fused_density",
           "fused_field_head", "fused_head_supported", "fused_kernels_problem"]

DOT_PRECISIONS = {"ieee": 0, "tf32": 1, "bf16": 2}  # tl.dot input precision → the kernels' DOT constant
# Launch settings (tile rows, warps, persistent programs per SM); bench/mlp.py times alternatives.
# tl.dot needs >= 16 rows; the backward keeps six weight-gradient accumulators (~10k floats at
# width 64) in registers beside a tile's activations, hence its smaller tile and 8 warps.
KERNEL_SETTINGS = {"forward_rows": 128, "forward_warps": 4, "backward_rows": 32, "backward_warps": 8,
                   "density_rows": 128, "density_warps": 4, "programs_per_sm": 4}
# IEEE products run on the FMA units; their backward keeps the launch it was measured fastest
# with (1024 programs of 8 fixed tiles at 2^18 samples: a persistent loop of unknown length
# made it several times slower on an H200, docs/benchmarks.md)
IEEE_BACKWARD_TILES = 8
INTERPRETER_PROGRAMS = 4  # persistent programs when there is no GPU (Triton's CPU interpreter)
GEOMETRY_DIM = 16  # the density MLP's output: the density logit h₀ and 15 geometry features
SH_PAD = 16  # SH coefficients, padded to the degree-4 count
OUT_PAD = 16  # colour outputs (3), padded to tl.dot's minimum
_TRUNC_EXP_GRAD_MAX = 15.0
PROBE_SAMPLES = 16  # samples of the launches that check the kernels fit the device
PROBE_TOLERANCE = 0.05  # their outputs against the float32 reference: bfloat16 rounding passes, garbage fails
_PROBED: dict[tuple, str | None] = {}  # (device, width, inputs, SH inputs, precision) → problem


def _next_pow2(n: int) -> int:
    return 1 << max(4, (n - 1).bit_length())


def fused_head_supported(density_weights: list[torch.Tensor], rgb_weights: list[torch.Tensor],
                         activations: tuple[str, str, str, str]) -> bool:
    """Whether the fused kernels implement these MLPs: density MLP with one hidden layer, colour
    MLP with two, the same hidden width (a power of two in 16..128), ReLU hidden activations, no
    output activations, 16 density outputs, 3 colour outputs, at most 16 SH inputs and at most 64
    hash-grid features.

    Args:
        density_weights: the density MLP's weight matrices, ``[out, in]`` each.
        rgb_weights: the colour MLP's weight matrices.
        activations: (density hidden, density output, colour hidden, colour output) names.
    """
    if len(density_weights) != 2 or len(rgb_weights) != 3:
        return False
    if activations != ("ReLU", "None", "ReLU", "None"):
        return False
    width = density_weights[0].shape[0]
    n_in = density_weights[0].shape[1]
    n_sh = rgb_weights[0].shape[1] - (GEOMETRY_DIM - 1)
    return (
        width in (16, 32, 64, 128)
        and n_in <= 64
        and density_weights[1].shape == (GEOMETRY_DIM, width)
        and 1 <= n_sh <= SH_PAD
        and rgb_weights[0].shape[0] == width
        and rgb_weights[1].shape == (width, width)
        and rgb_weights[2].shape == (3, width)
        and all(w.dtype == torch.float32 for w in density_weights + rgb_weights)
    )


@triton.jit
def _mm(a, b, DOT: tl.constexpr):
    """a @ b with float32 sums and the DOT input precision (0 IEEE float32, 1 TF32, 2 bfloat16)."""
    if DOT == 2:
        return tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), out_dtype=tl.float32)
    elif DOT == 1:
        return tl.dot(a, b, input_precision="tf32")
    else:
        return tl.dot(a, b, input_precision="ieee")


@triton.jit
def _load_t(w_ptr, row_stride, col0, K: tl.constexpr, N: tl.constexpr, k_lo, k_hi, n_hi):
    """A [K, N] tile of Wᵀ for W [out, in] (row stride ``row_stride``): tile[k, j] = W[j, col0 + k − k_lo]
    for k_lo <= k < k_hi and j < n_hi, else 0."""
    k = tl.arange(0, K)[:, None]
    j = tl.arange(0, N)[None, :]
    mask = (k >= k_lo) & (k < k_hi) & (j < n_hi)
    return tl.load(w_ptr + j * row_stride + (col0 + k - k_lo), mask=mask, other=0.0)


@triton.jit
def _forward_tile(x_ptr, sh_ptr, rows, rmask, n_in, x_row_stride, x_col_stride, n_sh, sh_stride,
                  wd1t, wd2t, wgt, wst, wc2t, wc3t,
                  IN: tl.constexpr, W: tl.constexpr, G: tl.constexpr, SHP: tl.constexpr, DOT: tl.constexpr):
    """Activations of one tile of samples: x, h1, h, sh, c1, c2, o (pre-sigmoid colour)."""
    cin = tl.arange(0, IN).to(tl.int64)[None, :]  # × a feature-major column stride (S) passes 2^31
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cin * x_col_stride, mask=rmask[:, None] & (cin < n_in),
                other=0.0)
    h1 = tl.maximum(_mm(x, wd1t, DOT), 0.0)
    h = _mm(h1, wd2t, DOT)
    csh = tl.arange(0, SHP)[None, :]
    sh = tl.load(sh_ptr + rows[:, None] * sh_stride + csh, mask=rmask[:, None] & (csh < n_sh), other=0.0)
    c1 = tl.maximum(_mm(h, wgt, DOT) + _mm(sh, wst, DOT), 0.0)
    c2 = tl.maximum(_mm(c1, wc2t, DOT), 0.0)
    o = _mm(c2, wc3t, DOT)
    return x, h1, h, sh, c1, c2, o


@triton.jit
def _weights(wd1_ptr, wd2_ptr, wc1_ptr, wc2_ptr, wc3_ptr, n_in, n_sh,
             IN: tl.constexpr, W: tl.constexpr, G: tl.constexpr, SHP: tl.constexpr, OUTP: tl.constexpr):
    """Transposed, zero-padded weight tiles. The colour MLP's first layer takes [h₁..h₁₅, SH]: its
    geometry part is a [G, W] tile whose row 0 (the density logit h₀) is zero, its SH part [SHP, W]."""
    wd1t = _load_t(wd1_ptr, n_in, 0, IN, W, 0, n_in, W)
    wd2t = _load_t(wd2_ptr, W, 0, W, G, 0, W, G)
    n_c1 = G - 1 + n_sh
    wgt = _load_t(wc1_ptr, n_c1, 0, G, W, 1, G, W)
    wst = _load_t(wc1_ptr, n_c1, G - 1, SHP, W, 0, n_sh, W)
    wc2t = _load_t(wc2_ptr, W, 0, W, W, 0, W, W)
    wc3t = _load_t(wc3_ptr, W, 0, W, OUTP, 0, W, 3)
    return wd1t, wd2t, wgt, wst, wc2t, wc3t


@triton.jit
def _head_forward_kernel(x_ptr, sh_ptr, wd1_ptr, wd2_ptr, wc1_ptr, wc2_ptr, wc3_ptr, sigma_ptr, rgb_ptr,
                         n, n_in, x_row_stride, x_col_stride, n_sh, sh_stride,
                         ROWS: tl.constexpr, IN: tl.constexpr, W: tl.constexpr, G: tl.constexpr,
                         SHP: tl.constexpr, OUTP: tl.constexpr, DOT: tl.constexpr):
    wd1t, wd2t, wgt, wst, wc2t, wc3t = _weights(wd1_ptr, wd2_ptr, wc1_ptr, wc2_ptr, wc3_ptr, n_in, n_sh,
                                                IN, W, G, SHP, OUTP)
    cg = tl.arange(0, G)[None, :]
    co = tl.arange(0, OUTP)[None, :]
    for tile in range(tl.program_id(0), tl.cdiv(n, ROWS), tl.num_programs(0)):
        rows = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
        rmask = rows < n
        x, h1, h, sh, c1, c2, o = _forward_tile(x_ptr, sh_ptr, rows, rmask, n_in, x_row_stride, x_col_stride,
                                                n_sh, sh_stride, wd1t, wd2t, wgt, wst, wc2t, wc3t, IN, W, G, SHP,
                                                DOT)
        h0 = tl.sum(tl.where(cg == 0, h, 0.0), axis=1)
        tl.store(sigma_ptr + rows, tl.exp(h0), mask=rmask)
        tl.store(rgb_ptr + rows[:, None] * 3 + co, tl.sigmoid(o), mask=rmask[:, None] & (co < 3))


@triton.jit
def _density_kernel(x_ptr, wd1_ptr, wd2_ptr, sigma_ptr, count_ptr, n, n_in, x_row_stride, x_col_stride,
                    ROWS: tl.constexpr, IN: tl.constexpr, W: tl.constexpr, G: tl.constexpr,
                    HAS_COUNT: tl.constexpr, DOT: tl.constexpr):
    n_live = n
    if HAS_COUNT:  # rows from the device count on are not samples: density 0, no MLP
        n_live = tl.minimum(tl.load(count_ptr).to(tl.int64), n)
    wd1t = _load_t(wd1_ptr, n_in, 0, IN, W, 0, n_in, W)
    # only the density logit's column of the second layer: h₀ = relu(W_d1 · x) · W_d2[0]
    w0 = tl.load(wd2_ptr + tl.arange(0, W))
    cin = tl.arange(0, IN).to(tl.int64)[None, :]  # × a feature-major column stride (S) passes 2^31
    for tile in range(tl.program_id(0), tl.cdiv(n, ROWS), tl.num_programs(0)):
        rows = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
        if tile * ROWS < n_live:
            rmask = rows < n_live
            x = tl.load(x_ptr + rows[:, None] * x_row_stride + cin * x_col_stride,
                        mask=rmask[:, None] & (cin < n_in), other=0.0)
            h1 = tl.maximum(_mm(x, wd1t, DOT), 0.0)
            h0 = tl.sum(h1 * w0[None, :], axis=1)
            tl.store(sigma_ptr + rows, tl.where(rmask, tl.exp(h0), 0.0), mask=rows < n)
        else:
            tl.store(sigma_ptr + rows, tl.zeros((ROWS,), dtype=tl.float32), mask=rows < n)


@triton.jit
def _store_partial(ptr, tile_t, row_stride, col0, K: tl.constexpr, N: tl.constexpr, k_lo, k_hi, n_hi):
    """Write a [K, N] Wᵀ-shaped tile into W's layout (the inverse of ``_load_t``)."""
    k = tl.arange(0, K)[:, None]
    j = tl.arange(0, N)[None, :]
    mask = (k >= k_lo) & (k < k_hi) & (j < n_hi)
    tl.store(ptr + j * row_stride + (col0 + k - k_lo), tile_t, mask=mask)


@triton.jit
def _backward_tile(x_ptr, sh_ptr, g_sigma_ptr, g_rgb_ptr, g_x_ptr, tile, n, n_in, x_row_stride, x_col_stride,
                   g_row_stride, g_col_stride, n_sh, sh_stride,
                   wd1t, wd2t, wgt, wst, wc2t, wc3t, acc_d1, acc_d2, acc_g, acc_s, acc_c2, acc_c3,
                   ROWS: tl.constexpr, IN: tl.constexpr, W: tl.constexpr, G: tl.constexpr, SHP: tl.constexpr,
                   OUTP: tl.constexpr, EXP_MAX: tl.constexpr, DOT: tl.constexpr):
    """One tile's backward: the features' gradient stored, the weight gradients added to the six
    accumulators (returned)."""
    cg = tl.arange(0, G)[None, :]
    co = tl.arange(0, OUTP)[None, :]
    cin = tl.arange(0, IN).to(tl.int64)[None, :]  # × a feature-major column stride (S) passes 2^31
    rows = (tile * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    rmask = rows < n
    x, h1, h, sh, c1, c2, o = _forward_tile(x_ptr, sh_ptr, rows, rmask, n_in, x_row_stride, x_col_stride,
                                            n_sh, sh_stride, wd1t, wd2t, wgt, wst, wc2t, wc3t, IN, W, G, SHP, DOT)
    rgb = tl.sigmoid(o)
    g_rgb = tl.load(g_rgb_ptr + rows[:, None] * 3 + co, mask=rmask[:, None] & (co < 3), other=0.0)
    d_o = g_rgb * rgb * (1.0 - rgb)
    acc_c3 += _mm(tl.trans(c2), d_o, DOT)
    d_c2 = tl.where(c2 > 0.0, _mm(d_o, tl.trans(wc3t), DOT), 0.0)
    acc_c2 += _mm(tl.trans(c1), d_c2, DOT)
    d_c1 = tl.where(c1 > 0.0, _mm(d_c2, tl.trans(wc2t), DOT), 0.0)
    acc_g += _mm(tl.trans(h), d_c1, DOT)
    acc_s += _mm(tl.trans(sh), d_c1, DOT)
    d_h = _mm(d_c1, tl.trans(wgt), DOT)  # column 0 is 0 (wgt's row 0 is)
    h0 = tl.sum(tl.where(cg == 0, h, 0.0), axis=1)
    g_sigma = tl.load(g_sigma_ptr + rows, mask=rmask, other=0.0)
    d_h0 = g_sigma * tl.exp(tl.minimum(h0, EXP_MAX))
    d_h = tl.where(cg == 0, d_h0[:, None], d_h)
    acc_d2 += _mm(tl.trans(h1), d_h, DOT)
    d_h1 = tl.where(h1 > 0.0, _mm(d_h, tl.trans(wd2t), DOT), 0.0)
    acc_d1 += _mm(tl.trans(x), d_h1, DOT)
    d_x = _mm(d_h1, tl.trans(wd1t), DOT)
    tl.store(g_x_ptr + rows[:, None] * g_row_stride + cin * g_col_stride, d_x, mask=rmask[:, None] & (cin < n_in))
    return acc_d1, acc_d2, acc_g, acc_s, acc_c2, acc_c3


@triton.jit
def _head_backward_kernel(x_ptr, sh_ptr, wd1_ptr, wd2_ptr, wc1_ptr, wc2_ptr, wc3_ptr,
                          g_sigma_ptr, g_rgb_ptr, g_x_ptr, partial_ptr,
                          n, n_in, x_row_stride, x_col_stride, g_row_stride, g_col_stride, n_sh, sh_stride,
                          partial_stride, off_d2, off_c1, off_c2, off_c3,
                          ROWS: tl.constexpr, TILES: tl.constexpr, IN: tl.constexpr, W: tl.constexpr,
                          G: tl.constexpr, SHP: tl.constexpr, OUTP: tl.constexpr, EXP_MAX: tl.constexpr,
                          DOT: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    wd1t, wd2t, wgt, wst, wc2t, wc3t = _weights(wd1_ptr, wd2_ptr, wc1_ptr, wc2_ptr, wc3_ptr, n_in, n_sh,
                                                IN, W, G, SHP, OUTP)
    acc_d1 = tl.zeros((IN, W), dtype=tl.float32)
    acc_d2 = tl.zeros((W, G), dtype=tl.float32)
    acc_g = tl.zeros((G, W), dtype=tl.float32)
    acc_s = tl.zeros((SHP, W), dtype=tl.float32)
    acc_c2 = tl.zeros((W, W), dtype=tl.float32)
    acc_c3 = tl.zeros((W, OUTP), dtype=tl.float32)
    if TILES > 0:  # TILES consecutive tiles per program, a loop of known length
        for t in range(TILES):
            acc_d1, acc_d2, acc_g, acc_s, acc_c2, acc_c3 = _backward_tile(
                x_ptr, sh_ptr, g_sigma_ptr, g_rgb_ptr, g_x_ptr, pid * TILES + t, n, n_in, x_row_stride,
                x_col_stride, g_row_stride, g_col_stride, n_sh, sh_stride,
                wd1t, wd2t, wgt, wst, wc2t, wc3t, acc_d1, acc_d2, acc_g, acc_s, acc_c2, acc_c3,
                ROWS, IN, W, G, SHP, OUTP, EXP_MAX, DOT)
    else:  # persistent: every num_programs-th tile
        for tile in range(tl.program_id(0), tl.cdiv(n, ROWS), tl.num_programs(0)):
            acc_d1, acc_d2, acc_g, acc_s, acc_c2, acc_c3 = _backward_tile(
                x_ptr, sh_ptr, g_sigma_ptr, g_rgb_ptr, g_x_ptr, tile, n, n_in, x_row_stride, x_col_stride,
                g_row_stride, g_col_stride, n_sh, sh_stride,
                wd1t, wd2t, wgt, wst, wc2t, wc3t, acc_d1, acc_d2, acc_g, acc_s, acc_c2, acc_c3,
                ROWS, IN, W, G, SHP, OUTP, EXP_MAX, DOT)
    base = partial_ptr + pid * partial_stride
    n_c1 = G - 1 + n_sh
    _store_partial(base, acc_d1, n_in, 0, IN, W, 0, n_in, W)
    _store_partial(base + off_d2, acc_d2, W, 0, W, G, 0, W, G)
    _store_partial(base + off_c1, acc_g, n_c1, 0, G, W, 1, G, W)
    _store_partial(base + off_c1, acc_s, n_c1, G - 1, SHP, W, 0, n_sh, W)
    _store_partial(base + off_c2, acc_c2, W, 0, W, W, 0, W, W)
    _store_partial(base + off_c3, acc_c3, W, 0, W, OUTP, 0, W, 3)


def _meta(x: torch.Tensor, weights: tuple[torch.Tensor, ...], sh: torch.Tensor) -> dict:
    wd1, _, wc1, _, _ = weights
    return dict(n_in=x.shape[1], n_sh=wc1.shape[1] - (GEOMETRY_DIM - 1), sh_stride=sh.stride(0),
                IN=_next_pow2(x.shape[1]), W=wd1.shape[0], G=GEOMETRY_DIM, SHP=SH_PAD, OUTP=OUT_PAD)


def _device(t: torch.Tensor):
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


_SM_COUNTS: dict[int, int] = {}


def _programs(t: torch.Tensor, n: int, rows: int) -> int:
    """Persistent programs for ``n`` rows in tiles of ``rows``: one per tile, at most
    ``programs_per_sm`` per SM (a fixed small number on the CPU interpreter)."""
    if t.is_cuda:
        index = t.device.index if t.device.index is not None else torch.cuda.current_device()
        if index not in _SM_COUNTS:
            _SM_COUNTS[index] = torch.cuda.get_device_properties(index).multi_processor_count
        limit = _SM_COUNTS[index] * KERNEL_SETTINGS["programs_per_sm"]
    else:
        limit = INTERPRETER_PROGRAMS
    return max(1, min(triton.cdiv(n, rows), limit))


def dense_features(features: torch.Tensor) -> torch.Tensor:
    """``features`` [S, K] itself when the kernels read it in place, row-major (strides ``(K, 1)``)
    or feature-major (strides ``(1, S)``, the Triton hash grid's transposed output: each column's
    rows are contiguous, so a tile's loads stay coalesced), else a row-major copy."""
    n, k = features.shape
    if features.stride() == (k, 1) or features.stride() == (1, n) or features.is_contiguous():
        return features
    return features.contiguous()


def _dot(precision: str) -> int:
    try:
        return DOT_PRECISIONS[precision]
    except KeyError:
        raise ValueError(f"fused MLP: precision must be one of {sorted(DOT_PRECISIONS)}, got {precision!r}") from None


class _FusedHead(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, sh, dot, wd1, wd2, wc1, wc2, wc3):  # type: ignore[override]
        weights = (wd1, wd2, wc1, wc2, wc3)
        meta = _meta(x, weights, sh)
        n = x.shape[0]
        sigma = torch.empty(n, dtype=torch.float32, device=x.device)
        rgb = torch.empty(n, 3, dtype=torch.float32, device=x.device)
        if n:
            rows = KERNEL_SETTINGS["forward_rows"]
            with _device(x):
                _head_forward_kernel[(_programs(x, n, rows),)](
                    x, sh, *weights, sigma, rgb, n, meta["n_in"], x.stride(0), x.stride(1), meta["n_sh"],
                    meta["sh_stride"],
                    ROWS=rows, IN=meta["IN"], W=meta["W"], G=meta["G"], SHP=meta["SHP"], OUTP=meta["OUTP"],
                    DOT=dot, num_warps=KERNEL_SETTINGS["forward_warps"],
                )
        ctx.dot = dot
        ctx.save_for_backward(x, sh, *weights)
        return sigma, rgb

    @staticmethod
    def backward(ctx, g_sigma, g_rgb):  # type: ignore[override]
        x, sh, *weights = ctx.saved_tensors
        meta = _meta(x, tuple(weights), sh)
        n = x.shape[0]
        g_sigma = torch.zeros(n, device=x.device) if g_sigma is None else g_sigma.float().contiguous()
        g_rgb = torch.zeros(n, 3, device=x.device) if g_rgb is None else g_rgb.float().contiguous()
        sizes = [w.numel() for w in weights]
        offsets = [sum(sizes[:i]) for i in range(len(sizes))]
        rows = KERNEL_SETTINGS["backward_rows"]
        tiles = IEEE_BACKWARD_TILES if ctx.dot == DOT_PRECISIONS["ieee"] else 0
        n_programs = max(1, triton.cdiv(n, rows * tiles)) if tiles else _programs(x, n, rows)
        # every element of a program's row is written (the stores' masks cover each weight); with no
        # samples there is no program, and the gradients are zeros
        alloc = torch.empty if n else torch.zeros
        partial = alloc(n_programs, sum(sizes), dtype=torch.float32, device=x.device)
        g_x = torch.empty_like(x)  # the features' layout (row-major or feature-major)
        if n:
            with _device(x):
                _head_backward_kernel[(n_programs,)](
                    x, sh, *weights, g_sigma, g_rgb, g_x, partial, n, meta["n_in"], x.stride(0), x.stride(1),
                    g_x.stride(0), g_x.stride(1), meta["n_sh"], meta["sh_stride"], partial.stride(0), offsets[1],
                    offsets[2], offsets[3], offsets[4],
                    ROWS=rows, TILES=tiles, IN=meta["IN"], W=meta["W"], G=meta["G"], SHP=meta["SHP"],
                    OUTP=meta["OUTP"], EXP_MAX=_TRUNC_EXP_GRAD_MAX, DOT=ctx.dot,
                    num_warps=KERNEL_SETTINGS["backward_warps"],
                )
        total = partial.sum(dim=0)
        grads = [total[o:o + s].view_as(w) for o, s, w in zip(offsets, sizes, weights)]
        needs = ctx.needs_input_grad
        return (g_x if needs[0] else None, None, None, *[g if need else None for g, need in zip(grads, needs[3:])])


def fused_field_head(features: torch.Tensor, sh: torch.Tensor, density_weights: list[torch.Tensor],
                     rgb_weights: list[torch.Tensor], precision: str = "ieee") -> tuple[torch.Tensor, torch.Tensor]:
    """Density and colour of samples from their hash-grid features and SH of their directions.

    Args:
        features: [S, L·F] float32 (the hash grid's output; its gradient is returned), read in
            place when row-major or feature-major (strides ``(1, S)``, the Triton hash grid's
            output), else copied to row-major first; the gradient has the same layout.
        sh: [S, ≥ n_sh] float32 with unit column stride: the first ``n_sh`` columns are used, where
            ``n_sh`` = the colour MLP's inputs − 15 (degree² of the SH encoding). No gradient.
        density_weights: the density MLP's two ``[out, in]`` float32 weight matrices.
        rgb_weights: the colour MLP's three weight matrices (first ``[W, 15 + n_sh]``).
        precision: the products' input precision, a key of :data:`DOT_PRECISIONS`.

    Returns:
        sigma [S] float32 (``exp`` of the density logit; 1/world units) and rgb [S, 3] float32 in
        (0, 1), differentiable in ``features`` and every weight.

    Raises:
        ValueError: shapes or dtypes the kernels do not implement (see :func:`fused_head_supported`),
            or an unknown ``precision``.
    """
    dot = _dot(precision)
    if not fused_head_supported(density_weights, rgb_weights, ("ReLU", "None", "ReLU", "None")):
        raise ValueError("fused_field_head: MLP shapes or dtypes outside what the kernels implement "
                         "(see fused_head_supported)")
    n_sh = rgb_weights[0].shape[1] - (GEOMETRY_DIM - 1)
    if features.dtype != torch.float32 or features.ndim != 2 or features.shape[1] != density_weights[0].shape[1]:
        raise ValueError(f"fused_field_head: features must be [S, {density_weights[0].shape[1]}] float32, "
                         f"got {tuple(features.shape)} {features.dtype}")
    if sh.dtype != torch.float32 or sh.ndim != 2 or sh.shape[0] != features.shape[0] or sh.shape[1] < n_sh \
            or sh.stride(1) != 1:
        raise ValueError(f"fused_field_head: sh must be [{features.shape[0]}, >= {n_sh}] float32 with unit "
                         f"column stride, got {tuple(sh.shape)} {sh.dtype}")
    return _FusedHead.apply(dense_features(features), sh.detach(), dot, *density_weights, *rgb_weights)


def fused_density(features: torch.Tensor, density_weights: list[torch.Tensor], precision: str = "ieee",
                  count: torch.Tensor | None = None) -> torch.Tensor:
    """Density of samples from their hash-grid features, in one launch, without gradient (what
    compaction's density pass and the occupancy-grid update need).

    Args:
        features: [S, L·F] float32 (the hash grid's output; read in place when row-major or
            feature-major, as :func:`fused_field_head`).
        density_weights: the density MLP's two ``[out, in]`` float32 weight matrices (shapes as
            :func:`fused_head_supported` requires).
        precision: the products' input precision, a key of :data:`DOT_PRECISIONS`.
        count: optional [] integer tensor on the device: only the first ``count`` rows are samples
            (read by the kernel, never on the host); the rest get density 0.

    Returns:
        sigma [S] float32, ``exp`` of the density logit (1/world units); no autograd history.

    Raises:
        ValueError: a features tensor that is not [S, L·F] float32, or an unknown ``precision``.
    """
    dot = _dot(precision)
    wd1, wd2 = density_weights
    if features.dtype != torch.float32 or features.ndim != 2 or features.shape[1] != wd1.shape[1]:
        raise ValueError(f"fused_density: features must be [S, {wd1.shape[1]}] float32, "
                         f"got {tuple(features.shape)} {features.dtype}")
    features = dense_features(features.detach())
    n = features.shape[0]
    sigma = torch.empty(n, dtype=torch.float32, device=features.device)
    if n:
        rows = KERNEL_SETTINGS["density_rows"]
        with _device(features):
            _density_kernel[(_programs(features, n, rows),)](
                features, wd1.detach(), wd2.detach(), sigma, count if count is not None else sigma, n,
                features.shape[1], features.stride(0), features.stride(1), ROWS=rows, IN=_next_pow2(features.shape[1]), W=wd1.shape[0], G=GEOMETRY_DIM,
                HAS_COUNT=count is not None, DOT=dot, num_warps=KERNEL_SETTINGS["density_warps"],
            )
    return sigma


def fused_kernels_problem(density_weights: list[torch.Tensor], rgb_weights: list[torch.Tensor], precision: str,
                          reference: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]) -> str | None:
    """Why the fused kernels cannot run these MLPs on their weights' device, or None when they can.

    Each kernel the field launches (head forward and backward, density with and without a live
    count) runs once on :data:`PROBE_SAMPLES` random samples, which compiles it for these shapes. A
    kernel that needs more of a GPU's resources than it has fails at its first launch with Triton's
    ``OutOfResources`` (the head's backward at width 128 asks 260,352 bytes of shared memory per
    block; an H100 or H200 has 232,448), and its message is returned; any other Triton error at
    that launch (a compiler, or an interpreter, that cannot run them: Triton 3.6's interpreter
    takes no loop that starts at the program id) is returned by its name and message. The samples (drawn from a
    generator of their own) must also give σ and rgb within :data:`PROBE_TOLERANCE` of the
    ``reference`` path in float32, or the kernels compute wrong values on this device (bfloat16 products in Triton's
    CPU interpreter), and that is the problem returned. The answer is kept per
    device, shapes and precision, so later fields do not launch again. Weights on a CPU outside
    Triton's interpreter are not probed (no kernel launches there): None.

    Args:
        density_weights, rgb_weights: as :func:`fused_field_head` (shapes it supports).
        precision: a key of :data:`DOT_PRECISIONS`.
        reference: ``(features [S, L·F], sh [S, n_sh]) -> (σ [S], rgb [S, 3])`` with these weights
            in PyTorch (:meth:`trainer.model.field.NGPField.reference_heads`, the kernels' twin).

    Raises:
        ValueError: as :func:`fused_field_head`.
    """
    device = density_weights[0].device
    n_in = density_weights[0].shape[1]
    n_sh = rgb_weights[0].shape[1] - (GEOMETRY_DIM - 1)
    key = (str(device), density_weights[0].shape[0], n_in, n_sh, precision)
    if device.type != "cuda" and not INTERPRET:
        return None
    if key not in _PROBED:
        draws = torch.Generator().manual_seed(0)  # its own draws: the run's generators are untouched
        with torch.inference_mode(False):
            # feature-major, as the Triton hash grid hands the features over (the same compiled variant)
            x = (torch.rand(n_in, PROBE_SAMPLES, generator=draws) * 2 - 1).to(device).t().requires_grad_()
            sh = (torch.rand(PROBE_SAMPLES, n_sh, generator=draws) * 2 - 1).to(device)
            weights = [w.detach().clone().requires_grad_() for w in (*density_weights, *rgb_weights)]
        problem = None
        try:  # (a field built under inference mode or no_grad still probes the backward)
            with torch.inference_mode(False), torch.enable_grad():
                sigma, rgb = fused_field_head(x, sh, weights[:2], weights[2:], precision)
                (sigma.sum() + rgb.sum()).backward()
            density = fused_density(x.detach(), weights[:2], precision)
            fused_density(x.detach(), weights[:2], precision, torch.tensor(PROBE_SAMPLES, device=device))
            with torch.no_grad(), torch.autocast(device.type, enabled=False):  # float32 whatever the caller's
                expected_sigma, expected_rgb = reference(x.detach(), sh)
            close = all(torch.allclose(got.detach(), want, rtol=PROBE_TOLERANCE, atol=PROBE_TOLERANCE)
                        for got, want in ((sigma, expected_sigma), (density, expected_sigma), (rgb, expected_rgb)))
            if not close:
                worst = float((sigma.detach() - expected_sigma).abs().max())
                problem = (f"their {precision} products give wrong values here (σ off by {worst:.3g} from "
                           "the float32 reference"
                           + ("; Triton's interpreter has no bfloat16 products" if INTERPRET else "") + ")")
        except triton.runtime.errors.OutOfResources as error:
            problem = str(error)
        except triton.runtime.errors.TritonError as error:  # e.g. a compiler or interpreter that cannot run them
            problem = f"they do not run here ({type(error).__name__}: {str(error).strip()[:200]})"
        _PROBED[key] = problem
    return _PROBED[key]
