"""Which resolution a scene is trained at: the size rule, and the ``images_N/`` folders of captures.

Rule (the one nerfstudio's COLMAP parser uses): with no explicit factor, an LLFF or COLMAP capture
is shrunk by the smallest power of two that brings its longest image side to at most
:data:`MAX_AUTO_SIDE_PX` pixels; instant-ngp and Blender scenes stay at full size. A folder
``images_<factor>/`` next to ``images/`` (LLFF's and nerfstudio's layout, images already shrunk by
that factor) is used as it is when it holds every image; otherwise ``images/`` is shrunk by the
factor when decoded.

Which rule wins, as a user expects it:

* an explicit factor (``--downscale``, ``data.downscale`` of a config the user gives or ``--set``)
  is used as given, even above the automatic size; the scene says so and what the automatic rule
  would have chosen;
* ``data.min_downscale`` (the CPU preset's 2: half-size images) is a floor on the automatic rule,
  never a way around it: the factor is the larger of the two, so a preset never trains a capture
  at more pixels than ``inspect`` shows.

:attr:`trainer.data.scene.Scene.size_rule` holds the one line saying which won and why; training
prints it among its first lines.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from trainer.contract.errors import SceneError
from trainer.contract.formats import shrunk_image_folders

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
        note: the size rule's line (``Scene.size_rule``, also the first of ``Scene.notes``).
    """

    folder: Path
    factor: int
    decode_downscale: int
    note: str


def factor_and_reason(full_width: int, full_height: int, requested: int | None, minimum: int,
                      automatic: bool) -> tuple[int, str]:
    """The downscale factor of a scene and why it won (see the module docstring).

    Args:
        full_width, full_height: full-resolution image size in pixels.
        requested: the explicit factor (``--downscale`` / ``data.downscale``), or None.
        minimum: ``data.min_downscale`` (>= 1).
        automatic: whether the format has the automatic ≤ :data:`MAX_AUTO_SIDE_PX` rule (LLFF,
            COLMAP); otherwise the automatic size is full size.

    Returns:
        ``(factor, reason)``, the reason a phrase such as ``"the automatic rule: longest side 4032
        px → 1008 px ≤ 1600 px; data.min_downscale 2 asks for no more"``.
    """
    longest = max(full_width, full_height)
    auto = auto_downscale(full_width, full_height) if automatic else 1
    if automatic:
        rule = f"longest side {longest} px → {longest // auto} px ≤ {MAX_AUTO_SIDE_PX} px"
        would = f"the automatic rule would pick {auto}: {rule}"
    else:
        rule = would = "the automatic rule keeps this format at full size"
    if requested is not None:
        return requested, f"data.downscale / --downscale {requested}, as given" + (
            f"; {would}" if requested != auto else "")
    if minimum > auto:
        return minimum, f"data.min_downscale {minimum}, a floor above the automatic factor; {would}"
    if not automatic:
        return 1, rule
    floor = f"; data.min_downscale {minimum} asks for no more" if minimum > 1 else ""
    return auto, f"the automatic rule: {rule}{floor}"


def size_rule_line(fmt: str, factor: int, reason: str, size: str, where: str) -> str:
    """The line :attr:`~trainer.data.scene.Scene.size_rule` holds: ``"<fmt>: trained at WxH
    (downscale F: <reason>); <where>"``."""
    return f"{fmt}: trained at {size} (downscale {factor}: {reason}); {where}"


def choose_image_source(root: Path, full_width: int, full_height: int, requested: int | None, fmt: str,
                        minimum: int = 1, names: list[str] | None = None) -> ImageSource:
    """Pick the downscale factor and image folder of an LLFF or COLMAP capture.

    Args:
        root: the scene folder (holding ``images/`` and any ``images_N/``).
        full_width, full_height: full-resolution image size in pixels (the calibration's).
        requested: ``--downscale`` (explicit factor), or None for :func:`auto_downscale`.
        fmt: format name for the note (``"llff"``, ``"colmap"``).
        minimum: ``data.min_downscale``, a floor on the automatic factor.
        names: the image file names the capture needs (COLMAP's model), or None: an
            ``images_N/`` folder lacking some of them while ``images/`` holds them all is passed
            over for ``images/`` shrunk when decoded (the note says so).

    Raises:
        SceneError: neither ``images_<factor>/`` nor ``images/`` exists (the message lists the
            ``images_N/`` folders found).
    """
    factor, why = factor_and_reason(full_width, full_height, requested, minimum, automatic=True)
    size = f"{full_width // factor}x{full_height // factor}"
    pre_shrunk = root / f"images_{factor}"
    folder = root / "images"
    passed_over = ""
    if factor > 1 and pre_shrunk.is_dir():
        lacking = [n for n in names or [] if not (pre_shrunk / n).is_file()]
        if not lacking or not folder.is_dir() or any(not (folder / n).is_file() for n in lacking):
            note = size_rule_line(fmt, factor, why, size, f"images from {pre_shrunk.name}/ as they are")
            return ImageSource(pre_shrunk, factor, 1, note)
        passed_over = (f" ({pre_shrunk.name}/ lacks {len(lacking)} of the {len(names or [])} images, "
                       f"e.g. {lacking[0]}; images/ holds them all)")
    if not folder.is_dir():
        found = [p.name for p in shrunk_image_folders(root)]
        extra = f" (found {', '.join(found)}/; pass --downscale N to use images_N/)" if found else ""
        raise SceneError(f"{folder}: image folder not found{extra}")
    shrink = f", shrunk by {factor} when decoded" if factor > 1 else " at full size"
    return ImageSource(folder, factor, factor, size_rule_line(fmt, factor, why, size, f"images from images/{shrink}"
                                                              + passed_over))
