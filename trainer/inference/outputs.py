"""Files a render writes: PNG frames, 16-bit depth PNGs with a colourised preview, a video.

Every file is written under a temporary name in its folder and renamed when complete, so a
killed render never leaves a file that looks finished: a PNG is renamed after it is encoded, a
video (``.<stem>.partial<ext>`` while frames go in) after the encoder has closed it.

Videos go through imageio with imageio-ffmpeg's bundled ffmpeg binary: H.264 (``libx264``,
``yuv420p`` for even sizes, ``yuv444p`` otherwise) where that encoder is present, else MPEG-4
part 2 with a warning. Without imageio-ffmpeg, OpenCV's ``VideoWriter`` writes it (H.264 ``avc1``
where OpenCV's build has it, else MPEG-4 ``mp4v``). Only when neither can open the file is
:class:`VideoUnavailable` raised, before the first frame, and the caller writes PNG frames instead.
Both writers put H.264 and MPEG-4 part 2 into ``.mp4``, ``.mov``, ``.mkv`` and ``.avi``
(:data:`VIDEO_EXTENSIONS`); WebM holds only VP8, VP9 or AV1, so ``.webm`` is refused up front.
Before the rename, the finished temporary file is opened with OpenCV's ``VideoCapture``: it must
report at least one frame and decode the first; otherwise it is removed and
:class:`~trainer.contract.errors.ConfigError` names ``--video``.

Depth PNGs (``<name>_depth.png``, uint16): ``value · depth_scale`` is the expected ray-termination
distance in the scene's source units (0: no surface along the ray); ``depth_scale`` is written
to ``depth.json`` beside them. ``<name>_depth_preview.png`` maps near → far through OpenCV's
TURBO colour map.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from trainer.contract.commandline import VIDEO_EXTENSIONS
from trainer.contract.errors import ConfigError
from trainer.contract.rundir import atomic_write, atomic_write_text

__all__ = [
    "VideoFile",
    "VideoUnavailable",
    "check_video_file",
    "check_video_path",
    "depth_preview",
    "parse_background",
    "prepare_output_dir",
    "side_by_side",
    "to_uint8",
    "write_depth_pngs",
    "write_png",
    "write_depth_scale",
]

# Containers whose codecs neither writer encodes: the reason, for the error line.
UNSUPPORTED_VIDEO_CONTAINERS = {".webm": "WebM holds only VP8, VP9 or AV1 video"}
_NAMED_BACKGROUNDS = {"white": (1.0, 1.0, 1.0), "black": (0.0, 0.0, 0.0)}
DEPTH_MAX_COUNT = 65535
CAPTION_BAND_MAX = 48  # rows of a compare image's caption band, at most (tall views)
CAPTION_MIN_SCALE = 0.3  # the smallest legible Hershey font scale (about 7 pixels high)


class VideoUnavailable(RuntimeError):
    """No ffmpeg binary could be found to encode a video (the message says why)."""


def parse_background(text: str) -> tuple[float, float, float]:
    """``white``, ``black`` or ``#RRGGBB`` → an RGB triple in [0, 1].

    Raises:
        ConfigError: anything else (names ``--background``).
    """
    value = text.strip().lower()
    if value in _NAMED_BACKGROUNDS:
        return _NAMED_BACKGROUNDS[value]
    if re.fullmatch(r"#[0-9a-f]{6}", value):
        return tuple(int(value[i : i + 2], 16) / 255.0 for i in (1, 3, 5))  # type: ignore[return-value]
    raise ConfigError(f"--background {text!r}: expected white, black or #RRGGBB")


def prepare_output_dir(path: Path, flag: str = "--out") -> Path:
    """Create ``path`` (and parents) for output files.

    Raises:
        ConfigError: it cannot be created or is a file (names ``flag`` and the reason).
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (OSError, FileExistsError) as exc:
        raise ConfigError(f"{flag} {path}: cannot create the folder ({getattr(exc, 'strerror', None) or exc})") from None
    if not os.access(path, os.W_OK):
        raise ConfigError(f"{flag} {path}: the folder is not writable")
    return path


def check_video_path(path: Path) -> Path:
    """Check a ``--video`` path before any rendering: a known extension, a folder that exists or
    can be made.

    Raises:
        ConfigError: an unknown or unsupported extension (lists the supported ones) or an
            unusable folder.
    """
    path = Path(path)
    reason = UNSUPPORTED_VIDEO_CONTAINERS.get(path.suffix.lower())
    if reason is not None:
        raise ConfigError(f"--video {path}: {reason}, and the video writer encodes H.264 or MPEG-4 part 2; "
                          f"use {', '.join(VIDEO_EXTENSIONS)}")
    if path.suffix.lower() not in VIDEO_EXTENSIONS:
        raise ConfigError(f"--video {path}: unknown video extension {path.suffix or '(none)'!r} "
                          f"(known: {', '.join(VIDEO_EXTENSIONS)})")
    prepare_output_dir(path.parent if str(path.parent) else Path("."), "--video")
    return path


def check_video_file(path: Path, flag_path: Path) -> int:
    """Open a finished video with OpenCV's ``VideoCapture``: it must report at least one frame
    and decode the first. Returns the frame count it reports.

    Raises:
        ConfigError: it does not (names ``--video flag_path``; the caller removes the file).
    """
    import cv2

    capture = cv2.VideoCapture(str(path))
    try:
        count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) if capture.isOpened() else 0
        decoded = capture.isOpened() and capture.read()[0]
    finally:
        capture.release()
    if count < 1 or not decoded:
        raise ConfigError(f"--video {flag_path}: the encoder left no playable video (OpenCV reads "
                          f"{max(count, 0)} frame(s), first frame {'decoded' if decoded else 'unreadable'}); "
                          "nothing was written")
    return count


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.stem}.partial{path.suffix}")


def write_png(path: Path, image: np.ndarray) -> Path:
    """Write ``image`` ([h, w, 3] RGB uint8/uint16, or [h, w] uint16) as a PNG, atomically
    (:func:`trainer.contract.rundir.atomic_write`).

    Raises:
        OSError: the encoder failed.
    """
    import cv2

    data = image[..., ::-1] if image.ndim == 3 else image  # OpenCV writes BGR
    ok, encoded = cv2.imencode(".png", np.ascontiguousarray(data))
    if not ok:
        raise OSError(f"{path}: the PNG encoder failed")
    return atomic_write(Path(path), lambda f: f.write(encoded.tobytes()))


def side_by_side(render: np.ndarray, truth: np.ndarray, psnr_db: float | None = None) -> np.ndarray:
    """The render beside its ground truth under a caption band: ``render, PSNR 31.24 dB`` over the
    left half, ``ground truth`` over the right (``--compare``'s ``<view>_compare.png``).

    Args:
        render, truth: [h, w, 3] RGB uint8 of one size.
        psnr_db: the render's PSNR against ``truth`` (dB), or None to leave it out.

    Returns:
        [h + band, 2·w, 3] uint8: black text on a white band of ``h // 12`` rows (14 to 48), a grey
        line under it. Both captions share one size, the largest at which each fits its half; on
        narrow views the captions shorten (``PSNR 31.24 dB``, ``31.24 dB``, ``31.24``; ``truth``) before
        the text would go below a legible size, and only then is cut at the half's edge (OpenCV's
        Hershey font).
    """
    import cv2

    h, w = render.shape[:2]
    band = min(max(14, h // 12), CAPTION_BAND_MAX)
    canvas = np.full((h + band, 2 * w, 3), 255, dtype=np.uint8)
    canvas[band:, :w], canvas[band:, w:] = render, truth
    canvas[band - 1] = 160  # the band's edge, seen against a white background
    font = cv2.FONT_HERSHEY_SIMPLEX
    psnr = f"{psnr_db:.2f}" if psnr_db is not None else None
    choices = [[f"render, PSNR {psnr} dB", f"PSNR {psnr} dB", f"{psnr} dB", psnr] if psnr else ["render"],
               ["ground truth", "truth"]]

    def scale_of(text: str) -> tuple[float, int]:  # the size that fits band and half, and the descent
        (width, height), baseline = cv2.getTextSize(text, font, 1.0, 1)
        return min((band - 5) / (height + baseline), (w - 6) / width), baseline

    captions = [next((t for t in texts if scale_of(t)[0] >= CAPTION_MIN_SCALE), texts[-1]) for texts in choices]
    scale = max(min(scale_of(t)[0] for t in captions), CAPTION_MIN_SCALE)
    for half, text in enumerate(captions):
        # drawn on a copy of its half of the band: the text cannot run into the images or the other half
        strip = np.ascontiguousarray(canvas[:band - 1, half * w:(half + 1) * w])
        y = band - 3 - int(round(scale_of(text)[1] * scale))
        cv2.putText(strip, text, (3, y), font, scale, (0, 0, 0), 1, cv2.LINE_AA)
        canvas[:band - 1, half * w:(half + 1) * w] = strip
    return canvas


def to_uint8(rgb: np.ndarray) -> np.ndarray:
    """[h, w, 3] float in [0, 1] → uint8 (rounded, clipped)."""
    return (np.clip(rgb, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def write_depth_pngs(folder: Path, name: str, depth: np.ndarray, depth_scale: float) -> tuple[Path, Path]:
    """``<name>_depth.png`` (uint16 counts of ``depth_scale``) and ``<name>_depth_preview.png``.

    Args:
        depth: [h, w] float distances in source units; 0 or NaN where there is no surface.
        depth_scale: source units per count (:func:`write_depth_scale`).
    """
    depth = np.nan_to_num(np.asarray(depth, dtype=np.float64), nan=0.0)
    counts = np.clip(np.round(depth / depth_scale), 0, DEPTH_MAX_COUNT).astype(np.uint16)
    raw = write_png(Path(folder) / f"{name}_depth.png", counts)
    return raw, write_png(Path(folder) / f"{name}_depth_preview.png", depth_preview(depth))


def depth_preview(depth: np.ndarray) -> np.ndarray:
    """Depth as colours: the turbo colour map from the nearest surface (red) to the farthest
    (blue) of this image, black where there is no surface.

    Args:
        depth: [h, w] float distances; 0 or NaN where there is no surface.

    Returns:
        [h, w, 3] uint8 RGB.
    """
    import cv2

    depth = np.nan_to_num(np.asarray(depth, dtype=np.float64), nan=0.0)
    hit = depth > 0
    preview = np.zeros((*depth.shape, 3), dtype=np.uint8)
    if hit.any():
        near, far = float(depth[hit].min()), float(depth[hit].max())
        scaled = np.zeros(depth.shape, dtype=np.uint8)
        scaled[hit] = np.round(255.0 * (1.0 - (depth[hit] - near) / max(far - near, 1e-12))).astype(np.uint8)
        coloured = cv2.applyColorMap(scaled, cv2.COLORMAP_TURBO)[..., ::-1]
        preview[hit] = coloured[hit]
    return preview


def write_depth_scale(folder: Path, depth_scale: float, units: str) -> Path:
    """``depth.json``: ``{"depth_scale": source units per count, "units": ..., "max_count"}``."""
    path = Path(folder) / "depth.json"
    atomic_write_text(path, json.dumps({"depth_scale": depth_scale, "units": units,
                                        "max_count": DEPTH_MAX_COUNT}, indent=2) + "\n")
    return path


def _ffmpeg_exe() -> str:
    try:
        import imageio_ffmpeg

        return imageio_ffmpeg.get_ffmpeg_exe()
    except Exception as exc:  # noqa: BLE001 - a missing package or binary: both mean no encoder
        raise VideoUnavailable(f"no ffmpeg binary ({type(exc).__name__}: {exc})") from None


def pick_codec(exe: str) -> str:
    """``libx264`` when the ffmpeg binary has it, else ``mpeg4`` (with a warning)."""
    try:
        listing = subprocess.run([exe, "-hide_banner", "-encoders"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        listing = ""
    if re.search(r"\blibx264\b", listing):
        return "libx264"
    warnings.warn(f"{exe}: no H.264 encoder (libx264); the video is MPEG-4 part 2", stacklevel=2)
    return "mpeg4"


def _opencv_codec(temp: Path, ffmpeg_problem: VideoUnavailable) -> str:
    """The FourCC OpenCV's ``VideoWriter`` can open for ``temp``: ``avc1`` (H.264), else ``mp4v``.

    Raises:
        VideoUnavailable: OpenCV is missing or opens neither (the message names both problems).
    """
    try:
        import cv2
    except ImportError as exc:
        raise VideoUnavailable(f"{ffmpeg_problem}; no OpenCV either ({exc})") from None
    for fourcc in ("avc1", "mp4v"):
        with warnings.catch_warnings():
            probe = cv2.VideoWriter(str(temp), cv2.VideoWriter_fourcc(*fourcc), 1.0, (16, 16))
        opened = probe.isOpened()
        probe.release()
        temp.unlink(missing_ok=True)
        if opened:
            if fourcc != "avc1":
                warnings.warn(f"{temp.name}: no H.264 encoder in OpenCV's build; the video is MPEG-4 part 2",
                              stacklevel=3)
            return fourcc
    raise VideoUnavailable(f"{ffmpeg_problem}; OpenCV's VideoWriter opens neither avc1 nor mp4v for {temp.suffix}")


class VideoFile:
    """A video being written: frames appended in order, renamed into place by :meth:`close`.

    Args:
        path: the final file (extension in :data:`VIDEO_EXTENSIONS`).
        fps: frames per second.

    Raises:
        VideoUnavailable: no ffmpeg binary (before anything is written).
    """

    def __init__(self, path: Path, fps: float) -> None:
        self.path = Path(path)
        self.fps = float(fps)
        self.temp = _temp_name(self.path)
        self._writer: Any = None
        self._cv_writer: Any = None
        self.n_frames = 0
        try:
            self.exe: str | None = _ffmpeg_exe()
        except VideoUnavailable as exc:
            self.exe = None
            self.codec = _opencv_codec(self.temp, exc)
        else:
            self.codec = pick_codec(self.exe)

    def append(self, rgb: np.ndarray) -> None:
        """Add one frame, [h, w, 3] uint8 RGB (every frame the same size)."""
        if self.exe is None:
            self._append_opencv(rgb)
            return
        import imageio.v2 as imageio

        if self._writer is None:
            h, w = rgb.shape[:2]
            pixel_format = "yuv420p" if (h % 2 == 0 and w % 2 == 0) or self.codec != "libx264" else "yuv444p"
            params = ["-preset", "medium", "-crf", "18"] if self.codec == "libx264" else ["-q:v", "3"]
            self._writer = imageio.get_writer(str(self.temp), format="FFMPEG", mode="I", fps=self.fps,
                                              codec=self.codec, pixelformat=pixel_format, macro_block_size=1,
                                              ffmpeg_log_level="error", output_params=params)
        self._writer.append_data(np.ascontiguousarray(rgb))
        self.n_frames += 1

    def close(self) -> Path:
        """Finish the file, check it (:func:`check_video_file`) and rename it into place;
        returns its path.

        Raises:
            ConfigError: no frames were appended, the encoder failed, or the finished file holds
                no playable video (the temporary file is removed).
        """
        if self._writer is None and self._cv_writer is None:
            raise ConfigError(f"--video {self.path}: no frames were rendered")
        try:
            if self._cv_writer is not None:
                self._cv_writer.release()
                self._cv_writer = None
            else:
                writer, self._writer = self._writer, None
                writer.close()
            check_video_file(self.temp, self.path)
        except ConfigError:
            self.abort()
            raise
        except OSError as exc:  # imageio reports a failed ffmpeg process as an OSError
            self.abort()
            raise ConfigError(f"--video {self.path}: the encoder failed ({exc}); nothing was written") from None
        except BaseException:
            self.abort()
            raise
        os.replace(self.temp, self.path)
        return self.path

    def _append_opencv(self, rgb: np.ndarray) -> None:
        import cv2

        if self._cv_writer is None:
            h, w = rgb.shape[:2]
            self._cv_writer = cv2.VideoWriter(str(self.temp), cv2.VideoWriter_fourcc(*self.codec), self.fps, (w, h))
            if not self._cv_writer.isOpened():
                self._cv_writer = None
                self.temp.unlink(missing_ok=True)
                raise VideoUnavailable(f"OpenCV could not open {self.temp.name} with codec {self.codec}")
        self._cv_writer.write(np.ascontiguousarray(rgb[..., ::-1]))

    def abort(self) -> None:
        """Drop a video that will not be finished (its temp file is removed)."""
        if self._cv_writer is not None:
            self._cv_writer.release()
            self._cv_writer = None
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # noqa: BLE001 - the file is deleted anyway
                pass
            self._writer = None
        self.temp.unlink(missing_ok=True)
