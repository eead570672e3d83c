"""Cheap image header reads (size after EXIF orientation) without decoding pixels."""

from __future__ import annotations

from pathlib import Path

from trainer.contract.errors import SceneError

# OpenCV refuses to decode larger images (CV_IO_MAX_IMAGE_PIXELS default, 2^30).
MAX_IMAGE_PIXELS = 1 << 30

# EXIF orientations 5..8 rotate the image by ±90°, which swaps width and height.
_EXIF_ORIENTATION_TAG = 0x0112
_TRANSPOSING_ORIENTATIONS = {5, 6, 7, 8}


def _orientation_of(im: "object") -> int:
    """EXIF orientation of an opened Pillow image without decoding its pixels.

    For PNG, ``Image.getexif()`` loads the whole image to look for an ``eXIf`` chunk after the
    pixel data; the PNG spec puts ``eXIf`` before ``IDAT``, so the header's ``info`` suffices.
    """
    from PIL import Image

    if getattr(im, "format", None) == "PNG":
        raw = im.info.get("exif")  # type: ignore[attr-defined]
        if not raw:
            return 1
        exif = Image.Exif()
        exif.load(raw)
        value = exif.get(_EXIF_ORIENTATION_TAG, 1)
    else:
        value = im.getexif().get(_EXIF_ORIENTATION_TAG, 1)  # type: ignore[attr-defined]
    return int(value) if isinstance(value, int) and 1 <= value <= 8 else 1


def _open_header(path: Path):
    """``Image.open`` for a header read. Pillow's decompression-bomb guard (which refuses images
    above ~179 megapixels) protects decoders; we only read the header here, and pixels are decoded
    by OpenCV with its own limits, so the guard is lifted for this call."""
    import warnings

    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        limit = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            return Image.open(path)
        finally:
            Image.MAX_IMAGE_PIXELS = limit


def exif_orientation(path: Path) -> int:
    """EXIF orientation (1..8) of an image file, 1 when absent or unreadable."""

    try:
        with _open_header(path) as im:
            return _orientation_of(im)
    except Exception:
        return 1


def image_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` in pixels of an image as displayed (EXIF orientation applied).

    Reads the header only (Pillow opens lazily).

    Raises:
        SceneError: if the file is missing or not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with _open_header(path) as im:
            width, height = im.size
            orientation = _orientation_of(im)
    except FileNotFoundError:
        raise SceneError(f"{path}: image file not found") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise SceneError(f"{path}: not a readable image ({exc})") from None
    if orientation in _TRANSPOSING_ORIENTATIONS:
        width, height = height, width
    if width * height > MAX_IMAGE_PIXELS:
        raise SceneError(
            f"{path}: image of {width}x{height} = {width * height} pixels is larger than the "
            f"{MAX_IMAGE_PIXELS} pixels OpenCV decodes"
        )
    return int(width), int(height)


def may_have_alpha(path: Path) -> bool:
    """Whether an image's header declares transparency: an alpha channel (RGBA, LA, PA, 16-bit
    gray with alpha) or a transparent palette or colour entry. Reads the header only; True when
    the header cannot be read (the decoder then decides and names the file).
    """
    try:
        with _open_header(path) as im:
            return "A" in im.getbands() or "transparency" in im.info
    except Exception:
        return True
