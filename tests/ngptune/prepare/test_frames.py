"""Frames chosen from a video by sharpness and spacing; photos checked and copied upright."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from ngptune.prepare.frames import collect_photos, select_video_frames, sharpness_of

WIDTH, HEIGHT = 96, 64


def _texture(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
    return cv2.GaussianBlur(noise, (0, 0), 0.8)


def write_video(path: Path, sharp: list[bool], fps: float = 10.0) -> None:
    """A video whose frame i shows its own texture, sharp where ``sharp[i]``, else blurred."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (WIDTH, HEIGHT))
    assert writer.isOpened()
    for i, is_sharp in enumerate(sharp):
        frame = _texture(i)
        writer.write(frame if is_sharp else cv2.GaussianBlur(frame, (0, 0), 3.0))
    writer.release()


def _indices(names: tuple[str, ...]) -> list[int]:
    return [int(name.removeprefix("frame_").removesuffix(".jpg")) for name in names]


def test_sharpness_is_higher_for_a_sharp_image_than_its_blurred_copy() -> None:
    gray = cv2.cvtColor(_texture(0), cv2.COLOR_BGR2GRAY)
    assert sharpness_of(gray) > 10 * sharpness_of(cv2.GaussianBlur(gray, (0, 0), 3.0))


def test_the_sharpest_frame_of_each_segment_is_kept(tmp_path: Path) -> None:
    sharp_at = [1, 5, 7, 10, 13, 17]  # one sharp frame in each 3-frame segment
    write_video(tmp_path / "clip.mp4", [i in sharp_at for i in range(18)])
    totals: list[int] = []
    decoded: list[int] = []
    images = select_video_frames(tmp_path / "clip.mp4", tmp_path / "images", n_frames=6,
                                 on_start=totals.append, advance=decoded.append)
    assert _indices(images.names) == sharp_at
    assert totals == [18] and sum(decoded) == 18
    assert images.source == "video" and (images.width, images.height) == (WIDTH, HEIGHT)
    assert sorted(p.name for p in (tmp_path / "images").iterdir()) == list(images.names)
    assert "6 of 18 video frames" in images.note


def test_a_kept_frame_is_at_least_half_a_segment_after_the_previous_one(tmp_path: Path) -> None:
    """Segments of 4 frames: the sharp frame 4 right after the kept frame 3 is too close (< 2 frames)."""
    write_video(tmp_path / "clip.mp4", [i in (3, 4, 9) for i in range(12)])
    images = select_video_frames(tmp_path / "clip.mp4", tmp_path / "images", n_frames=3)
    first, second, third = _indices(images.names)
    assert first == 3 and 5 <= second <= 7 and third == 9


def test_fps_sets_the_segment_length_from_the_video_frame_rate(tmp_path: Path) -> None:
    write_video(tmp_path / "clip.mp4", [i % 5 == 2 for i in range(20)], fps=10.0)
    images = select_video_frames(tmp_path / "clip.mp4", tmp_path / "images", fps=2.0)  # 5-frame segments
    assert _indices(images.names) == [2, 7, 12, 17]


def test_a_video_shorter_than_the_frames_asked_gives_every_frame(tmp_path: Path) -> None:
    write_video(tmp_path / "clip.mp4", [True] * 5)
    images = select_video_frames(tmp_path / "clip.mp4", tmp_path / "images", n_frames=50)
    assert _indices(images.names) == [0, 1, 2, 3, 4]
    assert "every frame" in images.note


def test_photos_turned_by_exif_are_written_upright_and_others_copied(tmp_path: Path) -> None:
    source = tmp_path / "photos"
    source.mkdir()
    for i in range(3):
        Image.fromarray(_texture(i)[:, :, ::-1]).save(source / f"img{i}.jpg", quality=95)
    stored = _texture(9)[:, :, ::-1].transpose(1, 0, 2)  # 64 wide, 96 high as stored
    exif = Image.Exif()
    exif[0x0112] = 6  # displayed turned 90° clockwise: 96 wide, 64 high
    exif[0x010F], exif[0x0110] = "Maker", "Phone"
    Image.fromarray(np.ascontiguousarray(stored)).save(source / "img10.jpg", quality=95, exif=exif)
    images = collect_photos(source, tmp_path / "images")
    assert images.names == ("img0.jpg", "img1.jpg", "img2.jpg", "img10.jpg")  # natural order
    assert (images.width, images.height) == (WIDTH, HEIGHT)
    assert (tmp_path / "images" / "img0.jpg").read_bytes() == (source / "img0.jpg").read_bytes()
    with Image.open(tmp_path / "images" / "img10.jpg") as upright:
        assert upright.size == (WIDTH, HEIGHT)
        assert upright.getexif().get(0x0112, 1) == 1
    assert images.devices == ("", "", "", "Maker Phone")


@pytest.mark.parametrize("n_frames, fps", [(None, None), (3, 1.0)])
def test_select_video_frames_wants_exactly_one_of_frames_and_fps(tmp_path: Path, n_frames, fps) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        select_video_frames(tmp_path / "clip.mp4", tmp_path / "images", n_frames=n_frames, fps=fps)
