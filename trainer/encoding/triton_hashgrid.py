"""Fused Triton kernels for the multiresolution hash encoding (the ``"triton"`` backend).

Source: Müller et al., *Instant Neural Graphics Primitives with a Multiresolution Hash Encoding*,
SIGGRAPH 2022, §3 (eq. 2–4); tiny-cuda-nn ``encodings/grid.h`` (``kernel_grid``,
``kernel_grid_backward``). The index, hash, corner and weight conventions are copied exactly from
:mod:`trainer.encoding.hashgrid` (read its module docstring); :func:`hash_grid_encode_reference`
is the slow twin these kernels are tested against.

Kernel design (one H200: 132 SMs, 50 MB L2; the paper-era fp16 table, ≤ 32 MiB — 25 MiB with
b = 1.5 — fits in L2):

* **One level per program.** The launch grid is ``(cdiv(n, BLOCK), L)`` and the first grid axis
  runs fastest, so all point blocks of level 0 run before those of level 1: at any time only one
  or two levels' rows (≤ 2 MiB in fp16 at T = 2^19) are being read, and they stay hot in L2.
* **Level metadata from a tiny int32 tensor** ``[L, 3]`` (resolution N_l, dense flag, first row),
  built once per (config, device) and cached. Dense and hashed rows are both computed from three
  per-axis terms, ``row = (tx + ty + tz)`` when dense or ``(tx ^ ty ^ tz) & (T − 1)`` when hashed,
  selected by the (uniform) dense flag — no divergent branch.
* **Vectorised feature loads**: the F features of a corner are loaded as one ``[BLOCK, F]`` tile
  (F contiguous values, e.g. one 4-byte load for F = 2 in fp16).
* **Coalesced writes**: the features are written *feature-major* into a ``[L·F, n]`` buffer and
  returned as its transpose, an ``[n, L·F]`` view with strides ``(1, n)``: one level's program
  writes F contiguous runs of BLOCK floats instead of 8 bytes every ``L·F·4`` bytes. Columns keep
  the level-major meaning of the reference (column ``l·F + f`` is level ``l``, feature ``f``).
  ``torch.nn.Linear``, ``torch.cat`` and ``reshape`` accept the view; ``view()`` on it does not
  (call ``contiguous()`` first, or pass ``feature_major_output=False``).
* **Backward**: the gradient with respect to the table is scattered with relaxed ``tl.atomic_add``
  into a float32 buffer (cast to the table dtype at the end). Plain atomics, no in-block reduction:
  the coarse dense levels see more same-address contention, to be measured with
  ``bench/encoding.py`` before adding a sort/segment step.
* **No gradient with respect to x.** The trainer never needs it (positions come from the ray
  marcher, not from a differentiable path), so :class:`HashGridTritonFunction` returns ``None``
  for ``x``; use the ``"torch"`` backend where d features / d x is wanted.

Interpretation on CPU: with ``TRITON_INTERPRET=1`` in the environment *when this module is first
imported* (Triton reads it when ``@triton.jit`` wraps a kernel), the kernels run in Triton's
interpreter on CPU tensors; that is how the tests check them on machines without a GPU.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from trainer.encoding.backends import HashGridBackend, register_backend
from trainer.encoding.hashgrid import (
    HASH_PRIMES,
    HashGridConfig,
    level_is_dense,
    level_offsets,
    level_resolutions,
)
from trainer.triton_support import INTERPRET

__all__ = [
    "BACKWARD_BLOCK",
    "BACKWARD_NUM_WARPS",
    "FORWARD_BLOCK",
    "FORWARD_NUM_WARPS",
    "INTERPRET",
    "HashGridTritonFunction",
    "TritonBackend",
    "hash_grid_backward_triton",
    "hash_grid_encode_triton",
    "hash_grid_forward_triton",
    "level_metadata",
]

# ---- tuning knobs (points per program and warps per program of each kernel)
FORWARD_BLOCK = 512
FORWARD_NUM_WARPS = 4
BACKWARD_BLOCK = 256
BACKWARD_NUM_WARPS = 4

# Floating-point contraction is off in both kernels: fused into an FMA, ``pos − cell`` would use
# the unrounded ``x · N_l`` while ``cell = floor(pos)`` uses the rounded one, so ``frac`` would
# differ from the reference by up to half an ulp of pos (~6e-5 at N_l ≈ 1300). The forward sum
# uses explicit ``tl.fma``.
_COMPILE_OPTIONS = {"enable_fp_fusion": False}


_TABLE_DTYPES = (torch.float16, torch.float32)
_INT32_LIMIT = 2**31
# Hash primes of the y and z axes (the x prime is 1), as compile-time constants of the kernels.
_PRIME_Y = tl.constexpr(HASH_PRIMES[1])
_PRIME_Z = tl.constexpr(HASH_PRIMES[2])
assert HASH_PRIMES[0] == 1, "the kernels assume the x prime is 1"


# ------------------------------------------------------------------------------------ kernels


@triton.jit
def _cell_and_fraction(x_ptr, points, point_mask, axis: tl.constexpr, resolution):
    """One axis of a block of points: cell corner c0 (int32 in [0, N−1]) and frac in [0, 1]."""
    x = tl.load(x_ptr + points * 3 + axis, mask=point_mask, other=0.0)
    x = tl.minimum(tl.maximum(x, 0.0), 1.0)
    pos = x * resolution.to(tl.float32)
    cell = tl.minimum(tl.maximum(tl.floor(pos), 0.0), (resolution - 1).to(tl.float32))
    frac = pos - cell
    # Clamped again as integers so a NaN position can never address outside the level.
    c0 = tl.minimum(tl.maximum(cell.to(tl.int32), 0), resolution - 1)
    return c0, frac


@triton.jit
def _level_setup(x_ptr, level_meta_ptr, level, points, point_mask):
    """Per-axis row terms (bit 0 and bit 1), fractions and level metadata for one level.

    Row of corner (bx, by, bz): dense ``tx + ty + tz`` with strides (1, N+1, (N+1)^2); hashed
    ``(tx ^ ty ^ tz) & (T − 1)`` with the primes (1, 2654435761, 805459861), all uint32.
    """
    resolution = tl.load(level_meta_ptr + level * 3 + 0)
    dense = tl.load(level_meta_ptr + level * 3 + 1) != 0
    first_row = tl.load(level_meta_ptr + level * 3 + 2)

    cx, fx = _cell_and_fraction(x_ptr, points, point_mask, 0, resolution)
    cy, fy = _cell_and_fraction(x_ptr, points, point_mask, 1, resolution)
    cz, fz = _cell_and_fraction(x_ptr, points, point_mask, 2, resolution)

    side = (resolution + 1).to(tl.uint32)
    stride_y = tl.where(dense, side, tl.full((), _PRIME_Y, tl.uint32))
    stride_z = tl.where(dense, side * side, tl.full((), _PRIME_Z, tl.uint32))
    tx0 = cx.to(tl.uint32)
    ty0 = cy.to(tl.uint32) * stride_y
    tz0 = cz.to(tl.uint32) * stride_z
    # (c + 1)·s = c·s + s, also in wrapped uint32 arithmetic.
    tx1 = tx0 + 1
    ty1 = ty0 + stride_y
    tz1 = tz0 + stride_z
    return tx0, tx1, ty0, ty1, tz0, tz1, fx, fy, fz, dense, first_row


@triton.jit
def _corner(
    k: tl.constexpr,
    tx0, tx1, ty0, ty1, tz0, tz1, fx, fy, fz, dense, first_row, hashmap_mask,
    N_FEATURES: tl.constexpr, WIDE_INDEX: tl.constexpr,
):
    """Element offsets [BLOCK, F] of corner k = bx + 2·by + 4·bz and its trilinear weight [BLOCK]."""
    if k & 1:
        tx = tx1
        wx = fx
    else:
        tx = tx0
        wx = 1.0 - fx
    if k & 2:
        ty = ty1
        wy = fy
    else:
        ty = ty0
        wy = 1.0 - fy
    if k & 4:
        tz = tz1
        wz = fz
    else:
        tz = tz0
        wz = 1.0 - fz
    # Dense rows are < (N+1)^3 <= T, so the mask leaves them unchanged.
    row = tl.where(dense, tx + ty + tz, tx ^ ty ^ tz) & hashmap_mask
    if WIDE_INDEX:
        row = row.to(tl.int64) + first_row.to(tl.int64)
    else:
        row = row.to(tl.int32) + first_row
    features = tl.arange(0, N_FEATURES)
    elements = row[:, None] * N_FEATURES + features[None, :]
    weight = wx * wy * wz
    return elements, weight


@triton.jit
def _hash_grid_forward_kernel(
    x_ptr,  # [n, 3] float32, contiguous
    table_ptr,  # [total_entries, F] float16 / float32, contiguous
    level_meta_ptr,  # [L, 3] int32
    out_ptr,  # float32, element (i, l·F + f) at i·stride_out_point + (l·F + f)·stride_out_feature
    count_ptr,  # [] integer: points from this count on are not encoded (read when HAS_COUNT)
    n_points,
    stride_out_point,
    stride_out_feature,
    hashmap_mask,  # T − 1
    N_FEATURES: tl.constexpr,
    BLOCK: tl.constexpr,
    WIDE_INDEX: tl.constexpr,
    HAS_COUNT: tl.constexpr,
):
    level = tl.program_id(1)
    points = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if WIDE_INDEX:
        points = points.to(tl.int64)
        level = level.to(tl.int64)
    n_live = n_points
    if HAS_COUNT:  # masked loads and stores past the live count: no memory traffic for them
        n_live = tl.minimum(tl.load(count_ptr).to(points.dtype), n_points)
    point_mask = points < n_live
    tx0, tx1, ty0, ty1, tz0, tz1, fx, fy, fz, dense, first_row = _level_setup(
        x_ptr, level_meta_ptr, level, points, point_mask
    )
    acc = tl.zeros((BLOCK, N_FEATURES), dtype=tl.float32)
    for k in tl.static_range(8):
        elements, weight = _corner(
            k, tx0, tx1, ty0, ty1, tz0, tz1, fx, fy, fz, dense, first_row, hashmap_mask,
            N_FEATURES, WIDE_INDEX,
        )
        values = tl.load(table_ptr + elements, mask=point_mask[:, None], other=0.0)
        acc = tl.fma(weight[:, None], values.to(tl.float32), acc)
    columns = level * N_FEATURES + tl.arange(0, N_FEATURES)
    out_offsets = points[:, None] * stride_out_point + columns[None, :] * stride_out_feature
    tl.store(out_ptr + out_offsets, acc, mask=point_mask[:, None])


@triton.jit
def _hash_grid_backward_kernel(
    x_ptr,  # [n, 3] float32, contiguous
    grad_out_ptr,  # float32, element (i, c) at i·stride_grad_point + c·stride_grad_feature
    level_meta_ptr,  # [L, 3] int32
    grad_table_ptr,  # [total_entries, F] float32, contiguous, zero-initialised
    n_points,
    stride_grad_point,
    stride_grad_feature,
    hashmap_mask,
    N_FEATURES: tl.constexpr,
    BLOCK: tl.constexpr,
    WIDE_INDEX: tl.constexpr,
):
    level = tl.program_id(1)
    points = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if WIDE_INDEX:
        points = points.to(tl.int64)
        level = level.to(tl.int64)
    point_mask = points < n_points
    tx0, tx1, ty0, ty1, tz0, tz1, fx, fy, fz, dense, first_row = _level_setup(
        x_ptr, level_meta_ptr, level, points, point_mask
    )
    columns = level * N_FEATURES + tl.arange(0, N_FEATURES)
    grad_offsets = points[:, None] * stride_grad_point + columns[None, :] * stride_grad_feature
    grad = tl.load(grad_out_ptr + grad_offsets, mask=point_mask[:, None], other=0.0).to(tl.float32)
    for k in tl.static_range(8):
        elements, weight = _corner(
            k, tx0, tx1, ty0, ty1, tz0, tz1, fx, fy, fz, dense, first_row, hashmap_mask,
            N_FEATURES, WIDE_INDEX,
        )
        tl.atomic_add(
            grad_table_ptr + elements,
            weight[:, None] * grad,
            mask=point_mask[:, None],
            sem="relaxed",
        )


# ------------------------------------------------------------------------------- host side


@functools.lru_cache(maxsize=64)
def _level_metadata_cached(cfg: HashGridConfig, device: torch.device) -> torch.Tensor:
    rows = [
        [resolution, int(dense), first_row]
        for resolution, dense, first_row in zip(
            level_resolutions(cfg), level_is_dense(cfg), level_offsets(cfg)[:-1]
        )
    ]
    return torch.tensor(rows, dtype=torch.int32, device=device)


def level_metadata(cfg: HashGridConfig, device: torch.device | str) -> torch.Tensor:
    """Per-level kernel metadata, cached per (config, device).

    Returns:
        [L, 3] int32 on ``device``: resolution N_l, dense flag (1 dense, 0 hashed), first row
        ``level_offsets(cfg)[l]`` of the level in the flat table. Do not modify it (it is shared).
    """
    return _level_metadata_cached(cfg, torch.device(device))


@functools.lru_cache(maxsize=64)
def _total_entries(cfg: HashGridConfig) -> int:
    """Rows of the flat table, ``level_offsets(cfg)[-1]`` (cached: it is on every call's path)."""
    return level_offsets(cfg)[-1]


def _needs_wide_index(n_points: int, cfg: HashGridConfig) -> bool:
    """int64 offsets when any element offset (table, x, output) could pass 2^31 − 1."""
    table_elements = _total_entries(cfg) * cfg.n_features_per_level
    point_elements = n_points * max(3, cfg.output_dim)
    return table_elements >= _INT32_LIMIT or point_elements >= _INT32_LIMIT


def _device_context(device: torch.device):
    """Triton launches on the current CUDA device; make it the tensors' device."""
    if device.type == "cuda":
        return torch.cuda.device(device)
    return _NullContext()


class _NullContext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _check_inputs(x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig) -> None:
    total_entries = _total_entries(cfg)
    assert x.ndim == 2 and x.shape[1] == 3, f"x must be [n, 3], got {tuple(x.shape)}"
    assert table.shape == (total_entries, cfg.n_features_per_level), (
        f"table must be [{total_entries}, {cfg.n_features_per_level}], got {tuple(table.shape)}"
    )
    assert table.dtype in _TABLE_DTYPES, f"triton backend: table dtype {table.dtype} not supported"
    assert x.device == table.device, f"x on {x.device}, table on {table.device}"


def hash_grid_forward_triton(
    x: torch.Tensor,
    table: torch.Tensor,
    cfg: HashGridConfig,
    *,
    out: torch.Tensor | None = None,
    feature_major_output: bool = True,
    count: torch.Tensor | None = None,
    block: int = FORWARD_BLOCK,
    num_warps: int = FORWARD_NUM_WARPS,
    wide_index: bool | None = None,
) -> torch.Tensor:
    """Forward kernel launch (no autograd): multiresolution hash encoding of ``x`` (paper eq. 2–4).

    Args:
        x: [n, 3] float (converted to contiguous float32), positions in the unit cube; values
            outside [0, 1] are clamped into it.
        table: [total_entries, F] float16 or float32, contiguous, laid out as in
            :mod:`trainer.encoding.hashgrid` (``total_entries = level_offsets(cfg)[-1]``).
        cfg: the grid layout.
        out: optional [n, L·F] float32 destination, any strides (every element is overwritten).
        feature_major_output: when ``out`` is None, allocate ``[L·F, n]`` and return its
            transpose (coalesced writes, strides ``(1, n)``); False allocates row-major [n, L·F].
        count: optional [] integer tensor on ``x``'s device: only the first ``count`` points are
            encoded (read by the kernel, never on the host); the rows after them are left as
            they were (uninitialised in a new output).
        block, num_warps: launch configuration (points per program, warps per program).
        wide_index: int64 element offsets; None picks them only when an offset could pass
            2^31 − 1 (int32 offsets are cheaper).

    Returns:
        [n, L·F] float32 features, level-major columns (``out`` when given). Features are
        interpolated in float32 from table values converted to float32.
    """
    _check_inputs(x, table, cfg)
    n_points = x.shape[0]
    width = cfg.output_dim
    if out is None:
        if feature_major_output:
            out = torch.empty(width, n_points, dtype=torch.float32, device=x.device).t()
        else:
            out = torch.empty(n_points, width, dtype=torch.float32, device=x.device)
    assert out.shape == (n_points, width) and out.dtype == torch.float32, (
        f"out must be [{n_points}, {width}] float32, got {tuple(out.shape)} {out.dtype}"
    )
    if n_points == 0:
        return out
    x = x.to(torch.float32).contiguous()
    table = table.contiguous()
    grid = (triton.cdiv(n_points, block), cfg.n_levels)
    with _device_context(x.device):
        _hash_grid_forward_kernel[grid](
            x,
            table,
            level_metadata(cfg, x.device),
            out,
            count if count is not None else out,
            n_points,
            out.stride(0),
            out.stride(1),
            cfg.hashmap_size - 1,
            N_FEATURES=cfg.n_features_per_level,
            BLOCK=block,
            WIDE_INDEX=_needs_wide_index(n_points, cfg) if wide_index is None else wide_index,
            HAS_COUNT=count is not None,
            num_warps=num_warps,
            **_COMPILE_OPTIONS,
        )
    return out


def hash_grid_backward_triton(
    x: torch.Tensor,
    grad_features: torch.Tensor,
    cfg: HashGridConfig,
    *,
    block: int = BACKWARD_BLOCK,
    num_warps: int = BACKWARD_NUM_WARPS,
    wide_index: bool | None = None,
) -> torch.Tensor:
    """Backward kernel launch: gradient of ``Σ grad_features · features`` with respect to the table.

    Each point adds ``w_k · grad_features[i, l·F + f]`` to row ``rows_k`` of level ``l`` for its 8
    corners (``w_k`` the trilinear weights), with float32 atomic adds — the transpose of the
    forward gather (tiny-cuda-nn ``kernel_grid_backward``).

    Args:
        x: [n, 3] float, the positions the forward pass encoded.
        grad_features: [n, L·F] float (any strides, e.g. an expanded tensor), d loss / d features.
        cfg: the grid layout.
        block, num_warps, wide_index: launch configuration, as in
            :func:`hash_grid_forward_triton`.

    Returns:
        [total_entries, F] float32 gradient of the table (summation order of the atomics is
        unspecified, so results may differ from run to run in the last bits).
    """
    n_points = x.shape[0]
    assert x.ndim == 2 and x.shape[1] == 3, f"x must be [n, 3], got {tuple(x.shape)}"
    assert grad_features.shape == (n_points, cfg.output_dim), (
        f"grad_features must be [{n_points}, {cfg.output_dim}], got {tuple(grad_features.shape)}"
    )
    grad_table = torch.zeros(
        _total_entries(cfg), cfg.n_features_per_level, dtype=torch.float32, device=x.device
    )
    if n_points == 0:
        return grad_table
    x = x.to(torch.float32).contiguous()
    if grad_features.dtype != torch.float32:
        grad_features = grad_features.float()
    grid = (triton.cdiv(n_points, block), cfg.n_levels)
    with _device_context(x.device):
        _hash_grid_backward_kernel[grid](
            x,
            grad_features,
            level_metadata(cfg, x.device),
            grad_table,
            n_points,
            grad_features.stride(0),
            grad_features.stride(1),
            cfg.hashmap_size - 1,
            N_FEATURES=cfg.n_features_per_level,
            BLOCK=block,
            WIDE_INDEX=_needs_wide_index(n_points, cfg) if wide_index is None else wide_index,
            num_warps=num_warps,
            **_COMPILE_OPTIONS,
        )
    return grad_table


class HashGridTritonFunction(torch.autograd.Function):
    """Autograd wrapper: ``apply(x, table, cfg)`` → [n, L·F] float32 features.

    Differentiable with respect to ``table`` only (the gradient has the table's dtype, accumulated
    in float32); ``x`` gets no gradient (see the module docstring). Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig) -> torch.Tensor:
        x = x.detach().to(torch.float32).contiguous()
        features = hash_grid_forward_triton(x, table.detach(), cfg)
        ctx.save_for_backward(x)
        ctx.cfg = cfg
        ctx.table_dtype = table.dtype
        return features

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_features: torch.Tensor):
        (x,) = ctx.saved_tensors
        grad_table = None
        if ctx.needs_input_grad[1]:
            grad_table = hash_grid_backward_triton(x, grad_features, ctx.cfg)
            grad_table = grad_table.to(ctx.table_dtype)
        return None, grad_table, None


def hash_grid_encode_triton(
    x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig
) -> torch.Tensor:
    """Multiresolution hash encoding with the fused Triton kernels (paper §3, eq. 2–4).

    Same conventions and result as :func:`trainer.encoding.hashgrid.hash_grid_encode_reference`
    (up to float32 summation order) for float16 / float32 tables.

    Args:
        x: [n, 3] float, positions in the unit cube (clamped into [0, 1]); no gradient flows to x.
        table: [total_entries, F] float16 or float32 on the same device as ``x`` (a CUDA device,
            or the CPU under ``TRITON_INTERPRET=1``).
        cfg: the grid layout.

    Returns:
        [n, L·F] float32 features, level-major columns, as a transposed (feature-major) view with
        strides ``(1, n)``. Differentiable with respect to ``table``.
    """
    _check_inputs(x, table, cfg)
    return HashGridTritonFunction.apply(x, table, cfg)


class TritonBackend(HashGridBackend):
    """Fused Triton kernels for float16 / float32 tables on CUDA (or the CPU interpreter)."""

    name = "triton"

    def is_available(self) -> bool:
        """True when CUDA is available, or the kernels were built for the interpreter."""
        return INTERPRET or torch.cuda.is_available()

    def supports(self, device: torch.device, dtype: torch.dtype) -> bool:
        """float16 / float32 tables on CUDA; on the CPU too under ``TRITON_INTERPRET=1``."""
        device_type = torch.device(device).type
        if dtype not in _TABLE_DTYPES:
            return False
        if device_type == "cuda":
            return torch.cuda.is_available()
        return INTERPRET and device_type == "cpu"

    def encode(self, x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig) -> torch.Tensor:
        """See :func:`hash_grid_encode_triton`."""
        return hash_grid_encode_triton(x, table, cfg)

    def encode_counted(self, x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig,
                       count: torch.Tensor) -> torch.Tensor:
        """The forward kernel on the first ``count`` points only (:func:`hash_grid_forward_triton`;
        later rows uninitialised), without autograd."""
        _check_inputs(x, table, cfg)
        return hash_grid_forward_triton(x.detach(), table.detach(), cfg, count=count)


register_backend(TritonBackend())
