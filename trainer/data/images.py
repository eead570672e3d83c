"""Image decoding into one flat pixel table, with an on-disk cache (DESIGN.md §1, "Images").

Every training image ends up in a :class:`PixelTable`: one ``[total_pixels, 4]`` RGBA array with
straight (not premultiplied) alpha, images stored one after another in row-major order, plus
per-image offsets. Images of different sizes coexist; a pixel is addressed by one flat index.

Decoding (:func:`decode_frame`):

* OpenCV ``imdecode`` with ``IMREAD_UNCHANGED`` (keeps 16-bit samples and alpha), in a thread pool
  (OpenCV releases the GIL while decoding).
* EXIF orientation is honoured: ``IMREAD_UNCHANGED`` ignores it, so it is read with Pillow
  (:func:`trainer.data.imageinfo.exif_orientation`) and applied with OpenCV flips and rotations.
* gray, gray+alpha, RGB and RGBA sources; OpenCV's BGR(A) order becomes RGBA; alpha is the maximum
  sample value where the source has none.
* 8-bit sources give ``uint8`` samples; when any source of a table is 16-bit the whole table is
  ``float16`` in [0, 1] (8-bit samples / 255, 16-bit samples / 65535).
* ``downscale`` shrinks each image to ``(width // downscale, height // downscale)`` with
  ``cv2.INTER_AREA`` after dropping the ``width % downscale`` last columns and ``height %
  downscale`` last rows (so each new pixel is the mean of a ``downscale²`` block and the
  intrinsics scale by exactly ``1 / downscale``). Images with alpha are resampled premultiplied
  (then un-premultiplied), so the arbitrary colour of fully transparent pixels (NeRF-synthetic
  stores junk there) does not bleed into the edges.
* Truncated files: OpenCV may return None or a partially decoded image. JPEGs must end with the EOI
  marker and PNGs with the IEND chunk; a file that does not is fully decoded with Pillow as the
  judge (so valid files with trailing bytes still load).

Cache (:func:`load_pixel_table` with ``cache_dir``): the key is a BLAKE2b hash of every image
file's bytes, in frame order, and the decoding options (downscale, cache format version). A
cached table is one raw ``.npy`` of the pixels plus a small JSON header, both written atomically
(temporary file + ``os.replace``; the header last, so it marks a complete entry). A cache hit
memory-maps the ``.npy`` copy-on-write, so loading costs only the hashing of the image files and
the pages are read from the page cache when first used (the mapping stays valid when the entry
is replaced, since entries are never rewritten in place). A cache entry that cannot be read is
ignored and rewritten.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import BinaryIO

import cv2
import numpy as np
import torch

from trainer.data.imageinfo import exif_orientation, image_size
from trainer.data.scene import Frame
from trainer.contract.errors import SceneError

# Bump when the decoded result for the same bytes and options changes (invalidates caches).
PIXEL_CACHE_VERSION = 1

_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_IEND = b"\x00\x00\x00\x00IEND\xaeB`\x82"

_MAX_SAMPLE = {np.dtype(np.uint8): 255.0, np.dtype(np.uint16): 65535.0}


@dataclasses.dataclass(eq=False)
class PixelTable:
    """Decoded pixels of a list of frames, in one flat table.

    Attributes:
        pixels: [total_pixels, 4] RGBA with straight alpha, image after image, each row-major
            (pixel ``(u, v)`` of image ``i`` is row ``offsets[i] + v * widths[i] + u``).
            ``uint8`` (0..255), or ``float16`` in [0, 1] when any source image is 16-bit.
            Alpha is the maximum (255 or 1.0) where a source has no alpha channel.
        offsets: [n_images + 1] int64, first row of each image; ``offsets[-1] == total_pixels``.
        widths, heights: [n_images] int64, image sizes in pixels (after downscale).
        has_alpha: True when at least one source image has an alpha channel.
        load_time_s: wall time :func:`load_pixel_table` took (seconds).
        from_cache: True when the table was read from the disk cache instead of decoded.
    """

    pixels: torch.Tensor
    offsets: torch.Tensor
    widths: torch.Tensor
    heights: torch.Tensor
    has_alpha: bool
    load_time_s: float = 0.0
    from_cache: bool = False

    @property
    def n_images(self) -> int:
        return int(self.widths.shape[0])

    @property
    def total_pixels(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def nbytes(self) -> int:
        """Bytes taken by ``pixels``."""
        return self.pixels.numel() * self.pixels.element_size()

    def image(self, index: int) -> torch.Tensor:
        """[height, width, 4] view of image ``index`` (same dtype as ``pixels``)."""
        lo, hi = int(self.offsets[index]), int(self.offsets[index + 1])
        return self.pixels[lo:hi].view(int(self.heights[index]), int(self.widths[index]), 4)


# ---------------------------------------------------------------------------------------- decode


def apply_exif_orientation(image: np.ndarray, orientation: int) -> np.ndarray:
    """Turn an image as stored into the image as displayed, for EXIF orientation 1..8.

    Args:
        image: [h, w] or [h, w, c] array of any OpenCV-supported dtype.
        orientation: EXIF tag 0x0112 value (1 = as stored, 6 = rotate 90° clockwise, ...; the
            table of the EXIF 2.3 specification, as in Pillow's ``ImageOps.exif_transpose``).

    Returns:
        The re-oriented array (``image`` itself for orientation 1); width and height swap for
        orientations 5..8.
    """
    if orientation == 2:
        return cv2.flip(image, 1)
    if orientation == 3:
        return cv2.rotate(image, cv2.ROTATE_180)
    if orientation == 4:
        return cv2.flip(image, 0)
    if orientation == 5:
        return cv2.transpose(image)
    if orientation == 6:
        return cv2.rotate(image, cv2.ROTATE_90_CLOCKWISE)
    if orientation == 7:
        return cv2.flip(cv2.transpose(image), -1)
    if orientation == 8:
        return cv2.rotate(image, cv2.ROTATE_90_COUNTERCLOCKWISE)
    return image


def _read_bytes(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise SceneError(f"{path}: image file not found") from None
    except OSError as exc:
        raise SceneError(f"{path}: cannot read image file ({exc.strerror or exc})") from None


def _looks_complete(data: bytes) -> bool:
    """False when a JPEG lacks its final EOI marker or a PNG its final IEND chunk."""
    if data.startswith(_JPEG_SOI):
        return data.rstrip(b"\x00\r\n\t ").endswith(_JPEG_EOI)
    if data.startswith(_PNG_SIGNATURE):
        return data.endswith(_PNG_IEND)
    return True


def _pillow_decodes(data: bytes) -> str | None:
    """None if Pillow fully decodes ``data``, else its error message."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, ... for bad data
        return str(exc) or type(exc).__name__
    return None


def _orientation(path: Path, data: bytes) -> int:
    # Pillow decodes a whole PNG to look for an eXIf chunk after the pixel data, so ask it only
    # when the PNG has such a chunk at all.
    if data.startswith(_PNG_SIGNATURE) and b"eXIf" not in data:
        return 1
    return exif_orientation(path)


def _to_rgba(
    image: np.ndarray, path: Path, out: np.ndarray | None = None
) -> tuple[np.ndarray, bool]:
    """OpenCV's gray / BGR / BGRA array → [h, w, 4] RGBA of the same dtype, and has-alpha.

    Written into ``out`` (a [h, w, 4] array) when its shape and dtype fit.
    """
    channels = 1 if image.ndim == 2 else image.shape[2]
    if channels == 1:
        image, code, has_alpha = image.reshape(image.shape[:2]), cv2.COLOR_GRAY2RGBA, False
    elif channels == 3:
        code, has_alpha = cv2.COLOR_BGR2RGBA, False
    elif channels == 4:
        code, has_alpha = cv2.COLOR_BGRA2RGBA, True
    else:
        raise SceneError(f"{path}: unsupported image with {channels} channels")
    if out is not None and out.dtype == image.dtype and out.shape == (*image.shape[:2], 4):
        return cv2.cvtColor(image, code, dst=out), has_alpha
    return cv2.cvtColor(image, code), has_alpha


def _downscale(image: np.ndarray, downscale: int) -> np.ndarray:
    """Box-filter shrink by an integer factor; premultiplied when there is alpha.

    The last ``w % downscale`` columns and ``h % downscale`` rows are dropped first, so small
    pixel ``(u, v)`` is exactly the mean of the ``downscale²`` source pixels it covers and the
    intrinsics scale by exactly ``1 / downscale`` (``Intrinsics.scaled``). ``image`` is [h, w] or
    [h, w, c] in OpenCV channel order (alpha, if any, is channel 3).
    """
    height, width = image.shape[:2]
    size = (width // downscale, height // downscale)
    image = image[: size[1] * downscale, : size[0] * downscale]
    if image.ndim == 2 or image.shape[2] != 4:
        return cv2.resize(image, size, interpolation=cv2.INTER_AREA)
    max_sample = _MAX_SAMPLE[image.dtype]
    premultiplied = image.astype(np.float32)
    premultiplied[..., :3] *= premultiplied[..., 3:4] * (1.0 / max_sample)
    small = cv2.resize(premultiplied, size, interpolation=cv2.INTER_AREA)
    alpha = small[..., 3:4]
    with np.errstate(divide="ignore", invalid="ignore"):
        small[..., :3] = np.where(alpha > 0, small[..., :3] * (max_sample / alpha), 0.0)
    return np.clip(np.rint(small), 0, max_sample).astype(image.dtype)


def _decode_source(path: Path, downscale: int, data: bytes | None) -> np.ndarray:
    """Decoded, oriented and shrunk image in OpenCV channel order (gray, BGR or BGRA)."""
    path = Path(path)
    if data is None:
        data = _read_bytes(path)
    decoded = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), cv2.IMREAD_UNCHANGED)
    complete = _looks_complete(data)
    if decoded is None or not complete:
        problem = _pillow_decodes(data) if data else "empty file"
        if decoded is None or problem is not None:
            kind = "not a readable image" if complete else "truncated or corrupt image"
            raise SceneError(f"{path}: {kind} ({problem or 'OpenCV cannot decode it'})")
    if decoded.dtype not in _MAX_SAMPLE:
        raise SceneError(f"{path}: unsupported sample type {decoded.dtype} (expected 8 or 16 bits)")
    decoded = apply_exif_orientation(decoded, _orientation(path, data))
    if downscale != 1:
        decoded = _downscale(decoded, downscale)
    return decoded


def decode_image(
    path: Path, downscale: int = 1, data: bytes | None = None
) -> tuple[np.ndarray, bool]:
    """Decode one image file to straight-alpha RGBA, as displayed, shrunk by ``downscale``.

    Args:
        path: the image file (named in errors; read unless ``data`` is given).
        downscale: integer shrink factor >= 1 (block mean with ``cv2.INTER_AREA``; size
            ``(w // d, h // d)``, the remainder rows and columns dropped).
        data: the file's bytes, when already read.

    Returns:
        ``(rgba, has_alpha)``: rgba is [height, width, 4] ``uint8`` or ``uint16`` (the source's bit
        depth), alpha at the maximum where the source has none; has_alpha tells whether the source
        has an alpha channel.

    Raises:
        SceneError: missing, unreadable, truncated or unsupported (not 8/16-bit) image, naming the
            file.
    """
    return _to_rgba(_decode_source(path, downscale, data), Path(path))


def decode_frame(
    frame: Frame, downscale: int = 1, data: bytes | None = None, out: np.ndarray | None = None
) -> tuple[np.ndarray, bool]:
    """:func:`decode_image` of ``frame.image_path``, checked against the frame's intrinsics.

    Args:
        frame: the frame; its image must decode to ``frame.intrinsics`` (width, height).
        downscale, data: as :func:`decode_image`.
        out: optional [height, width, 4] ``uint8`` array the RGBA result is written into when the
            image is 8-bit (then ``out`` is returned); a 16-bit result is a new ``uint16`` array.

    Raises:
        SceneError: as :func:`decode_image`, or when the decoded size differs from
            ``frame.intrinsics`` (width, height), naming the file and both sizes.
    """
    source = _decode_source(frame.image_path, downscale, data)
    height, width = source.shape[:2]
    want_w, want_h = frame.intrinsics.width, frame.intrinsics.height
    if (width, height) != (want_w, want_h):
        raise SceneError(_size_message(frame, width, height, downscale))
    return _to_rgba(source, frame.image_path, out)


def _size_message(frame: Frame, width: int, height: int, downscale: int) -> str:
    after = f" after downscale {downscale}" if downscale != 1 else ""
    return (
        f"{frame.image_path}: image is {width}x{height}{after} but frame {frame.name!r} "
        f"has intrinsics {frame.intrinsics.width}x{frame.intrinsics.height}"
    )


def rgba_as(rgba: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Samples as a pixel-table dtype: ``uint8`` stays, or ``float16`` = sample / max sample."""
    dtype = np.dtype(dtype)
    if rgba.dtype == dtype:
        return rgba
    assert dtype == np.float16, f"no conversion from {rgba.dtype} to {dtype}"
    return (rgba.astype(np.float32) * (1.0 / _MAX_SAMPLE[rgba.dtype])).astype(np.float16)


# -------------------------------------------------------------------------------------- the table


def _check_downscale(downscale: object) -> int:
    if isinstance(downscale, bool) or not isinstance(downscale, int) or downscale < 1:
        raise SceneError(f"downscale: expected an integer >= 1, got {downscale!r}")
    return downscale


def _file_digest(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=16)).digest()
    except FileNotFoundError:
        raise SceneError(f"{path}: image file not found") from None
    except OSError as exc:
        raise SceneError(f"{path}: cannot read image file ({exc.strerror or exc})") from None


def _cache_key(digests: Sequence[bytes], downscale: int) -> str:
    h = hashlib.blake2b(digest_size=20)
    h.update(json.dumps({"version": PIXEL_CACHE_VERSION, "downscale": downscale}).encode())
    for digest in digests:
        h.update(digest)
    return h.hexdigest()


def _table_from_parts(
    pixels: np.ndarray, widths: Sequence[int], heights: Sequence[int], has_alpha: bool
) -> PixelTable:
    widths_t = torch.tensor(list(widths), dtype=torch.int64)
    heights_t = torch.tensor(list(heights), dtype=torch.int64)
    offsets = torch.zeros(len(widths_t) + 1, dtype=torch.int64)
    torch.cumsum(widths_t * heights_t, 0, out=offsets[1:])
    return PixelTable(torch.from_numpy(pixels), offsets, widths_t, heights_t, has_alpha)


def _check_sizes_against_frames(table: PixelTable, frames: Sequence[Frame], downscale: int) -> None:
    for frame, width, height in zip(frames, table.widths.tolist(), table.heights.tolist()):
        if (width, height) != (frame.intrinsics.width, frame.intrinsics.height):
            raise SceneError(_size_message(frame, width, height, downscale))


def _decode_all(frames: Sequence[Frame], downscale: int, threads: int) -> PixelTable:
    """Decode every frame straight into a preallocated table (a second pass only for 16-bit)."""
    widths = [f.intrinsics.width for f in frames]
    heights = [f.intrinsics.height for f in frames]
    counts = [w * h for w, h in zip(widths, heights)]
    offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
    table8 = np.empty((int(offsets[-1]), 4), dtype=np.uint8)

    def work(index: int) -> tuple[bool, np.ndarray | None]:
        out = table8[offsets[index] : offsets[index + 1]].reshape(heights[index], widths[index], 4)
        rgba, has_alpha = decode_frame(frames[index], downscale, out=out)
        if rgba.dtype != np.uint8:
            return has_alpha, rgba.reshape(-1, 4)  # 16-bit: placed once the table dtype is known
        if not np.shares_memory(rgba, out):
            out[...] = rgba
        return has_alpha, None

    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(work, i) for i in range(len(frames))]
        try:
            results = [future.result() for future in futures]  # first failure in frame order
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    has_alpha = any(alpha for alpha, _ in results)
    deep = {i: rgba for i, (_, rgba) in enumerate(results) if rgba is not None}
    if not deep:
        pixels = table8
    else:
        pixels = np.empty(table8.shape, dtype=np.float16)
        for i in range(len(frames)):
            rows = slice(offsets[i], offsets[i + 1])
            pixels[rows] = rgba_as(deep[i] if i in deep else table8[rows], np.float16)
    return _table_from_parts(pixels, widths, heights, has_alpha)


def _read_cache(directory: Path, key: str, n_images: int) -> PixelTable | None:
    header_path = directory / f"{key}.json"
    if not header_path.is_file():
        return None
    try:
        header = json.loads(header_path.read_text())
        if header.get("version") != PIXEL_CACHE_VERSION or len(header["widths"]) != n_images:
            return None
        # Copy-on-write memory map: pages come from the page cache on first use, nothing is
        # copied now (the file is only ever replaced, never rewritten in place).
        pixels = np.load(directory / f"{key}.npy", mmap_mode="c", allow_pickle=False)
        widths, heights = header["widths"], header["heights"]
        total = sum(w * h for w, h in zip(widths, heights))
        if pixels.shape != (total, 4) or str(pixels.dtype) != header["dtype"]:
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # unreadable, half-written or foreign entry: decode again and rewrite it
    return _table_from_parts(pixels, widths, heights, bool(header["has_alpha"]))


def _atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_cache(directory: Path, key: str, table: PixelTable, downscale: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    pixels = table.pixels.numpy()
    _atomic_write(directory / f"{key}.npy", lambda f: np.save(f, pixels, allow_pickle=False))
    header = {
        "version": PIXEL_CACHE_VERSION,
        "downscale": downscale,
        "dtype": str(pixels.dtype),
        "has_alpha": table.has_alpha,
        "widths": table.widths.tolist(),
        "heights": table.heights.tolist(),
    }
    _atomic_write(directory / f"{key}.json", lambda f: f.write(json.dumps(header).encode()))


def default_cache_dir() -> Path:
    """``$NGPTUNE_CACHE_DIR`` if set, else ``~/.cache/ngptune/pixels``."""
    env = os.environ.get("NGPTUNE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "ngptune" / "pixels"


def load_pixel_table(
    frames: Sequence[Frame],
    downscale: int = 1,
    threads: int | None = None,
    cache_dir: Path | None = None,
) -> PixelTable:
    """Decode the images of ``frames`` (in order) into one :class:`PixelTable`.

    Args:
        frames: the frames; each image must decode to ``frame.intrinsics`` (width, height).
        downscale: integer shrink factor >= 1 applied to every image (``cv2.INTER_AREA``).
        threads: decoding threads (default: the CPU count).
        cache_dir: folder of the decoded-table cache (see the module docstring), or None for no
            cache; :func:`default_cache_dir` gives the usual place.

    Returns:
        The table, with ``load_time_s`` and ``from_cache`` set. A table read from the cache is a
        copy-on-write memory map of the cache file (see the module docstring).

    Raises:
        SceneError: no frames, a bad ``downscale``, or any image that is missing, unreadable,
            truncated, of an unsupported type, or whose size disagrees with its frame's
            intrinsics (the message names the file).
    """
    start = time.perf_counter()
    downscale = _check_downscale(downscale)
    frames = list(frames)
    if not frames:
        raise SceneError("load_pixel_table: no frames to load")
    threads = threads or os.cpu_count() or 1
    key = None
    if cache_dir is not None:
        cache_dir = Path(cache_dir)
        with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
            digests = list(pool.map(_file_digest, [f.image_path for f in frames]))
        key = _cache_key(digests, downscale)
        table = _read_cache(cache_dir, key, len(frames))
        if table is not None:
            _check_sizes_against_frames(table, frames, downscale)
            table.from_cache = True
            table.load_time_s = time.perf_counter() - start
            return table
    table = _decode_all(frames, downscale, threads)
    if cache_dir is not None and key is not None:
        try:
            _write_cache(cache_dir, key, table, downscale)
        except OSError as exc:
            problem = exc.strerror or exc
            raise SceneError(f"{cache_dir}: cannot write the pixel cache ({problem})") from None
    table.load_time_s = time.perf_counter() - start
    return table


def pixel_table_nbytes(
    frames: Sequence[Frame], downscale: int = 1, dtype: torch.dtype = torch.uint8
) -> int:
    """Bytes the pixel table of ``frames`` will take, from image headers only (nothing decoded).

    Args:
        frames: the frames whose images would be loaded.
        downscale: integer shrink factor >= 1.
        dtype: ``torch.uint8`` (8-bit sources) or ``torch.float16`` (any 16-bit source).

    Returns:
        ``sum((w // downscale) * (h // downscale)) * 4 * dtype size`` over the images, with
        ``(w, h)`` the displayed size (EXIF orientation applied).

    Raises:
        SceneError: a missing or unreadable image (naming the file), or a bad ``downscale``.
    """
    downscale = _check_downscale(downscale)
    assert dtype in (torch.uint8, torch.float16), f"pixel tables are uint8 or float16, not {dtype}"
    paths = [f.image_path for f in frames]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        sizes = list(pool.map(image_size, paths))
    n_pixels = sum((w // downscale) * (h // downscale) for w, h in sizes)
    return n_pixels * 4 * torch.empty((), dtype=dtype).element_size()

