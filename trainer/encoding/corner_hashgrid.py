"""The hash encoding's PyTorch fast path on a CPU: one gather per cell corner.

:func:`hash_grid_encode_corners` computes exactly what
:func:`trainer.encoding.hashgrid.hash_grid_encode_reference` computes (same levels, rows, hash,
corner order and weights; the module docstring of :mod:`trainer.encoding.hashgrid` states them),
which stays its slow twin. The reference builds ``[n, 8, 3]`` corner coordinates and ``[n, 8, 3]``
weight factors per level; on a CPU those broadcast int64 and float tensors, not the table reads,
take most of the time. Here the two candidate rows per axis (``c_d`` and ``c_d + 1``, already
multiplied by the axis's prime or stride) and the two weight factors per axis are ``[n]`` vectors,
and each of the 8 corners is combined from them with contiguous ``[n]`` operations, gathered and
accumulated. A ``[T, 2]`` float32 table is gathered as one 8-byte element per row.

Measured on one core of the development machine (``bench/hashgrid_cpu.py``; the CPU preset's
grid, L = 8, T = 2^15, 2^16 points): docs/benchmarks.md, "Hash encoding on a CPU".
"""

from __future__ import annotations

import torch

from trainer.encoding.hashgrid import (
    HASH_PRIMES,
    HashGridConfig,
    level_is_dense,
    level_offsets,
    level_resolutions,
)

__all__ = ["corners_apply", "hash_grid_encode_corners"]

_FAST_TABLE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def corners_apply(x: torch.Tensor, table: torch.Tensor) -> bool:
    """Whether :func:`hash_grid_encode_corners` takes these inputs: CPU tensors, a float16 /
    bfloat16 / float32 table and positions that are not float64 (float64 is the reference's, for
    gradcheck)."""
    return (
        x.device.type == "cpu"
        and table.device.type == "cpu"
        and table.dtype in _FAST_TABLE_DTYPES
        and x.dtype != torch.float64
    )


def gather_rows(table: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``table[rows]``: [E, F] and [m] int64 → [m, F]; a contiguous [E, 2] float32 table is read
    as [E] 8-byte elements (one read per row). No autograd."""
    if table.dtype == torch.float32 and table.shape[1] == 2 and table.is_contiguous() \
            and table.storage_offset() % 2 == 0:
        return table.view(torch.float64).reshape(-1)[rows].view(torch.float32).reshape(rows.shape[0], 2)
    return table[rows]


class _CornerSum(torch.autograd.Function):
    """Level-major features ``Σ_k weights[l, k] · table[rows[l, k]]`` ([n, L·F]) from a [E, F]
    float32 table, [L, 8, n] corner weights and [L, 8, n] int64 rows, corner by corner.

    Backward: the table's gradient is one ``index_add_`` of ``weights · grad`` at the rows; the
    weights' gradient is ``Σ_F table[rows] · grad`` (so positions get theirs through the weights).
    """

    @staticmethod
    def forward(ctx, table: torch.Tensor, weights: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(table, weights, rows)
        features = []
        for level_rows, level_weights in zip(rows, weights):
            level_features = gather_rows(table, level_rows[0]) * level_weights[0].unsqueeze(1)
            for row, weight in zip(level_rows[1:], level_weights[1:]):
                level_features += gather_rows(table, row) * weight.unsqueeze(1)
            features.append(level_features)
        return torch.cat(features, dim=1)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:  # type: ignore[override]
        table, weights, rows = ctx.saved_tensors
        n_levels, _, n = rows.shape
        n_features = table.shape[1]
        per_level = grad.reshape(n, n_levels, n_features).permute(1, 0, 2).unsqueeze(1)  # [L, 1, n, F]
        grad_table = grad_weights = None
        if ctx.needs_input_grad[0]:
            values = (weights.unsqueeze(-1) * per_level).reshape(-1, n_features)
            grad_table = torch.zeros_like(table).index_add_(0, rows.reshape(-1), values)
        if ctx.needs_input_grad[1]:
            corner_features = gather_rows(table, rows.reshape(-1)).reshape(n_levels, 8, n, n_features)
            grad_weights = (corner_features * per_level).sum(dim=-1)
        return grad_table, grad_weights, None


def hash_grid_encode_corners(x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig) -> torch.Tensor:
    """Encode points with the multiresolution hash grid, a gather per cell corner (module docstring).

    Args:
        x: [n, 3] float16 / bfloat16 / float32 positions in the unit cube (clamped into [0, 1]).
        table: [total_entries, F] float16 / bfloat16 / float32 parameters (read in float32).
        cfg: the grid layout.

    Returns:
        [n, L·F] float32 features, level-major; equal to the reference's within float32 rounding
        (the sums run in another order).

    Differentiable once with respect to ``table`` and ``x``, as training needs (the backward is
    written by hand: a gradient of the gradient with respect to the table is not defined here; the
    reference, all autograd, has it).

    Raises:
        ValueError: float64 inputs or a table of another shape (the reference takes float64).
    """
    offsets = level_offsets(cfg)
    total_entries = offsets[-1]
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"hash_grid_encode_corners: x must be [n, 3], got {tuple(x.shape)}")
    if table.shape != (total_entries, cfg.n_features_per_level):
        raise ValueError(f"hash_grid_encode_corners: table must be [{total_entries}, "
                         f"{cfg.n_features_per_level}], got {tuple(table.shape)}")
    if torch.float64 in (x.dtype, table.dtype):
        raise ValueError("hash_grid_encode_corners: float64 inputs take hash_grid_encode_reference")
    x = x.float().clamp(0.0, 1.0)
    n = x.shape[0]
    hash_mask = cfg.hashmap_size - 1  # < 2^32, so masking the int64 XOR equals the uint32 hash's mask
    rows = torch.empty(cfg.n_levels, 8, n, dtype=torch.int64, device=x.device)  # corner k = bx + 2·by + 4·bz
    weights = []  # per level, [8, n]
    for level, (resolution, dense, offset) in enumerate(zip(level_resolutions(cfg), level_is_dense(cfg), offsets)):
        pos = x * resolution
        cell = torch.floor(pos).clamp_(0, resolution - 1)
        frac = (pos - cell).unbind(1)
        cx, cy, cz = cell.to(torch.int64).unbind(1)
        # per axis: the row's term for bit 0 and for bit 1, and the weight's factor for each
        if dense:
            side = resolution + 1
            row_x = (cx + offset, cx + (offset + 1))
            row_y = (cy * side, cy * side + side)
            row_z = (cz * side * side, cz * side * side + side * side)
        else:
            row_x = (cx, cx + 1)
            row_y = (cy * HASH_PRIMES[1], (cy + 1) * HASH_PRIMES[1])
            row_z = (cz * HASH_PRIMES[2], (cz + 1) * HASH_PRIMES[2])
        weight_x, weight_y, weight_z = ((1.0 - f, f) for f in frac)
        level_weights = []
        for bz in (0, 1):
            for by in (0, 1):
                row_yz = row_z[bz] + row_y[by] if dense else row_z[bz] ^ row_y[by]
                weight_yz = weight_z[bz] * weight_y[by]
                for bx in (0, 1):
                    out = rows[level, bx + 2 * by + 4 * bz]
                    if dense:
                        torch.add(row_yz, row_x[bx], out=out)
                    else:
                        torch.bitwise_xor(row_yz, row_x[bx], out=out)
                        out.bitwise_and_(hash_mask).add_(offset)
                    level_weights.append(weight_yz * weight_x[bx])
        weights.append(torch.stack(level_weights))
    return _CornerSum.apply(table.float(), torch.stack(weights), rows)
