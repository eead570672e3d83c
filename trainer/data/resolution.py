"""Which resolution a capture is trained at: the automatic downscale and the ``images_N/`` folders.

Rule (the one nerfstudio's COLMAP parser uses): with no explicit factor, the smallest power of two
that brings the longest image side to at most :data:`MAX_AUTO_SIDE_PX` pixels. A folder
``images_<factor>/`` next to ``images/`` (LLFF's and nerfstudio's layout, images already shrunk by
that factor) is used as it is; otherwise ``images/`` is shrunk by the factor when decoded.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainer.contract.errors import SceneError

#: Longest image side (pixels) the automatic downscale aims at.
MAX_AUTO_SIDE_PX = 1600


def auto_downscale(width: int, height: int, max_side_px: int = MAX_AUTO_SIDE_PX) -> int:
    """Smallest power of two ``f`` with ``max(width, height) / f <= max_side_px``.

    Raises:
        AssertionError: for a non-positive size.
    """
    assert width > 0 and height > 0 and max_side_px > 0, (width, height, max_side_px)
    factor = 1
    while max(width, height) / factor > max_side_px:
        factor *= 2
    return factor


@dataclasses.dataclass(frozen=True)
class ImageSource:
    """Where a capture's images come from and how much they are shrunk.

    Attributes:
        folder: the image folder used (``images/`` or ``images_<factor>/``).
        factor: total shrink factor relative to the full-resolution images.
        decode_downscale: the part of ``factor`` applied when decoding (1 for ``images_N/``).
        note: one line for ``Scene.notes``.
    """

    folder: Path
    factor: int
    decode_downscale: int
    note: str


def choose_image_source(root: Path, full_width: int, full_height: int, requested: int | None, fmt: str) -> ImageSource:
    """Pick the downscale factor and image folder of an LLFF or COLMAP capture.

    Args:
        root: the scene folder (holding ``images/`` and any ``images_N/``).
        full_width, full_height: full-resolution image size in pixels (the calibration's).
        requested: ``--downscale`` (explicit factor), or None for :func:`auto_downscale`.
        fmt: format name for the note (``"llff"``, ``"colmap"``).

    Raises:
        SceneError: neither ``images_<factor>/`` nor ``images/`` exists (the message lists the
            ``images_N/`` folders found).
    """
    if requested is None:
        factor = auto_downscale(full_width, full_height)
        why = (
            f"automatic: longest side {max(full_width, full_height)} px → "
            f"{max(full_width, full_height) // factor} px ≤ {MAX_AUTO_SIDE_PX} px"
        )
    else:
        factor = requested
        why = "--downscale / data.downscale"
    size = f"{full_width // factor}x{full_height // factor}"
    pre_shrunk = root / f"images_{factor}"
    if factor > 1 and pre_shrunk.is_dir():
        return ImageSource(pre_shrunk, factor, 1,
                           f"{fmt}: downscale {factor} ({why}); images from {pre_shrunk.name}/ as they are ({size})")
    folder = root / "images"
    if not folder.is_dir():
        found = sorted(p.name for p in root.glob("images_*") if p.is_dir())
        extra = f" (found {', '.join(found)}/; pass --downscale N to use images_N/)" if found else ""
        raise SceneError(f"{folder}: image folder not found{extra}")
    shrink = f", shrunk by {factor} when decoded ({size})" if factor > 1 else f" at full size ({size})"
    return ImageSource(folder, factor, factor, f"{fmt}: downscale {factor} ({why}); images from images/{shrink}")
