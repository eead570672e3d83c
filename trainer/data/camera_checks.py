"""Camera layouts that cannot be right: warnings a loader gives before training on them.

* :func:`layout_problems`: degenerate layouts (zero translation in every pose, every camera at one
  point, every camera looking exactly the same way).
* :func:`convention_problem`: cameras that all look away from each other's common region, the sign
  of a file whose camera axes are OpenCV's (x right, y down, looking down +z) read as OpenGL's.

Both take camera-to-world matrices with OpenGL camera axes in any world and return sentences, not
errors: a slider rig legitimately has parallel optical axes, and the loader cannot know the intent.
"""

from __future__ import annotations

import warnings

import numpy as np

from trainer.data.convention import axis_pair_closest

#: Cameras closer than this fraction of the world's size are "at one point".
_SAME_POINT = 1e-6
#: Optical axes within this angle (radians) of each other are "the same way".
_SAME_DIRECTION_RAD = 1e-3
#: Camera pairs with ``|d_a × d_b|²`` below this (axes within ~1.8° of parallel) carry no vote.
_MIN_PAIR_WEIGHT = 1e-3
#: Fraction of the vote weight that must lie behind both cameras to call the layout "looking away".
_AWAY_FRACTION = 0.9
#: At most this many cameras enter the pair test (evenly spaced through the list).
_MAX_PAIR_CAMERAS = 256


def layout_problems(c2w: np.ndarray) -> list[str]:
    """Sentences naming what is degenerate in a camera layout (empty when nothing is).

    Args:
        c2w: [n, 4, 4] camera-to-world, OpenGL camera axes.
    """
    c2w = np.asarray(c2w, dtype=np.float64)
    n = c2w.shape[0]
    if n < 2:
        return []
    problems = []
    origins = c2w[:, :3, 3]
    if np.all(origins == 0.0):
        problems.append(f"every one of the {n} poses has zero translation (all cameras at the origin)")
    else:
        spread = float(np.max(np.linalg.norm(origins - origins.mean(axis=0), axis=1)))
        if spread <= _SAME_POINT * max(1.0, float(np.max(np.abs(origins)))):
            where = ", ".join(f"{v:.4g}" for v in origins.mean(axis=0))
            problems.append(f"all {n} cameras are at one point ({where}): no parallax between views")
    backs = c2w[:, :3, 2] / np.linalg.norm(c2w[:, :3, 2], axis=1, keepdims=True)
    cosines = np.clip(backs @ backs[0], -1.0, 1.0)
    if float(np.max(np.arccos(cosines))) <= _SAME_DIRECTION_RAD:
        direction = ", ".join(f"{-v:.3g}" for v in backs[0])
        problems.append(f"all {n} cameras look exactly the same way (direction {direction})")
    return problems


def convention_problem(c2w: np.ndarray, camera_convention: str | None = "opengl") -> str | None:
    """A sentence when the cameras all look away from their common region, else None.

    For pairs of cameras with non-parallel optical axes, the closest points of the two axes
    (:func:`trainer.data.convention.axis_pair_closest`) are in front of both cameras for a capture
    around or in front of an object. When at least :data:`_AWAY_FRACTION` of the pair weight
    (``|d_a × d_b|²``) lies behind both cameras, the camera z axes point the wrong way, as when an
    OpenCV-convention file is read as OpenGL. Layouts with (nearly) parallel axes give no verdict.

    Args:
        c2w: [n, 4, 4] camera-to-world, OpenGL camera axes.
        camera_convention: the convention the file was read with (``"opengl"``/``"opencv"``), whose
            other is suggested; None for formats with a fixed convention (LLFF, COLMAP).
    """
    c2w = np.asarray(c2w, dtype=np.float64)
    if c2w.shape[0] > _MAX_PAIR_CAMERAS:
        c2w = c2w[np.linspace(0, c2w.shape[0] - 1, _MAX_PAIR_CAMERAS).astype(int)]
    origins = c2w[:, :3, 3]
    backs = c2w[:, :3, 2] / np.linalg.norm(c2w[:, :3, 2], axis=1, keepdims=True)
    t_a, t_b, weight = axis_pair_closest(origins[:, None], backs[:, None], origins[None], backs[None])
    used = np.triu(weight > _MIN_PAIR_WEIGHT, k=1)
    total = float(np.sum(weight[used]))
    if total <= 0.0:
        return None
    # a camera looks down −back: a closest point in front of it has t < 0
    behind = used & (t_a > 0) & (t_b > 0)
    fraction = float(np.sum(weight[behind])) / total
    if fraction < _AWAY_FRACTION:
        return None
    found = (
        f"the cameras look away from each other's common region ({fraction:.0%} of the camera pairs' "
        "optical axes meet behind both cameras)"
    )
    if camera_convention is None:
        return found + ": check the poses"
    other, axes = ("opencv", "OpenCV camera axes (y down, looking down +z)") if camera_convention == "opengl" else (
        "opengl", "OpenGL camera axes (y up, looking down -z)")
    return f"{found}: the file may use {axes}; try --camera-convention {other} (data.camera_convention)"


def warn_about_layout(c2w: np.ndarray, where: str, camera_convention: str | None) -> list[str]:
    """Warn (``warnings.warn``) about :func:`layout_problems` and :func:`convention_problem`, each
    prefixed with ``where``; returns the same sentences for ``Scene.notes``."""
    problems = layout_problems(c2w)
    away = convention_problem(c2w, camera_convention)
    if away is not None:
        problems.append(away)
    lines = [f"{where}: {problem}" for problem in problems]
    for line in lines:
        warnings.warn(line, stacklevel=3)
    return [f"cameras: {problem}" for problem in problems]
