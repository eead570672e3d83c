"""Options every scene loader accepts (one small typed config, validated at construction)."""

from __future__ import annotations

import dataclasses

from trainer.errors import SceneError


@dataclasses.dataclass(frozen=True)
class SceneOptions:
    """Loader options.

    Attributes:
        downscale: integer factor to shrink images by when decoding (1 = full size); intrinsics
            are scaled to match.
        holdout_every: for formats without splits (instant-ngp, LLFF, COLMAP), every n-th frame
            (in natural order, starting with the first) goes to the ``test`` split and the rest to
            ``train``; 0 keeps every frame in ``train`` (then ``test`` is empty).
        aabb_scale: override of the scene's ``aabb_scale`` (power of two 1..128), or None.
    """

    downscale: int = 1
    holdout_every: int = 8
    aabb_scale: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.downscale, int) or isinstance(self.downscale, bool) or self.downscale < 1:
            raise SceneError(f"downscale: expected an integer >= 1, got {self.downscale!r}")
        if (
            not isinstance(self.holdout_every, int)
            or isinstance(self.holdout_every, bool)
            or self.holdout_every < 0
        ):
            raise SceneError(f"holdout_every: expected an integer >= 0, got {self.holdout_every!r}")
        if self.aabb_scale is not None:
            check_aabb_scale(self.aabb_scale, where="aabb_scale option")


def check_aabb_scale(value: object, where: str) -> int:
    """Return ``value`` if it is a power of two in 1..128, else raise SceneError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise SceneError(f"{where}: aabb_scale must be a power of two in 1..128, got {value!r}")
    if value < 1 or value > 128 or (value & (value - 1)) != 0:
        raise SceneError(f"{where}: aabb_scale must be a power of two in 1..128, got {value!r}")
    return value
