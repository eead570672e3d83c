"""`ngptune inspect` on the real scenes (the issue's done-when) and on the demo scene."""

import json
import re

import pytest

from ngptune.cli import main
from tests.support.paths import SHARED_DATA

needs_shared = pytest.mark.skipif(not SHARED_DATA.exists(), reason=f"{SHARED_DATA} not present")


def _inspect_json(capfd, *args):
    assert main(["inspect", *args, "--json"]) == 0
    return json.loads(capfd.readouterr().out)


@needs_shared
def test_fox(capfd):
    info = _inspect_json(capfd, str(SHARED_DATA / "fox"))
    assert info["format"] == "instant-ngp"
    assert info["splits"]["train"] == 50
    assert (info["width"], info["height"]) == (1080, 1920)
    assert info["aabb_scale"] == 4
    assert len(info["skipped"]) == 17
    assert all(s["reason"].startswith("image file not found") for s in info["skipped"])
    assert info["training_holdout"] == {"every": 8, "splits": {"train": 43, "test": 7}}
    # a 360° capture with background: training.scene_model auto trains the unbounded model, whose
    # field spans twice the box (its finest level doubles with it)
    assert info["capture"]["kind"] == "360" and info["capture"]["transparent_share"] == 0.0
    assert info["scene_model"] == "unbounded"
    assert info["finest_resolution"]["default"] == 8192
    assert info["hash_grid"] == {"n_features_per_level": 2, "log2_hashmap_size": 19}  # the unbounded model's
    import torch

    # described with the defaults; without CUDA, train reads the CPU preset instead: the description says so
    assert info.get("cpu_preset", "").endswith("configs/small.json") or torch.cuda.is_available(), info
    assert "cpu_preset" not in info or not torch.cuda.is_available()


@needs_shared
def test_fox_table_reports_skipped_frames_once_and_labels_intrinsics(capfd):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["inspect", str(SHARED_DATA / "fox")]) == 0
    out = capfd.readouterr().out
    assert [str(w.message) for w in caught] == []  # the table lists them; no raw warning as well
    assert "skipped frames" in out and "images/0005.jpg" in out
    assert "1375.52 / 1374.49" in out and "554.558 / 965.268" in out  # one value per key when frames agree
    assert "scene model (auto)" in out and "unbounded (training.scene_model overrides" in out
    assert "capture" in out and "360 (no alpha; views spread to 52°" in out
    joined_out = " ".join(out.split())
    assert re.search(r"a cell is one pixel wide at resolution \d+ across the box, rounded up to a power of two",
                     joined_out), out


@needs_shared
def test_the_description_fits_80_columns_and_json_stays_the_object(capfd, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["inspect", str(SHARED_DATA / "fox")]) == 0
    lines = capfd.readouterr().out.splitlines()
    assert lines[0] == f"scene {SHARED_DATA / 'fox' / 'transforms.json'}"
    assert max(len(line) for line in lines) <= 79, max(lines, key=len)  # a rich table was 154 columns
    assert "  focal fx / fy (px)            1375.52 / 1374.49" in lines  # a key, then its value
    size_rule = lines.index("  size rule                     instant-ngp: trained at 1080x1920 (downscale 1:")
    assert lines[size_rule + 1].startswith(" " * 32 + "the automatic rule")  # wrapped under the value
    missing = str(SHARED_DATA / "fox" / "images" / "0005.jpg")
    # the path follows on the line, or on the next one when the two would pass 79 columns
    assert ("  images/0005.jpg: image file not found: " + missing in lines
            or "  images/0005.jpg: image file not found:\n    " + missing in "\n".join(lines)), lines
    info = _inspect_json(capfd, str(SHARED_DATA / "fox"))
    assert info["root"] == str(SHARED_DATA / "fox" / "transforms.json") and len(info["skipped"]) == 17


def test_a_path_longer_than_a_line_is_left_whole():
    from ngptune.inspect import key_value_lines

    path = "/" + "d" * 90
    assert key_value_lines([("note", f"see {path} for more")]) == [f"  {'note':<28}  see", " " * 32 + path,
                                                                       " " * 32 + "for more"]


@needs_shared
def test_lego_400(capfd):
    info = _inspect_json(capfd, str(SHARED_DATA / "nerf_synthetic_lego_400"))
    assert info["format"] == "blender"
    assert info["splits"] == {"train": 100, "val": 100, "test": 200}
    assert (info["width"], info["height"]) == (400, 400)
    assert info["skipped"] == []
    assert info["pixel_memory_bytes"] == 400 * 400 * 4 * 400
    assert info["capture"]["kind"] == "object" and info["scene_model"] == "box"
    assert info["finest_resolution"]["default"] == 512  # the box model's, as before
    assert info["hash_grid"] == {"n_features_per_level": 4, "log2_hashmap_size": 18}


def test_demo_scene_and_timing(capfd, tmp_path):
    assert main(["demo-scene", str(tmp_path / "demo")]) == 0
    capfd.readouterr()
    info = _inspect_json(capfd, str(tmp_path / "demo"), "--timing")
    assert info["splits"] == {"train": 32, "val": 4, "test": 8}
    assert info["timing"]["images"] == 32 and info["timing"]["first_load_s"] > 0
    assert info["timing"]["speedup"] == round(info["timing"]["speedup"], 2)
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert "scene path does not exist" in capfd.readouterr().err


def test_folder_with_two_formats_lists_the_ignored_one_and_the_box(capfd, tmp_path):
    from tests.support.scene_formats import ring_c2w, write_colmap_scene, write_llff

    ring = ring_c2w()
    write_colmap_scene(tmp_path, ring)
    write_llff(tmp_path / "llff", ring)
    (tmp_path / "poses_bounds.npy").write_bytes((tmp_path / "llff" / "poses_bounds.npy").read_bytes())
    info = _inspect_json(capfd, str(tmp_path))
    assert (info["format"], info["ignored_formats"]) == ("colmap", ["llff"])
    assert info["box_source"] == "file"  # a model without points: colmap2nerf's placement
    info = _inspect_json(capfd, str(tmp_path), "--format", "llff", "--aabb-scale", "2")
    assert (info["format"], info["ignored_formats"], info["aabb_scale"], info["box_source"]) == (
        "llff", ["colmap"], 2, "override")
    assert main(["inspect", str(tmp_path)]) == 0
    out = capfd.readouterr().out
    assert "also found, ignored: llff" in out and "pixel memory" in out


def test_an_aabb_scale_flag_is_credited_to_the_flag_on_blender_and_instant_ngp_scenes(capfd, tmp_path):
    import json

    from trainer.data.demo import write_demo_scene

    scene = write_demo_scene(tmp_path / "scene", resolution=16, n_train=4, n_val=1, n_test=1)
    info = _inspect_json(capfd, str(scene))
    assert info["box_source"] == "file"
    info = _inspect_json(capfd, str(scene), "--aabb-scale", "8")
    assert (info["aabb_scale"], info["box_source"]) == (8, "override")
    ngp = tmp_path / "ngp"  # one transforms.json with its own aabb_scale
    ngp.mkdir()
    data = json.loads((scene / "transforms_train.json").read_text())
    for frame in data["frames"]:
        frame["file_path"] = str((scene / frame["file_path"]).resolve())
    (ngp / "transforms.json").write_text(json.dumps({**data, "aabb_scale": 4}))
    assert _inspect_json(capfd, str(ngp))["box_source"] == "file"
    info = _inspect_json(capfd, str(ngp), "--aabb-scale", "16")
    assert (info["format"], info["aabb_scale"], info["box_source"]) == ("instant-ngp", 16, "override")
    assert main(["inspect", str(ngp), "--aabb-scale", "16"]) == 0
    assert "aabb_scale 16 (--aabb-scale)" in " ".join(capfd.readouterr().out.split())


def test_a_train_only_blender_scene_shows_the_frames_training_holds_out(capsys, tmp_path):
    from trainer.data.demo import write_demo_scene

    scene = write_demo_scene(tmp_path / "scene", resolution=16, n_train=16, n_val=1, n_test=1)
    for split in ("val", "test"):
        (scene / f"transforms_{split}.json").unlink()
    info = _inspect_json(capsys, str(scene))
    assert info["splits"] == {"train": 16}  # as stored
    assert info["training_holdout"] == {"every": 8, "splits": {"train": 14, "test": 2}}  # as training splits it
    assert info["size_rule"] == ("blender: trained at 16x16 (downscale 1: the automatic rule keeps this format at "
                                 "full size); images at full size")
    assert main(["inspect", str(scene)]) == 0
    assert "every 8th frame held out: train: 14, test: 2" in " ".join(capsys.readouterr().out.split())
