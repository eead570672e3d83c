"""fox's images shrunk for ``ngptune prepare`` tests, and fox's own cameras to compare with (the
``fox_photos`` fixture is in tests/ngptune/prepare/conftest.py)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import SHARED_DATA

FOX = SHARED_DATA / "fox"
#: fox's 1080×1920 images shrunk by 4.
SMALL_WIDTH, SMALL_HEIGHT = 270, 480
#: Images of fox used: every other one of the 50 present, the first 20 (they span the capture's arc).
N_FOX_IMAGES = 20

needs_fox = pytest.mark.skipif(not (FOX / "transforms.json").is_file(), reason=f"{FOX} not present")


def fox_image_paths() -> list[Path]:
    return sorted((FOX / "images").glob("*.jpg"))[::2][:N_FOX_IMAGES]


def small_fox_images() -> list[tuple[str, np.ndarray]]:
    """``(name, [480, 270, 3] uint8 BGR)`` of the fox images used, shrunk with area averaging."""
    import cv2

    out = []
    for path in fox_image_paths():
        image = cv2.imread(str(path), cv2.IMREAD_COLOR)
        out.append((path.name, cv2.resize(image, (SMALL_WIDTH, SMALL_HEIGHT), interpolation=cv2.INTER_AREA)))
    return out


def fox_reference_c2w() -> dict[str, np.ndarray]:
    """fox's own cameras as the trainer loads them (unit-cube world, OpenGL axes), by image file name."""
    from trainer.data import load_scene

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fox's missing images
        scene = load_scene(FOX, holdout_every=0)
    return {frame.image_path.name: frame.c2w for frames in scene.splits.values() for frame in frames}


def loaded_c2w(scene_dir: Path) -> dict[str, np.ndarray]:
    """The cameras of a prepared scene as the trainer's loader reads them, by image file name."""
    from trainer.data import load_scene

    scene = load_scene(scene_dir, holdout_every=0)
    assert scene.format == "instant-ngp" and not scene.ignored_formats, (scene.format, scene.ignored_formats)
    return {frame.image_path.name: frame.c2w for frames in scene.splits.values() for frame in frames}


def write_blurred_video(images: list[tuple[str, np.ndarray]], path: Path) -> dict[str, str]:
    """An mp4v video of ``images`` (``(name, [h, w, 3] uint8 BGR)``, one size), each as three frames:
    itself and two blurred copies, the sharp one first, second, third, second, ... so that no two
    sharp frames are closer than half a segment of three. Returns the name ``prepare`` gives each
    sharp frame → the image's name. (``bench/prepare.py`` writes its video with it too.)"""
    import cv2

    height, width = images[0][1].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (width, height))
    sharp_position = [0, 1, 2, 1]
    names = {}
    for k, (name, image) in enumerate(images):
        blurred = cv2.GaussianBlur(image, (0, 0), 2.5)
        for j in range(3):
            writer.write(image if j == sharp_position[k % 4] else blurred)
        names[f"frame_{3 * k + sharp_position[k % 4]:06d}.jpg"] = name
    writer.release()
    return names
