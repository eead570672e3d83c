"""The fox photos shrunk for the ``ngptune prepare`` tests (written once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fox import small_fox_images


@pytest.fixture(scope="session")
def fox_photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of the shrunk fox photos (JPEG quality 95, fox's file names)."""
    import cv2

    folder = tmp_path_factory.mktemp("fox_photos")
    for name, image in small_fox_images():
        cv2.imwrite(str(folder / name), image, [cv2.IMWRITE_JPEG_QUALITY, 95])
    return folder
