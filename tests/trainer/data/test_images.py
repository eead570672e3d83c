"""Image decoding, the pixel table and its disk cache (trainer/data/images.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from tests.support.paths import SHARED_DATA
from trainer.data.images import (
    apply_exif_orientation,
    decode_image,
    load_pixel_table,
    pixel_table_nbytes,
)
from trainer.data.scene import Frame, Intrinsics
from trainer.contract.errors import SceneError

FOX = SHARED_DATA / "fox"


def frame_for(path: Path, width: int, height: int) -> Frame:
    intrinsics = Intrinsics(width, height, fx=float(width), fy=float(width), cx=width / 2, cy=height / 2)
    return Frame(path.stem, path, np.eye(4), intrinsics)


def write_rgba_png(path: Path, rgba: np.ndarray) -> Path:
    Image.fromarray(rgba, "RGBA").save(path)
    return path


def random_rgba(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    return rng.integers(0, 256, (height, width, 4), dtype=np.uint8)


# ---------------------------------------------------------------------------- decoding variants


def test_rgba_png_keeps_straight_alpha_and_junk_colour(tmp_path):
    rng = np.random.default_rng(0)
    rgba = random_rgba(rng, 6, 9)
    rgba[:3, :, 3] = 0  # transparent rows with junk colour, as NeRF-synthetic has
    rgba[:3, :, :3] = [[3, 200, 5]]
    path = write_rgba_png(tmp_path / "a.png", rgba)
    table = load_pixel_table([frame_for(path, 9, 6)])
    assert table.pixels.dtype == torch.uint8
    assert table.has_alpha
    np.testing.assert_array_equal(table.image(0).numpy(), rgba)  # RGBA order, nothing premultiplied


def test_rgb_jpeg_and_png_get_opaque_alpha_in_rgb_order(tmp_path):
    rgb = np.zeros((4, 5, 3), np.uint8)
    rgb[..., 0] = 200  # pure-ish red: catches a BGR/RGB swap
    rgb[..., 2] = 10
    Image.fromarray(rgb).save(tmp_path / "c.png")
    table = load_pixel_table([frame_for(tmp_path / "c.png", 5, 4)])
    assert not table.has_alpha
    expected = np.concatenate([rgb, np.full((4, 5, 1), 255, np.uint8)], axis=-1)
    np.testing.assert_array_equal(table.image(0).numpy(), expected)


def test_gray_and_gray_alpha_png(tmp_path):
    gray = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    alpha = np.full((3, 4), 77, np.uint8)
    Image.fromarray(gray, "L").save(tmp_path / "g.png")
    Image.fromarray(np.stack([gray, alpha], -1), "LA").save(tmp_path / "ga.png")
    table = load_pixel_table([frame_for(tmp_path / "g.png", 4, 3), frame_for(tmp_path / "ga.png", 4, 3)])
    g, ga = table.image(0).numpy(), table.image(1).numpy()
    for channel in range(3):
        np.testing.assert_array_equal(g[..., channel], gray)
        np.testing.assert_array_equal(ga[..., channel], gray)
    np.testing.assert_array_equal(g[..., 3], 255)
    np.testing.assert_array_equal(ga[..., 3], 77)
    assert table.has_alpha


def test_16bit_png_is_normalised_by_65535(tmp_path):
    rgb16 = np.array([[[0, 1000, 65535], [65535, 32768, 257]]], dtype=np.uint16)  # RGB, 1x2
    cv2.imwrite(str(tmp_path / "d.png"), rgb16[..., ::-1])  # cv2 writes BGR
    gray16 = np.array([[0, 65535], [30000, 12345]], dtype=np.uint16)
    cv2.imwrite(str(tmp_path / "g16.png"), gray16)
    rgb8 = np.array([[[255, 0, 51]]], dtype=np.uint8)
    Image.fromarray(rgb8).save(tmp_path / "e.png")
    frames = [
        frame_for(tmp_path / "d.png", 2, 1),
        frame_for(tmp_path / "g16.png", 2, 2),
        frame_for(tmp_path / "e.png", 1, 1),
    ]
    table = load_pixel_table(frames)
    assert table.pixels.dtype == torch.float16
    expected_d = np.concatenate([rgb16 / 65535.0, np.ones((1, 2, 1))], -1).astype(np.float16)
    np.testing.assert_array_equal(table.image(0).numpy(), expected_d)
    np.testing.assert_array_equal(table.image(1).numpy()[..., 0], (gray16 / 65535.0).astype(np.float16))
    np.testing.assert_array_equal(table.image(1).numpy()[..., 3], np.float16(1.0))
    # the 8-bit image of the same table: divided by 255, not 65535
    np.testing.assert_array_equal(table.image(2).numpy()[0, 0], np.float16([1.0, 0.0, 0.2, 1.0]))


def test_images_of_different_sizes_share_one_table(tmp_path):
    rng = np.random.default_rng(1)
    a, b = random_rgba(rng, 3, 5), random_rgba(rng, 7, 2)
    frames = [
        frame_for(write_rgba_png(tmp_path / "a.png", a), 5, 3),
        frame_for(write_rgba_png(tmp_path / "b.png", b), 2, 7),
    ]
    table = load_pixel_table(frames, threads=2)
    assert table.offsets.tolist() == [0, 15, 29]
    assert table.widths.tolist() == [5, 2] and table.heights.tolist() == [3, 7]
    assert table.total_pixels == 29 and table.nbytes == 29 * 4
    np.testing.assert_array_equal(table.pixels[15 + 4 * 2 + 1].numpy(), b[4, 1])  # row-major
    np.testing.assert_array_equal(table.image(0).numpy(), a)
    np.testing.assert_array_equal(table.image(1).numpy(), b)


# ------------------------------------------------------------------------------------- downscale


def test_downscale_is_an_area_average_with_floor_size(tmp_path):
    gray = np.array(
        [[0, 4, 8, 12, 99], [4, 8, 12, 16, 99], [100, 100, 200, 0, 99]], dtype=np.uint8
    )  # 5x3 → 2x1 with downscale 2 (the last row and column are dropped by INTER_AREA)
    Image.fromarray(gray, "L").save(tmp_path / "g.png")
    table = load_pixel_table([frame_for(tmp_path / "g.png", 2, 1)], downscale=2)
    assert table.widths.tolist() == [2] and table.heights.tolist() == [1]
    assert table.pixels[:, 0].tolist() == [4, 12]  # means of the two 2x2 blocks


def test_downscale_of_alpha_is_premultiplied(tmp_path):
    rgba = np.zeros((2, 2, 4), np.uint8)
    rgba[..., :3] = [0, 250, 5]  # junk colour under alpha 0
    rgba[0, 0] = [255, 0, 0, 255]  # one opaque red pixel
    path = write_rgba_png(tmp_path / "r.png", rgba)
    table = load_pixel_table([frame_for(path, 1, 1)], downscale=2)
    # alpha = 255/4 → 64; colour = premultiplied mean / alpha = pure red (no junk green)
    assert table.pixels[0].tolist() == [255, 0, 0, 64]


def test_bad_downscale_is_rejected(tmp_path):
    path = write_rgba_png(tmp_path / "a.png", np.zeros((2, 2, 4), np.uint8))
    with pytest.raises(SceneError, match="downscale: expected an integer >= 1, got 0"):
        load_pixel_table([frame_for(path, 2, 2)], downscale=0)


# ----------------------------------------------------------------------------- EXIF orientation


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientations_match_pillow(orientation):
    from PIL import ImageOps

    rng = np.random.default_rng(orientation)
    rgb = rng.integers(0, 256, (3, 5, 3), dtype=np.uint8)
    image = Image.fromarray(rgb)
    exif = image.getexif()
    exif[0x0112] = orientation
    image.info["exif"] = exif.tobytes()
    expected = np.asarray(ImageOps.exif_transpose(image))
    np.testing.assert_array_equal(apply_exif_orientation(rgb, orientation), expected)


def test_jpeg_with_exif_orientation_6_is_rotated_clockwise(tmp_path):
    stored = np.zeros((32, 48, 3), np.uint8)  # as stored: 48 wide, 32 high
    stored[:16, :16] = [255, 255, 255]  # white block in the stored top-left corner
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90° clockwise to display"
    path = tmp_path / "o6.jpg"
    Image.fromarray(stored).save(path, exif=exif.tobytes(), quality=98)
    rgba, has_alpha = decode_image(path)
    assert rgba.shape == (48, 32, 4) and not has_alpha
    # after a clockwise quarter turn the stored top-left corner is at the top-right
    assert rgba[:14, -14:, :3].min() > 240
    assert rgba[-30:, :, :3].max() < 15 and rgba[:, :14, :3].max() < 15
    table = load_pixel_table([frame_for(path, 32, 48)])
    np.testing.assert_array_equal(table.image(0).numpy(), rgba)
    assert pixel_table_nbytes([frame_for(path, 32, 48)]) == 32 * 48 * 4


# ------------------------------------------------------------------------------------- bad input


def test_truncated_png_and_jpeg_raise_scene_error_naming_the_file(tmp_path):
    rng = np.random.default_rng(2)
    rgb = cv2.GaussianBlur(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), (0, 0), 2)
    for name in ("t.png", "t.jpg"):
        path = tmp_path / name
        Image.fromarray(rgb).save(path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) * 2 // 3])
        with pytest.raises(SceneError, match=re.escape(str(path)) + ": .*(truncated|not a readable)"):
            load_pixel_table([frame_for(path, 64, 64)])


def test_jpeg_with_bytes_after_its_end_marker_still_loads(tmp_path):
    rgb = np.full((8, 8, 3), 120, np.uint8)
    clean, padded = tmp_path / "clean.jpg", tmp_path / "padded.jpg"
    Image.fromarray(rgb).save(clean)
    padded.write_bytes(clean.read_bytes() + b"trailing vendor data")
    table = load_pixel_table([frame_for(clean, 8, 8), frame_for(padded, 8, 8)])
    np.testing.assert_array_equal(table.image(0).numpy(), table.image(1).numpy())


def test_missing_and_non_image_files(tmp_path):
    missing = re.escape(str(tmp_path / "nope.png")) + ": image file not found"
    with pytest.raises(SceneError, match=missing):
        load_pixel_table([frame_for(tmp_path / "nope.png", 2, 2)])
    text = tmp_path / "text.png"
    text.write_text("not an image")
    with pytest.raises(SceneError, match=re.escape(str(text)) + ": not a readable image"):
        load_pixel_table([frame_for(text, 2, 2)])


def test_size_disagreeing_with_intrinsics_names_file_and_both_sizes(tmp_path):
    path = write_rgba_png(tmp_path / "a.png", np.zeros((6, 10, 4), np.uint8))
    message = f"{path}: image is 10x6 but frame 'a' has intrinsics 10x7"
    with pytest.raises(SceneError, match=re.escape(message)):
        load_pixel_table([frame_for(path, 10, 7)])
    message = "image is 5x3 after downscale 2 but frame 'a' has intrinsics 10x6"
    with pytest.raises(SceneError, match=message):
        load_pixel_table([frame_for(path, 10, 6)], downscale=2)


def test_pixel_table_nbytes_from_headers(tmp_path):
    rng = np.random.default_rng(3)
    frames = [
        frame_for(write_rgba_png(tmp_path / "a.png", random_rgba(rng, 6, 9)), 4, 3),
        frame_for(write_rgba_png(tmp_path / "b.png", random_rgba(rng, 5, 4)), 2, 2),
    ]
    assert pixel_table_nbytes(frames, downscale=2) == (4 * 3 + 2 * 2) * 4
    assert pixel_table_nbytes(frames, downscale=2) == load_pixel_table(frames, downscale=2).nbytes
    assert pixel_table_nbytes(frames, 1, torch.float16) == (9 * 6 + 4 * 5) * 4 * 2


# ------------------------------------------------------------------------------------------ cache


def assert_tables_identical(a, b):
    assert a.pixels.dtype == b.pixels.dtype
    assert torch.equal(a.pixels, b.pixels)
    assert torch.equal(a.offsets, b.offsets)
    assert torch.equal(a.widths, b.widths) and torch.equal(a.heights, b.heights)
    assert a.has_alpha == b.has_alpha


def test_cache_round_trip_and_misses(tmp_path):
    rng = np.random.default_rng(4)
    images = tmp_path / "images"
    images.mkdir()
    cache = tmp_path / "cache"
    frames = [
        frame_for(write_rgba_png(images / "a.png", random_rgba(rng, 6, 8)), 8, 6),
        frame_for(write_rgba_png(images / "b.png", random_rgba(rng, 4, 4)), 4, 4),
    ]
    cv2.imwrite(str(images / "c.png"), rng.integers(0, 65536, (2, 4, 3), dtype=np.uint16))
    frames.append(frame_for(images / "c.png", 4, 2))

    decoded = load_pixel_table(frames)
    first = load_pixel_table(frames, cache_dir=cache)
    second = load_pixel_table(frames, cache_dir=cache)
    assert not decoded.from_cache and not first.from_cache and second.from_cache
    assert decoded.pixels.dtype == torch.float16
    assert_tables_identical(decoded, first)
    assert_tables_identical(decoded, second)  # bit for bit
    assert sorted(p.suffix for p in cache.iterdir()) == [".json", ".npy"]  # no temporary left

    # other options: a miss (downscaled images of the intrinsics' half size)
    half = [frame_for(f.image_path, f.intrinsics.width // 2, f.intrinsics.height // 2) for f in frames]
    assert not load_pixel_table(half, downscale=2, cache_dir=cache).from_cache
    assert load_pixel_table(half, downscale=2, cache_dir=cache).from_cache

    # one file's bytes change: a miss, and the new pixels
    changed = random_rgba(rng, 4, 4)
    write_rgba_png(images / "b.png", changed)
    again = load_pixel_table(frames, cache_dir=cache)
    assert not again.from_cache
    np.testing.assert_array_equal(
        again.image(1).numpy(), (changed / 255.0).astype(np.float16)
    )


def test_unreadable_cache_entry_is_rebuilt(tmp_path):
    rng = np.random.default_rng(5)
    frames = [frame_for(write_rgba_png(tmp_path / "a.png", random_rgba(rng, 5, 5)), 5, 5)]
    cache = tmp_path / "cache"
    reference = load_pixel_table(frames, cache_dir=cache)
    (npy,) = cache.glob("*.npy")
    npy.write_bytes(npy.read_bytes()[:50])  # truncated behind our back
    rebuilt = load_pixel_table(frames, cache_dir=cache)
    assert not rebuilt.from_cache
    assert_tables_identical(reference, rebuilt)
    assert load_pixel_table(frames, cache_dir=cache).from_cache


def test_cached_table_is_checked_against_the_frames(tmp_path):
    frames = [frame_for(write_rgba_png(tmp_path / "a.png", np.zeros((4, 6, 4), np.uint8)), 6, 4)]
    load_pixel_table(frames, cache_dir=tmp_path / "cache")
    wrong = [frame_for(tmp_path / "a.png", 6, 5)]
    with pytest.raises(SceneError, match="image is 6x4 but frame 'a' has intrinsics 6x5"):
        load_pixel_table(wrong, cache_dir=tmp_path / "cache")


def natural_key(path: Path) -> list[object]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


@pytest.mark.skipif(not FOX.exists(), reason=f"{FOX} not present")
def test_fox_second_load_from_cache_is_at_least_5x_faster(tmp_path):
    paths = sorted((FOX / "images").glob("*.jpg"), key=natural_key)
    assert len(paths) == 50
    frames = [frame_for(p, 1080, 1920) for p in paths]

    def load_and_touch():
        start = time.perf_counter()
        table = load_pixel_table(frames, cache_dir=tmp_path)
        table.pixels[::1024].sum()  # touch every 4 KiB page: a lazily mapped table pays here
        return table, time.perf_counter() - start

    first, first_s = load_and_touch()
    second, second_s = load_and_touch()
    assert not first.from_cache and second.from_cache
    assert first.total_pixels == 50 * 1080 * 1920 and not first.has_alpha
    assert torch.equal(first.pixels, second.pixels)
    assert first_s >= 5 * second_s, f"decode {first_s:.3f} s, cached {second_s:.3f} s"
