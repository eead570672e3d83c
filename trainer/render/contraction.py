"""The scene contraction of the unbounded scene model: the scene box kept as it is, everything
beyond it squeezed into a shell of the same thickness around it.

Reference: Barron et al. 2022, *Mip-NeRF 360*, eq. 10, with the L∞ norm in place of the L2 norm
(nerfstudio's ``SceneContraction(order=inf)``), so that the kept region is the scene box (a cube)
and the contracted space is again a cube, which the occupancy grid's cells and the hash grid tile.

With ``c`` the box centre (0.5, 0.5, 0.5), ``r`` the box's half side (``aabb_scale / 2``) and
``y = (x − c) / r``:

    contract(x) = x                              where ‖y‖∞ <= 1 (inside the scene box)
    contract(x) = c + r·(2 − 1/‖y‖∞)·y/‖y‖∞       elsewhere

so every point of space maps into the cube of half side ``2r`` around ``c`` (the "contracted
cube"); a point at distance ``ρ·r`` (L∞) from the centre lands at ``(2 − 1/ρ)·r``: the shell
between the box and the contracted cube's face holds everything from the box to infinity, evenly
in disparity ``1/ρ``. The inverse, on the open contracted cube, is

    uncontract(x') = c + r·y'·ρ/‖y'‖∞,  ρ = 1/(2 − ‖y'‖∞),  y' = (x' − c)/r, where ‖y'‖∞ > 1.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

__all__ = ["SceneContraction"]

#: contracted points are kept this far (in units of r) inside the contracted cube's face by
#: :meth:`SceneContraction.uncontract`, which maps the face itself to infinity.
FACE_MARGIN = 1e-4


@dataclasses.dataclass(frozen=True)
class SceneContraction:
    """L∞ scene contraction around the scene box (module docstring).

    Attributes:
        half_side: r, the scene box's half side in world units (``aabb_scale / 2``), > 0.
        centre: the box centre (instant-ngp's unit-cube world: (0.5, 0.5, 0.5)).

    Raises:
        ValueError: ``half_side`` not > 0.
    """

    half_side: float
    centre: tuple[float, float, float] = (0.5, 0.5, 0.5)

    def __post_init__(self) -> None:
        if not self.half_side > 0:
            raise ValueError(f"SceneContraction: half_side must be > 0, got {self.half_side!r}")

    @classmethod
    def of_box(cls, aabb_scale: int) -> "SceneContraction":
        """The contraction around the scene box of this ``aabb_scale`` (side ``aabb_scale``)."""
        return cls(half_side=0.5 * aabb_scale)

    def _centre(self, points: Tensor) -> Tensor:
        """[3] ``points``' dtype and device: the centre, filled on the device (no copy from the host,
        which a CUDA graph capture refuses)."""
        return torch.stack([points.new_full((), value) for value in self.centre])

    def contract(self, points: Tensor) -> Tensor:
        """Contract world points.

        Args:
            points: [..., 3] floating, finite world units.

        Returns:
            [..., 3], the same dtype: inside the scene box unchanged (bitwise), elsewhere inside the
            contracted cube (half side 2r, ``‖contract(x) − c‖∞ < 2r``). Differentiable.
        """
        centre = self._centre(points)
        y = (points - centre) / self.half_side
        norm = y.abs().amax(dim=-1, keepdim=True)
        outside = norm > 1.0
        safe = torch.where(outside, norm, torch.ones_like(norm))
        squeezed = centre + self.half_side * y * ((2.0 - 1.0 / safe) / safe)
        return torch.where(outside, squeezed, points)

    def uncontract(self, points: Tensor) -> Tensor:
        """The world points that :meth:`contract` maps to ``points``.

        Args:
            points: [..., 3] floating, inside the contracted cube; points within
                ``FACE_MARGIN · r`` of its face (or beyond) are taken that far inside it, so every
                result is finite (at most ``r / FACE_MARGIN`` from the centre).

        Returns:
            [..., 3], the same dtype: unchanged inside the scene box.
        """
        centre = self._centre(points)
        y = (points - centre) / self.half_side
        norm = y.abs().amax(dim=-1, keepdim=True)
        outside = norm > 1.0
        clamped = norm.clamp(max=2.0 - FACE_MARGIN)
        safe = torch.where(outside, clamped, torch.ones_like(norm))
        rho = 1.0 / (2.0 - safe)
        spread = centre + self.half_side * (y / torch.where(outside, norm, torch.ones_like(norm))) * rho
        return torch.where(outside, spread, points)

    def shell_norm(self, points: Tensor) -> Tensor:
        """[...] ``‖(x − c)/r‖∞`` of world points: <= 1 inside the scene box, ρ beyond it."""
        return ((points - self._centre(points)) / self.half_side).abs().amax(dim=-1)
