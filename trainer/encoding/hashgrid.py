"""Multiresolution hash encoding: config, level layout and the readable PyTorch reference.

Source: Müller et al., *Instant Neural Graphics Primitives with a Multiresolution Hash Encoding*,
SIGGRAPH 2022, §3 (eq. 2–4); DESIGN.md §2. This module is the slow twin that every fast backend
(Triton kernel, tiny-cuda-nn) is tested against, so it is written for the reader, not for speed.

Conventions (a fast kernel must copy them exactly):

* Levels ``l = 0 .. L-1`` have resolution ``N_l = floor(N_min · b^l)`` (:func:`level_resolutions`)
  and ``N_l + 1`` grid vertices per axis (vertex coordinates ``0 .. N_l``).
* Level ``l`` is **dense** when ``(N_l + 1)^3 <= T`` (``T = 2^log2_hashmap_size``) and owns
  ``(N_l + 1)^3`` rounded up to a multiple of 8 rows; otherwise it is **hashed** and owns ``T``
  rows (:func:`level_table_sizes`). All levels live in one flat table ``[total_entries, F]``;
  level ``l`` starts at row ``level_offsets(cfg)[l]``.
* A point ``x ∈ [0, 1]^3`` (clamped into it) is scaled to ``pos = x · N_l``; its cell corner is
  ``c0 = clamp(floor(pos), 0, N_l − 1)`` (so ``x = 1`` falls in the last cell with ``frac = 1``)
  and ``frac = pos − c0 ∈ [0, 1]``.
* The 8 corners of the cell are ``c0 + (bx, by, bz)`` with bits ``b ∈ {0, 1}``; corner number
  ``k = bx + 2·by + 4·bz``. Its trilinear weight is ``Π_d (frac_d if b_d else 1 − frac_d)``.
* Row of corner ``(cx, cy, cz)`` inside its level:

  - dense:  ``cx + cy·(N_l + 1) + cz·(N_l + 1)^2``
  - hashed: ``((cx·1) ^ (cy·2654435761 mod 2^32) ^ (cz·805459861 mod 2^32)) & (T − 1)`` —
    tiny-cuda-nn's ``coherent_prime_hash`` (``encodings/grid.h``): uint32 arithmetic, XOR of the
    coordinate-times-prime products, then ``mod T`` (a mask, T being a power of two).

* Output is level-major: columns ``l·F .. l·F + F − 1`` hold level ``l``'s F features.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from trainer.contract.config import NGP_DESIRED_RESOLUTION, is_int
from trainer.contract.errors import ConfigError

__all__ = [
    "HASH_PRIMES",
    "HashGridConfig",
    "hash_grid_encode_reference",
    "hash_corner_index",
    "dense_corner_index",
    "level_is_dense",
    "level_offsets",
    "level_resolutions",
    "level_table_sizes",
]

# tiny-cuda-nn encodings/grid.h, coherent_prime_hash: one prime per axis (x, y, z).
HASH_PRIMES = (1, 2654435761, 805459861)
_UINT32_MASK = 0xFFFFFFFF
# float64 rounding of N_min · b^l can land just below an integer (16 · 128^(15/15) → 2047.9999…);
# this tolerance makes N_{L-1} equal max_resolution when b is derived from it.
_RESOLUTION_TOLERANCE = 1e-6


@dataclasses.dataclass(frozen=True)
class HashGridConfig:
    """Hyper-parameters of the multiresolution hash grid (paper Table 1 names in brackets).

    Attributes:
        n_levels: number of levels L, 1..32.
        n_features_per_level: features per level F, one of 1, 2, 4, 8.
        log2_hashmap_size: log2 of the maximum rows per level T, 10..24.
        base_resolution: coarsest resolution N_min, >= 2.
        per_level_scale: growth factor b >= 1 between levels, or None.
        max_resolution: finest resolution N_max >= base_resolution, or None. At most one of
            ``per_level_scale`` and ``max_resolution`` may be given; with neither, N_max = 2048
            (instant-ngp's unit cube, :data:`trainer.contract.config.NGP_DESIRED_RESOLUTION`).
            ``b = exp((ln N_max − ln N_min) / (L − 1))`` (paper eq. 3); b = 1 when L = 1.

    Raises:
        ConfigError: naming ``encoding.<field>`` and the bad value.
    """

    n_levels: int = 16
    n_features_per_level: int = 2
    log2_hashmap_size: int = 19
    base_resolution: int = 16
    per_level_scale: float | None = None
    max_resolution: int | None = None

    def __post_init__(self) -> None:
        if not is_int(self.n_levels) or not 1 <= self.n_levels <= 32:
            raise ConfigError(
                f"encoding.n_levels: expected an integer in [1, 32], got {self.n_levels!r}"
            )
        if not is_int(self.n_features_per_level) or self.n_features_per_level not in (1, 2, 4, 8):
            raise ConfigError(
                "encoding.n_features_per_level: expected one of 1, 2, 4, 8, "
                f"got {self.n_features_per_level!r}"
            )
        if not is_int(self.log2_hashmap_size) or not 10 <= self.log2_hashmap_size <= 24:
            raise ConfigError(
                "encoding.log2_hashmap_size: expected an integer in [10, 24], "
                f"got {self.log2_hashmap_size!r}"
            )
        if not is_int(self.base_resolution) or self.base_resolution < 2:
            raise ConfigError(
                f"encoding.base_resolution: expected an integer >= 2, got {self.base_resolution!r}"
            )
        if self.per_level_scale is not None and self.max_resolution is not None:
            raise ConfigError(
                "encoding.per_level_scale: give per_level_scale or max_resolution, not both "
                f"(got per_level_scale={self.per_level_scale!r}, "
                f"max_resolution={self.max_resolution!r})"
            )
        if self.per_level_scale is not None:
            b = self.per_level_scale
            if (
                isinstance(b, bool)
                or not isinstance(b, (int, float))
                or not math.isfinite(b)
                or b < 1.0
            ):
                raise ConfigError(
                    f"encoding.per_level_scale: expected a finite number >= 1, got {b!r}"
                )
        if self.max_resolution is not None and (
            not is_int(self.max_resolution) or self.max_resolution < self.base_resolution
        ):
            raise ConfigError(
                "encoding.max_resolution: expected an integer >= base_resolution "
                f"({self.base_resolution}), got {self.max_resolution!r}"
            )

    @property
    def growth_factor(self) -> float:
        """The per-level scale b actually used (derived when ``per_level_scale`` is None)."""
        if self.per_level_scale is not None:
            return float(self.per_level_scale)
        if self.n_levels == 1:
            return 1.0
        max_resolution = self.max_resolution or NGP_DESIRED_RESOLUTION
        return math.exp(math.log(max_resolution / self.base_resolution) / (self.n_levels - 1))

    @property
    def hashmap_size(self) -> int:
        """T = 2^log2_hashmap_size, the most rows a level may own."""
        return 1 << self.log2_hashmap_size

    @property
    def output_dim(self) -> int:
        """L · F, the width of the encoding."""
        return self.n_levels * self.n_features_per_level


def level_resolutions(cfg: HashGridConfig) -> list[int]:
    """Grid resolution of each level, ``N_l = floor(N_min · b^l)`` (paper eq. 2), length L."""
    b = cfg.growth_factor
    return [
        int(math.floor(cfg.base_resolution * b**level + _RESOLUTION_TOLERANCE))
        for level in range(cfg.n_levels)
    ]


def level_is_dense(cfg: HashGridConfig) -> list[bool]:
    """Per level: True when its ``(N_l + 1)^3`` vertices fit in T rows (one row per vertex)."""
    return [(n + 1) ** 3 <= cfg.hashmap_size for n in level_resolutions(cfg)]


def level_table_sizes(cfg: HashGridConfig) -> list[int]:
    """Rows owned by each level: ``(N_l + 1)^3`` rounded up to a multiple of 8 where dense, else T.

    Same rule as tiny-cuda-nn ``GridEncodingTemplated`` (``params_in_level``), with our N_l.
    """
    sizes = []
    for n, dense in zip(level_resolutions(cfg), level_is_dense(cfg)):
        sizes.append(((n + 1) ** 3 + 7) // 8 * 8 if dense else cfg.hashmap_size)
    return sizes


def level_offsets(cfg: HashGridConfig) -> list[int]:
    """Prefix sums of :func:`level_table_sizes`, length L + 1; the last is the total row count."""
    offsets = [0]
    for size in level_table_sizes(cfg):
        offsets.append(offsets[-1] + size)
    return offsets


def dense_corner_index(corners: torch.Tensor, resolution: int) -> torch.Tensor:
    """Row of each vertex in a dense level: ``cx + cy·(N+1) + cz·(N+1)^2``.

    Args:
        corners: [..., 3] int64 vertex coordinates in ``0 .. resolution``.
        resolution: the level's N_l.

    Returns:
        [...] int64 rows in ``[0, (N+1)^3)``.
    """
    side = resolution + 1
    return corners[..., 0] + corners[..., 1] * side + corners[..., 2] * (side * side)


def hash_corner_index(corners: torch.Tensor, hashmap_size: int) -> torch.Tensor:
    """Row of each vertex in a hashed level (tiny-cuda-nn ``coherent_prime_hash``).

    ``((cx·1) ^ (cy·2654435761) ^ (cz·805459861)) mod 2^32 & (T − 1)``, each product wrapped to
    uint32 as in C; computed in int64 (products of coordinates < 2^31 and 32-bit primes fit).

    Args:
        corners: [..., 3] int64 non-negative vertex coordinates (< 2^31).
        hashmap_size: T, a power of two.

    Returns:
        [...] int64 rows in ``[0, T)``.
    """
    assert hashmap_size & (hashmap_size - 1) == 0, "hashmap_size must be a power of two"
    h = (corners[..., 0] * HASH_PRIMES[0]) & _UINT32_MASK
    h = h ^ ((corners[..., 1] * HASH_PRIMES[1]) & _UINT32_MASK)
    h = h ^ ((corners[..., 2] * HASH_PRIMES[2]) & _UINT32_MASK)
    return h & (hashmap_size - 1)


# Corner k = bx + 2·by + 4·bz of a cell: bits [8, 3] (x bit is the lowest).
_CORNER_BITS = torch.tensor([[(k >> d) & 1 for d in range(3)] for k in range(8)], dtype=torch.int64)


def hash_grid_encode_reference(
    x: torch.Tensor, table: torch.Tensor, cfg: HashGridConfig
) -> torch.Tensor:
    """Encode points with the multiresolution hash grid (paper §3, eq. 2–4), pure PyTorch.

    Vectorised over points; a Python loop runs over the L levels only. See the module docstring
    for the exact index, hash, corner and output conventions.

    Args:
        x: [n, 3] floating, positions in the unit cube; values outside [0, 1] are clamped into it.
        table: [total_entries, F] float16 / bfloat16 / float32 / float64 parameters, where
            ``total_entries = level_offsets(cfg)[-1]`` and ``F = cfg.n_features_per_level``.
        cfg: the grid layout.

    Returns:
        [n, L·F] features, level-major. dtype float64 when ``x`` or ``table`` is float64, else
        float32 (float16 / bfloat16 tables are read and interpolated in float32).

    Differentiable with respect to ``table`` (gradients scatter-add into the gathered rows) and
    with respect to ``x`` inside each cell (the derivative of the trilinear weights; ``floor`` has
    zero gradient, and clamped coordinates outside [0, 1] get none).
    """
    total_entries = level_offsets(cfg)[-1]
    assert x.ndim == 2 and x.shape[1] == 3, f"x must be [n, 3], got {tuple(x.shape)}"
    assert table.ndim == 2 and table.shape == (total_entries, cfg.n_features_per_level), (
        f"table must be [{total_entries}, {cfg.n_features_per_level}], got {tuple(table.shape)}"
    )
    compute_dtype = (
        torch.float64 if torch.float64 in (x.dtype, table.dtype) else torch.float32
    )
    x = x.to(compute_dtype).clamp(0.0, 1.0)
    table = table.to(compute_dtype)
    corner_bits = _CORNER_BITS.to(x.device)  # [8, 3]

    offsets = level_offsets(cfg)
    features = []
    for level, (resolution, dense) in enumerate(zip(level_resolutions(cfg), level_is_dense(cfg))):
        pos = x * resolution  # [n, 3]
        cell = torch.floor(pos).clamp(0, resolution - 1)  # [n, 3], float holding integers
        frac = pos - cell  # [n, 3] in [0, 1]
        corners = cell.to(torch.int64)[:, None, :] + corner_bits  # [n, 8, 3]

        if dense:
            rows = dense_corner_index(corners, resolution)
        else:
            rows = hash_corner_index(corners, cfg.hashmap_size)  # [n, 8]
        rows = rows + offsets[level]

        # weight of corner k: Π_d (frac_d if bit_d else 1 − frac_d)
        per_axis = torch.where(corner_bits.bool(), frac[:, None, :], 1.0 - frac[:, None, :])
        weights = per_axis.prod(dim=-1)  # [n, 8]

        corner_features = table[rows]  # [n, 8, F]
        features.append((weights[..., None] * corner_features).sum(dim=1))  # [n, F]
    return torch.cat(features, dim=1)
