"""The images of a capture: a folder of photos copied as they are displayed, or frames chosen from a
video by sharpness and spacing.

Sharpness is the variance of the Laplacian of the grey image (Pech-Pacheco et al., *Diatom
autofocusing in brightfield microscopy*, ICPR 2000; the measure instant-ngp's ``colmap2nerf.py``
writes as a frame's ``sharpness``): a blurred frame has weak second derivatives everywhere.

Video frames: the video is cut into segments of equal length (``n_frames`` segments, or one per
``1 / fps`` seconds) and the sharpest frame of each segment is kept, looking in a segment only at
frames at least half a segment after the frame kept before it. Kept frames are therefore between
half a segment and two segments apart, and a blurred frame is kept only when its whole window is
blurred.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shutil
from pathlib import Path
from typing import Callable

import numpy as np

from ngptune.errors import PrepareError

__all__ = [
    "CaptureImages",
    "IMAGES_DIR",
    "MIN_IMAGES",
    "PHOTO_SUFFIXES",
    "collect_photos",
    "select_video_frames",
    "sharpness_of",
]

#: Folder of the scene holding its images (instant-ngp's and COLMAP's layout).
IMAGES_DIR = "images"
#: Photo files taken from an input folder (case-insensitive); other files are ignored.
PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")
#: Fewest images structure from motion can make a scene of.
MIN_IMAGES = 3
#: JPEG quality of written video frames and of photos turned upright by their EXIF orientation.
JPEG_QUALITY = 95

_EXIF_MAKE, _EXIF_MODEL, _EXIF_ORIENTATION = 0x010F, 0x0110, 0x0112


@dataclasses.dataclass(frozen=True)
class CaptureImages:
    """The images written to a scene's ``images/`` folder, in capture order.

    Attributes:
        folder: the ``images/`` folder.
        names: file names inside ``folder``.
        sharpness: variance of the Laplacian of each image (:func:`sharpness_of`).
        width, height: the size every image has, pixels.
        devices: the camera each image came from (EXIF make and model; "" when unknown).
        source: ``"photos"`` or ``"video"``.
        note: one line on how the images were chosen.
    """

    folder: Path
    names: tuple[str, ...]
    sharpness: tuple[float, ...]
    width: int
    height: int
    devices: tuple[str, ...]
    source: str
    note: str

    @property
    def sharpness_by_name(self) -> dict[str, float]:
        return dict(zip(self.names, self.sharpness))


def sharpness_of(gray: np.ndarray) -> float:
    """Variance of the Laplacian of a [h, w] uint8 grey image (larger: sharper)."""
    import cv2

    return float(cv2.Laplacian(gray, cv2.CV_64F).var())


def _device_of(image: "object") -> str:
    """``"Make Model"`` from a Pillow image's EXIF, "" when it has none."""
    exif = image.getexif()  # type: ignore[attr-defined]
    parts = [str(exif.get(tag, "")).strip().strip("\x00") for tag in (_EXIF_MAKE, _EXIF_MODEL)]
    return " ".join(p for p in parts if p)


def _sizes_error(folder: Path, sizes: dict[tuple[int, int], list[str]]) -> PrepareError:
    listing = "; ".join(
        f"{w}x{h}: {len(names)} image(s), e.g. {names[0]}" for (w, h), names in sorted(sizes.items(), key=lambda kv: -len(kv[1]))
    )
    return PrepareError(
        f"{folder}: the photos have mixed sizes ({listing}); give photos of one size from one camera "
        "(portrait and landscape photos mixed, or resized copies, are the usual cause)"
    )


def collect_photos(folder: Path, out: Path, advance: Callable[[int], None] = lambda n: None) -> CaptureImages:
    """Check the photos of ``folder`` and copy them into ``out`` (created).

    Every ``.jpg``/``.jpeg``/``.png`` file of ``folder`` (not its subfolders), in natural order of
    names, is decoded in full; a photo whose EXIF orientation turns it is written upright (JPEG
    quality :data:`JPEG_QUALITY` or PNG) so that structure from motion and the trainer see the
    same pixels; the others are copied byte for byte.

    Args:
        folder: the input folder.
        out: the scene's ``images/`` folder.
        advance: called with 1 after each photo.

    Raises:
        PrepareError: no photos (naming other files found), fewer than :data:`MIN_IMAGES`, a photo
            that does not decode (naming it), or photos of several sizes (naming a file of each).
    """
    from PIL import Image, ImageOps

    paths = photo_files(folder)
    out.mkdir(parents=True, exist_ok=True)
    names, sharpness, devices = [], [], []
    sizes: dict[tuple[int, int], list[str]] = {}
    for path in paths:
        try:
            with Image.open(path) as opened:
                device = _device_of(opened)
                turned = opened.getexif().get(_EXIF_ORIENTATION, 1) not in (1, None)
                upright = ImageOps.exif_transpose(opened)
                upright.load()
        except (OSError, ValueError, SyntaxError) as exc:  # Pillow's decoders raise all three
            raise PrepareError(f"{path}: cannot decode the photo ({exc})") from None
        if not turned:
            shutil.copy2(path, out / path.name)
        else:
            options = {"quality": JPEG_QUALITY} if path.suffix.lower() in (".jpg", ".jpeg") else {}
            upright.save(out / path.name, exif=upright.getexif(), **options)
        names.append(path.name)
        sizes.setdefault(upright.size, []).append(path.name)
        sharpness.append(sharpness_of(np.asarray(upright.convert("L"))))
        devices.append(device)
        advance(1)
    if len(sizes) > 1:
        raise _sizes_error(folder, sizes)
    (width, height), = sizes
    n_devices = len(set(devices))
    note = f"{len(names)} photos from {folder}" + (f", {n_devices} devices" if n_devices > 1 else "")
    return CaptureImages(out, tuple(names), tuple(sharpness), width, height, tuple(devices), "photos", note)


def _natural_key(name: str) -> list[object]:
    """``img2`` before ``img10``: runs of digits compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def photo_files(folder: Path) -> list[Path]:
    """The photo files of ``folder`` in natural order of names.

    Raises:
        PrepareError: none, naming the kinds of files that are there, or fewer than :data:`MIN_IMAGES`.
    """
    try:
        entries = [p for p in folder.iterdir() if p.is_file()]
    except OSError as exc:
        raise PrepareError(f"{folder}: cannot list the folder ({exc.strerror})") from None
    photos = sorted((p for p in entries if p.suffix.lower() in PHOTO_SUFFIXES), key=lambda p: _natural_key(p.name))
    if not photos:
        others = sorted({p.suffix.lower() or p.name for p in entries})
        found = f"found only {', '.join(others[:8])} files" if others else "the folder is empty"
        raise PrepareError(f"{folder}: no photos (.jpg, .jpeg, .png) in the folder ({found})")
    if len(photos) < MIN_IMAGES:
        raise PrepareError(
            f"{folder}: {len(photos)} photo(s); structure from motion needs at least {MIN_IMAGES} views of the scene"
        )
    return photos


@dataclasses.dataclass(frozen=True)
class VideoInfo:
    """What OpenCV says of a video before decoding it: ``frame_count`` (0 when unknown), ``fps``
    (0 when unknown), size in pixels."""

    frame_count: int
    fps: float
    width: int
    height: int


def open_video(path: Path) -> tuple["object", VideoInfo]:
    """``(cv2.VideoCapture, VideoInfo)`` of ``path``.

    Raises:
        PrepareError: OpenCV cannot open it (not a video, corrupt, or a codec it lacks).
    """
    import cv2

    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        capture.release()
        raise PrepareError(f"{path}: cannot open as a video (corrupt, not a video, or a codec OpenCV cannot decode)")
    info = VideoInfo(
        frame_count=max(int(capture.get(cv2.CAP_PROP_FRAME_COUNT)), 0),
        fps=max(float(capture.get(cv2.CAP_PROP_FPS)), 0.0),
        width=int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
        height=int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
    )
    return capture, info


def segment_length(info: VideoInfo, n_frames: int | None, fps: float | None, path: Path) -> float:
    """Frames per segment: ``fps_video / fps`` with ``fps``, else ``frame_count / n_frames`` (at
    least 1: a video shorter than ``n_frames`` gives all its frames).

    Raises:
        PrepareError: ``fps`` for a video that states no frame rate.
    """
    if fps is not None:
        if info.fps <= 0.0:
            raise PrepareError(f"{path}: the video states no frame rate, so --fps cannot be applied; use --frames N")
        return max(info.fps / fps, 1.0)
    assert n_frames is not None and n_frames > 0
    return max(info.frame_count / n_frames, 1.0)


def count_frames(path: Path) -> int:
    """Frames of a video counted by grabbing them all (for containers that do not state the count)."""
    capture, _ = open_video(path)
    count = 0
    try:
        while capture.grab():  # type: ignore[attr-defined]
            count += 1
    finally:
        capture.release()  # type: ignore[attr-defined]
    return count


def select_video_frames(
    path: Path,
    out: Path,
    n_frames: int | None = None,
    fps: float | None = None,
    on_start: Callable[[int], None] = lambda total: None,
    advance: Callable[[int], None] = lambda n: None,
) -> CaptureImages:
    """Choose frames of the video at ``path`` (module docstring) and write them into ``out`` (created)
    as ``frame_<index>.jpg`` (index: the frame's position in the video, from 0).

    Args:
        path: the video file.
        out: the scene's ``images/`` folder.
        n_frames: frames to keep (segments of ``frame_count / n_frames`` frames); or
        fps: frames to keep per second of video (segments of ``1 / fps`` seconds).
        on_start: called once with the number of frames the video holds.
        advance: called with the number of frames decoded since the last call.

    Raises:
        PrepareError: the video cannot be opened or decoded (naming it), states no frame rate for
            ``fps``, yields fewer than :data:`MIN_IMAGES` frames, or a frame cannot be written.
    """
    import cv2

    if (n_frames is None) == (fps is None):
        raise ValueError("select_video_frames: give exactly one of n_frames and fps")
    capture, info = open_video(path)
    try:
        if info.frame_count == 0:
            capture.release()  # type: ignore[attr-defined]
            info = dataclasses.replace(info, frame_count=count_frames(path))
            capture, _ = open_video(path)
        segment = segment_length(info, n_frames, fps, path)
        on_start(info.frame_count)
        out.mkdir(parents=True, exist_ok=True)
        chosen: list[tuple[int, float]] = []
        best: tuple[float, int, np.ndarray] | None = None
        current_segment = 0
        last_kept = -math.inf
        index = 0
        frame_shape = (info.height, info.width)
        while True:
            ok, frame = capture.read()  # type: ignore[attr-defined]
            if not ok:
                break
            frame_shape = frame.shape[:2]
            seg = int(index // segment)
            if seg != current_segment and best is not None:
                last_kept = _write_frame(out, best, chosen)
                best = None
            current_segment = seg
            if index >= last_kept + segment / 2.0:
                score = sharpness_of(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY))
                if best is None or score > best[0]:
                    best = (score, index, frame.copy())
            index += 1
            if index % 16 == 0:
                advance(16)
        advance(index % 16)
        if best is not None:
            _write_frame(out, best, chosen)
    finally:
        capture.release()  # type: ignore[attr-defined]
    if index == 0:
        raise PrepareError(f"{path}: no frame could be decoded (a corrupt video, or a codec OpenCV cannot decode)")
    if len(chosen) < MIN_IMAGES:
        raise PrepareError(
            f"{path}: {len(chosen)} frame(s) chosen from {index}; structure from motion needs at least "
            f"{MIN_IMAGES} (use more --frames or a higher --fps)"
        )
    names = tuple(_frame_name(i) for i, _ in chosen)
    how = f"sharpest of each {segment:.3g}-frame segment" if segment > 1 else "every frame"
    stated = f" (the video states {info.frame_count})" if info.frame_count and index < info.frame_count else ""
    note = f"{len(chosen)} of {index} video frames{stated} from {path.name}: {how}"
    height, width = frame_shape
    return CaptureImages(out, names, tuple(s for _, s in chosen), int(width), int(height),
                         tuple("" for _ in names), "video", note)


def _frame_name(index: int) -> str:
    return f"frame_{index:06d}.jpg"


def _write_frame(out: Path, best: tuple[float, int, np.ndarray], chosen: list[tuple[int, float]]) -> int:
    """Write the kept frame of a segment; returns its index."""
    import cv2

    score, index, frame = best
    target = out / _frame_name(index)
    if not cv2.imwrite(str(target), frame, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]):
        raise PrepareError(f"{target}: cannot write the video frame (disk full or not writable?)")
    chosen.append((index, score))
    return index
