"""Options every scene loader accepts (one small typed config, validated at construction)."""

from __future__ import annotations

import dataclasses

from trainer.contract.errors import SceneError
from trainer.contract.formats import FORMAT_CHOICES, format_named

CAMERA_CONVENTIONS = ("opengl", "opencv")


@dataclasses.dataclass(frozen=True)
class SceneOptions:
    """Loader options.

    Attributes:
        downscale: integer factor to shrink images by when decoding (1 = full size); intrinsics
            are scaled to match. None: the automatic rule (:func:`trainer.data.resolution.auto_downscale`
            for LLFF and COLMAP captures, full size for instant-ngp and Blender scenes).
        min_downscale: a floor on the automatic rule's factor (>= 1; the CPU preset's 2); an
            explicit ``downscale`` wins over both (:mod:`trainer.data.resolution`).
        holdout_every: for formats without splits (instant-ngp, LLFF, COLMAP), every n-th frame
            (in natural order, starting with the first) goes to the ``test`` split and the rest to
            ``train``; 0 keeps every frame in ``train`` (then ``test`` is empty).
        aabb_scale: override of the scene's ``aabb_scale`` (power of two 1..128), or None.
        format: ``"colmap"``, ``"llff"``, ``"blender"``, ``"ngp"`` (``"instant-ngp"``) to read that
            format of a folder holding several, or None to pick by the loading policy
            (:data:`trainer.contract.formats.SCENE_FORMATS` order).
        camera_convention: camera axes of ``transform_matrix`` in ``transforms*.json``:
            ``"opengl"`` (x right, y up, looking down −z; instant-ngp and NeRF) or ``"opencv"``
            (x right, y down, looking down +z).
    """

    downscale: int | None = None
    min_downscale: int = 1
    holdout_every: int = 8
    aabb_scale: int | None = None
    format: str | None = None
    camera_convention: str = "opengl"

    def __post_init__(self) -> None:
        if self.downscale is not None and (
            not isinstance(self.downscale, int) or isinstance(self.downscale, bool) or self.downscale < 1
        ):
            raise SceneError(f"downscale: expected an integer >= 1 or None (automatic), got {self.downscale!r}")
        if not isinstance(self.min_downscale, int) or isinstance(self.min_downscale, bool) or self.min_downscale < 1:
            raise SceneError(f"min_downscale: expected an integer >= 1, got {self.min_downscale!r}")
        if (
            not isinstance(self.holdout_every, int)
            or isinstance(self.holdout_every, bool)
            or self.holdout_every < 0
        ):
            raise SceneError(f"holdout_every: expected an integer >= 0, got {self.holdout_every!r}")
        if self.aabb_scale is not None:
            check_aabb_scale(self.aabb_scale, where="aabb_scale option")
        if self.format is not None and not _is_format(self.format):
            raise SceneError(f"format: expected one of {', '.join(FORMAT_CHOICES)}, got {self.format!r}")
        if self.camera_convention not in CAMERA_CONVENTIONS:
            raise SceneError(
                f"camera_convention: expected one of {', '.join(CAMERA_CONVENTIONS)}, got {self.camera_convention!r}"
            )

    @property
    def fixed_downscale(self) -> int:
        """``downscale``, with the automatic rule read as full size (instant-ngp and Blender scenes)
        raised to ``min_downscale``."""
        return self.min_downscale if self.downscale is None else self.downscale


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


def _is_format(name: str) -> bool:
    try:
        format_named(name)
    except KeyError:
        return False
    return True
