"""What kind of capture a scene is, from its cameras and its images' alpha: an object without
background, a forward-facing capture or a 360° capture with background. The trainer picks its
scene model from it (:mod:`trainer.render.scene_model`); ``ngptune inspect`` shows it.

The rule, in order:

1. **object** — the training images carry alpha and at least :data:`TRANSPARENT_SHARE_MIN` of the
   pixels of one of the (up to :data:`ALPHA_IMAGES`, evenly spaced) images looked at are not fully
   opaque: the background was removed (NeRF-synthetic renders, masked photos), so nothing lies
   beyond the object and a ray that misses it shows the training background.
2. **forward-facing** — otherwise, when every training camera looks within
   :data:`FORWARD_FACING_MAX_DEG` of the cameras' mean view direction (LLFF: a handful of views
   of one side of a scene, typically within 10–20°). Measured: fox's views spread to 52°, lego's
   to 92°.
3. **360** — otherwise: the cameras look at the scene from many sides (an object on a table, a
   room), and what lies behind the object — floor, walls, the far background — is in the images.

Without training frames the capture counts as 360 (nothing to measure; the unbounded model
represents any scene).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from trainer.data.scene import Frame, Scene

__all__ = [
    "ALPHA_IMAGES",
    "CAPTURE_KINDS",
    "CaptureKind",
    "FORWARD_FACING_MAX_DEG",
    "TRANSPARENT_SHARE_MIN",
    "classify_capture",
    "classify_cameras",
    "classify_frames",
    "transparent_share",
    "view_spread_deg",
]

#: the kinds, in the rule's order
CAPTURE_KINDS = ("object", "forward-facing", "360")
#: a camera set whose view directions all lie within this angle of their mean is forward-facing
FORWARD_FACING_MAX_DEG = 30.0
#: share of not fully opaque pixels from which an image's alpha counts as a removed background
TRANSPARENT_SHARE_MIN = 0.01
#: training images whose alpha is looked at (evenly spaced)
ALPHA_IMAGES = 3
#: images are decoded shrunk by this factor (at most) for the alpha share
_ALPHA_DOWNSCALE = 4


@dataclasses.dataclass(frozen=True)
class CaptureKind:
    """A capture's kind and what decided it.

    Attributes:
        kind: one of :data:`CAPTURE_KINDS`.
        reason: one line naming the measurement that decided it.
        transparent_share: the largest share of not fully opaque pixels among the images looked at
            (0 for images without alpha), or None when no image was looked at.
        view_spread_deg: the largest angle between a camera's view direction and the mean view
            direction, degrees, or None without cameras.
    """

    kind: str
    reason: str
    transparent_share: float | None
    view_spread_deg: float | None

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form (``inspect``'s ``capture`` entry)."""
        return dataclasses.asdict(self)


def view_spread_deg(c2w: np.ndarray) -> float:
    """The largest angle (degrees) between a camera's view direction and the mean of the unit view
    directions.

    Args:
        c2w: [n, 3 or 4, 4] camera-to-world, OpenGL camera axes (the camera looks down −z), n >= 1.

    Returns:
        degrees in [0, 180]; 180 when the view directions cancel out (no mean direction).
    """
    directions = -np.asarray(c2w, dtype=np.float64)[:, :3, 2]
    directions /= np.linalg.norm(directions, axis=1, keepdims=True).clip(1e-12)
    mean = directions.mean(axis=0)
    length = float(np.linalg.norm(mean))
    if length < 1e-9:
        return 180.0
    cosines = np.clip(directions @ (mean / length), -1.0, 1.0)
    return float(np.degrees(np.arccos(cosines.min())))


def classify_cameras(c2w: np.ndarray, transparent: float | None) -> CaptureKind:
    """The rule of the module docstring on camera poses and the measured alpha.

    Args:
        c2w: [n, 3 or 4, 4] float camera-to-world of the training views (OpenGL axes); n may be 0.
        transparent: the largest share of not fully opaque pixels among the images looked at
            (:func:`transparent_share`), or None when none was looked at.

    Returns:
        the :class:`CaptureKind`.

    Raises:
        ValueError: ``c2w`` is not [n, 3 or 4, 4].
    """
    c2w = np.asarray(c2w, dtype=np.float64)
    if c2w.ndim != 3 or c2w.shape[1:] not in ((3, 4), (4, 4)):
        raise ValueError(f"classify_cameras: c2w must be [n, 4, 4], got {c2w.shape}")
    spread = view_spread_deg(c2w) if len(c2w) else None
    if transparent is not None and transparent >= TRANSPARENT_SHARE_MIN:
        return CaptureKind("object", f"the images carry alpha: {100 * transparent:.0f} % of an image's pixels are "
                           "not opaque", transparent, spread)
    alpha_text = "no alpha" if not transparent else f"alpha on {100 * transparent:.2g} % of the pixels only"
    if spread is None:
        return CaptureKind("360", f"{alpha_text} and no training camera to measure", transparent, spread)
    if spread <= FORWARD_FACING_MAX_DEG:
        return CaptureKind("forward-facing", f"{alpha_text}; every view within {spread:.0f}° of the mean view "
                           f"direction, at most {FORWARD_FACING_MAX_DEG:.0f}°", transparent, spread)
    return CaptureKind("360", f"{alpha_text}; views spread to {spread:.0f}° from the mean view direction, "
                       f"over {FORWARD_FACING_MAX_DEG:.0f}°", transparent, spread)


def transparent_share(frames: Sequence[Frame], n_images: int = ALPHA_IMAGES) -> float | None:
    """The largest share of not fully opaque pixels among up to ``n_images`` evenly spaced frames'
    images, decoded shrunk (an image whose header declares no alpha counts 0 and is not decoded);
    None without frames.

    Raises:
        SceneError: an image cannot be decoded (names the file).
    """
    from trainer.data.imageinfo import may_have_alpha
    from trainer.data.images import decode_image

    if not frames:
        return None
    picks = sorted({round(i * (len(frames) - 1) / max(n_images - 1, 1)) for i in range(min(n_images, len(frames)))})
    largest = 0.0
    for index in picks:
        frame = frames[index]
        if not may_have_alpha(frame.image_path):  # a header without alpha: nothing to decode
            continue
        shrink = max(1, min(_ALPHA_DOWNSCALE, frame.intrinsics.width // 16, frame.intrinsics.height // 16))
        rgba, has_alpha = decode_image(frame.image_path, downscale=shrink)
        if has_alpha:
            alpha = rgba[..., 3]
            largest = max(largest, float((alpha < np.iinfo(alpha.dtype).max).mean()))
    return largest


def classify_frames(frames: Sequence[Frame]) -> CaptureKind:
    """:func:`classify_cameras` of these frames' cameras and their images' alpha.

    Raises:
        SceneError: a looked-at image cannot be decoded.
    """
    c2w = np.stack([np.asarray(f.c2w, dtype=np.float64) for f in frames]) if frames else np.zeros((0, 4, 4))
    return classify_cameras(c2w, transparent_share(frames))


def classify_capture(scene: Scene) -> CaptureKind:
    """:func:`classify_frames` of the scene's training frames.

    Raises:
        SceneError: a looked-at image cannot be decoded.
    """
    return classify_frames(scene.frames("train"))
