"""The scene-format table (trainer.contract.formats): detection in the loading policy's order, and
the loader each entry names reads that format."""

from __future__ import annotations

import importlib

import pytest

from trainer.contract import SCENE_FORMATS, SceneError, format_named
from trainer.contract.formats import check_scene_found, detect_formats


def test_a_folder_with_several_formats_lists_them_most_camera_information_first(tmp_path):
    (tmp_path / "transforms.json").write_text("{}")
    (tmp_path / "transforms_train.json").write_text("{}")
    (tmp_path / "poses_bounds.npy").write_bytes(b"")
    (tmp_path / "sparse").mkdir()
    assert [f.name for f in detect_formats(tmp_path)] == ["colmap", "llff", "blender", "instant-ngp"]


def test_a_file_names_its_one_format(tmp_path):
    for name, expected in (("transforms_val.json", "blender"), ("transforms.json", "instant-ngp"),
                           ("scene.json", "instant-ngp"), ("poses_bounds.npy", "llff")):
        (tmp_path / name).write_text("{}")
        assert [f.name for f in detect_formats(tmp_path / name)] == [expected]
    (tmp_path / "image.png").write_bytes(b"")
    with pytest.raises(SceneError, match=r"image\.png: not a scene file \(expected one of poses_bounds\.npy, "):
        detect_formats(tmp_path / "image.png")


def test_nothing_found_names_what_was_looked_for(tmp_path):
    with pytest.raises(SceneError, match=r": no scene found \(looked for sparse/, poses_bounds\.npy, "
                                         r"transforms_train\.json, transforms\.json\)$"):
        detect_formats(tmp_path)
    with pytest.raises(SceneError, match=r"nowhere: scene path does not exist$"):
        detect_formats(tmp_path / "nowhere")


def test_every_entry_has_a_loader_and_a_unique_name_and_flag():
    assert len({f.name for f in SCENE_FORMATS}) == len({f.flag for f in SCENE_FORMATS}) == len(SCENE_FORMATS)
    for fmt in SCENE_FORMATS:
        assert callable(importlib.import_module(fmt.loader).load)
        assert format_named(fmt.flag) is format_named(fmt.name) is fmt
    with pytest.raises(KeyError):
        format_named("nerfstudio")


@pytest.mark.parametrize("model", ["sparse/0/cameras.bin", "sparse/cameras.txt", "cameras.bin"])
def test_a_colmap_folder_passes_the_start_check_with_a_model_where_the_loader_looks(tmp_path, model):
    (tmp_path / model).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / model).write_bytes(b"")
    (tmp_path / "images").mkdir()
    assert check_scene_found(tmp_path).name == "colmap"


def test_a_capture_without_its_image_folder_is_refused_before_the_run_starts(tmp_path):
    (tmp_path / "sparse" / "0").mkdir(parents=True)
    (tmp_path / "sparse" / "0" / "cameras.bin").write_bytes(b"")
    with pytest.raises(SceneError, match=rf"^{tmp_path}/images: image folder not found \(a colmap scene keeps its "
                                         r"images in images/, or images_N/ shrunk N times\)$"):
        check_scene_found(tmp_path)
    model = tmp_path / "sparse" / "0"  # the model folder alone: the loader looks up two levels
    with pytest.raises(SceneError, match=rf"^{model}: no images/ folder in it, {model.parent} or {tmp_path} "):
        check_scene_found(model)
    (tmp_path / "images_backup").mkdir()  # not a shrunk copy: no --downscale reads it
    with pytest.raises(SceneError, match="image folder not found"):
        check_scene_found(tmp_path)
    (tmp_path / "images_4").mkdir()  # a shrunk copy alone is enough (--downscale 4 reads it)
    assert check_scene_found(tmp_path).name == "colmap" and check_scene_found(model).name == "colmap"
    llff = tmp_path / "llff"
    llff.mkdir()
    (llff / "poses_bounds.npy").write_bytes(b"")
    with pytest.raises(SceneError, match=rf"^{llff}/images: image folder not found \(a llff scene"):
        check_scene_found(llff)


def test_a_colmap_folder_with_an_empty_sparse_is_refused_before_the_run_starts(tmp_path):
    (tmp_path / "sparse" / "0").mkdir(parents=True)
    (tmp_path / "images").mkdir()
    with pytest.raises(SceneError, match=r": no colmap model \(expected cameras\.bin or cameras\.txt in "
                                         r"sparse/<k>/, in sparse/ or in the folder\)$"):
        check_scene_found(tmp_path)
    (tmp_path / "transforms.json").write_text("{}")  # another format beside it: --format picks it
    assert check_scene_found(tmp_path, "ngp").name == "instant-ngp"


def test_a_folder_of_photos_is_pointed_at_prepare(tmp_path):
    (tmp_path / "IMG_0001.JPG").write_bytes(b"")
    with pytest.raises(SceneError, match=r"\)\; a folder of photos: `ngptune prepare .+ --out SCENE` makes a scene "
                                         r"of them$"):
        detect_formats(tmp_path)


def test_a_captures_image_folder_is_pointed_at_its_parent(tmp_path):
    (tmp_path / "transforms.json").write_text("{}")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "0001.jpg").write_bytes(b"")
    with pytest.raises(SceneError, match=rf"\)\; its parent folder {tmp_path} holds an instant-ngp scene$"):
        detect_formats(tmp_path / "images")


def test_a_video_is_pointed_at_prepare_with_its_path_quoted(tmp_path):
    (tmp_path / "my clip.MP4").write_bytes(b"")
    with pytest.raises(SceneError, match=r"\)\; a video: `ngptune prepare '.+my clip\.MP4' --out SCENE` makes a scene"):
        detect_formats(tmp_path / "my clip.MP4")
