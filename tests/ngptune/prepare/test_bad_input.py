"""Bad input to ``ngptune prepare``: one error naming the file or stage, nothing under ``--out``'s
name and no temporary folder left beside it."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from ngptune.cli import main
from ngptune.errors import PrepareError
from ngptune.prepare import prepare_scene


def _noise_image(seed: int, width: int = 120, height: int = 90) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return cv2.GaussianBlur(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), (0, 0), 1.0)


def _photos(folder: Path, n: int, size: tuple[int, int] = (120, 90)) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        cv2.imwrite(str(folder / f"p{i:02d}.jpg"), _noise_image(i, *size))
    return folder


def _fails(tmp_path: Path, source: Path, match: str, **options) -> PrepareError:
    out = tmp_path / "out" / "scene"
    with pytest.raises(PrepareError, match=match) as caught:
        prepare_scene(source, out, quiet=True, **options)
    assert not out.exists()
    assert not (out.parent.exists() and any(out.parent.iterdir())), list(out.parent.iterdir())
    return caught.value


def test_a_missing_input(tmp_path: Path) -> None:
    _fails(tmp_path, tmp_path / "nowhere", "nowhere: no such file or folder")


def test_a_folder_without_photos_names_what_it_holds(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    _fails(tmp_path, tmp_path / "in", r"in: no photos .* \(the folder is empty\)")
    (tmp_path / "in" / "a.heic").write_bytes(b"x")
    (tmp_path / "in" / "notes.txt").write_text("x")
    _fails(tmp_path, tmp_path / "in", r"no photos \(.jpg, .jpeg, .png\) in the folder \(found only .heic, .txt files\)")


def test_fewer_than_three_photos(tmp_path: Path) -> None:
    _fails(tmp_path, _photos(tmp_path / "in", 2), "2 photo.*at least 3")


def test_a_photo_that_does_not_decode_is_named(tmp_path: Path) -> None:
    folder = _photos(tmp_path / "in", 4)
    data = (folder / "p02.jpg").read_bytes()
    (folder / "p02.jpg").write_bytes(data[: len(data) // 3])
    _fails(tmp_path, folder, r"p02.jpg: cannot decode the photo")


def test_mixed_sizes_name_a_file_of_each_size(tmp_path: Path) -> None:
    folder = _photos(tmp_path / "in", 3)
    cv2.imwrite(str(folder / "tall.jpg"), _noise_image(7, 90, 120))
    error = _fails(tmp_path, folder, "mixed sizes")
    assert "120x90: 3 image(s), e.g. p00.jpg" in str(error) and "90x120: 1 image(s), e.g. tall.jpg" in str(error)


@pytest.mark.parametrize("content", [b"", b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 40])
def test_a_corrupt_video_is_named(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "clip.mp4").write_bytes(content)
    _fails(tmp_path, tmp_path / "clip.mp4", r"clip.mp4: (cannot open as a video|no frame could be decoded)")


def test_a_truncated_video_that_yields_too_few_frames(tmp_path: Path) -> None:
    writer = cv2.VideoWriter(str(tmp_path / "clip.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 10.0, (96, 64))
    for i in range(2):
        writer.write(_noise_image(i, 96, 64))
    writer.release()
    _fails(tmp_path, tmp_path / "clip.mp4", r"clip.mp4: 2 frame\(s\) chosen from 2; .* at least 3")


def test_one_photo_as_input_and_frames_for_photos_are_refused(tmp_path: Path) -> None:
    folder = _photos(tmp_path / "in", 3)
    _fails(tmp_path, folder / "p00.jpg", "one photo; give a folder of photos, or a video file")
    _fails(tmp_path, folder, "--frames and --fps choose frames of a video", n_frames=10)


def test_an_existing_scene_is_kept_unless_force(tmp_path: Path) -> None:
    out = tmp_path / "scene"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(PrepareError, match="already exists; choose another --out, or add --force"):
        prepare_scene(_photos(tmp_path / "in", 3), out, quiet=True)
    assert (out / "keep.txt").read_text() == "mine"


def test_unrelated_images_fail_in_a_named_stage_and_leave_nothing(tmp_path: Path) -> None:
    """Noise images share no geometry: matching or mapping says so."""
    _fails(tmp_path, _photos(tmp_path / "in", 4, size=(200, 150)),
           r"^(matching: no pair of the 4 images|mapping: fewer than 3 of the 4 images could be registered)")


def test_a_failed_replace_keeps_the_old_scene(tmp_path: Path) -> None:
    out = tmp_path / "scene"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(PrepareError):
        prepare_scene(_photos(tmp_path / "in", 2), out, quiet=True, force=True)
    assert (out / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "scene"]


def test_the_command_prints_one_error_line_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "in").mkdir()
    assert main(["prepare", str(tmp_path / "in"), "--out", str(tmp_path / "scene"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "no photos" in err[0]
    assert not (tmp_path / "scene").exists()


def test_frames_and_fps_are_exclusive_and_positive(capsys: pytest.CaptureFixture) -> None:
    for argv in (["--frames", "3", "--fps", "2"], ["--frames", "0"], ["--fps", "-1"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["prepare", "clip.mp4", "--out", "scene", *argv])
        assert exit_info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
