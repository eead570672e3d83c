"""Camera-path files (instant-ngp base_cam.json, nerfstudio camera_path.json) and orbits."""

from __future__ import annotations

import json
import math
import types
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from trainer.data import load_scene
from trainer.contract.errors import SceneError
from trainer.inference.cameras import orbit_cameras, path_cameras, read_camera_path, scene_orbit
from trainer.inference.worldframe import world_c2w_to_cube

KEYFRAMES = [  # (NGP quaternion x y z w, position, fov): instant-ngp camera axes (x right, y down, z forward)
    (Rotation.from_euler("y", 0, degrees=True).as_quat(), [0.5, 0.5, -1.0], 40.0),
    (Rotation.from_euler("y", 60, degrees=True).as_quat(), [1.4, 0.6, -0.2], 50.0),
    (Rotation.from_euler("y", 120, degrees=True).as_quat(), [1.6, 0.5, 1.0], 45.0),
]


def _write_ngp_path(path, keyframes=KEYFRAMES, changes=None):
    entries = [{"R": list(map(float, q)), "T": t, "fov": fov, "scale": 1.0, "slice": 0.0, "aperture_size": 0.0}
               for q, t, fov in keyframes]
    for (index, key), value in (changes or {}).items():
        if value is None:
            del entries[index][key]
        else:
            entries[index][key] = value
    path.write_text(json.dumps({"path": entries, "time": 0.0}))
    return path


def _expected_c2w(quat, position):
    """The keyframe as a trainer camera: NGP rotation with its y and z columns negated."""
    c2w = np.eye(4)
    c2w[:3, :3] = Rotation.from_quat(quat).as_matrix() * np.array([1.0, -1.0, -1.0])
    c2w[:3, 3] = position
    return c2w


def test_instant_ngp_path_passes_through_its_keyframes_and_between_them(tmp_path, demo_scene):
    path = read_camera_path(_write_ngp_path(tmp_path / "base_cam.json"), load_scene(demo_scene))
    assert path.n_keyframes == 3
    c2w, fov = path.poses_at(path.key_times)
    for i, (quat, position, key_fov) in enumerate(KEYFRAMES):
        np.testing.assert_allclose(c2w[i], _expected_c2w(quat, position), atol=1e-6)
        assert abs(fov[i] - key_fov) < 1e-6
    middle, mid_fov = path.poses_at((path.key_times[:-1] + path.key_times[1:]) / 2)
    for i in range(2):
        a, b = np.asarray(KEYFRAMES[i][1]), np.asarray(KEYFRAMES[i + 1][1])
        assert np.all(middle[i, :3, 3] >= np.minimum(a, b) - 1e-9) and np.all(middle[i, :3, 3] <= np.maximum(a, b) + 1e-9)
        assert min(KEYFRAMES[i][2], KEYFRAMES[i + 1][2]) <= mid_fov[i] <= max(KEYFRAMES[i][2], KEYFRAMES[i + 1][2])
        # slerp: the middle rotation is half way (30 degrees from either neighbour)
        angle_a = Rotation.from_matrix(middle[i, :3, :3] @ _expected_c2w(KEYFRAMES[i][0], a)[:3, :3].T).magnitude()
        assert abs(math.degrees(angle_a) - 30.0) < 1e-6
    frames = path_cameras(path, 7, 24, 16)
    assert len(frames) == 7 and frames[0].intrinsics.width == 24
    np.testing.assert_allclose(frames[-1].c2w, _expected_c2w(KEYFRAMES[2][0], KEYFRAMES[2][1]), atol=1e-6)
    fy = 0.5 * 16 / math.tan(math.radians(40.0) / 2)
    assert abs(frames[0].intrinsics.fy - fy) < 1e-9


def test_nerfstudio_path_maps_source_world_poses_like_the_training_cameras(tmp_path, demo_scene):
    scene = load_scene(demo_scene)
    source = json.loads((demo_scene / "transforms_test.json").read_text())["frames"][:3]
    entries = [{"camera_to_world": sum(f["transform_matrix"], []), "fov": 40.0, "aspect": 1.0} for f in source]
    file = tmp_path / "camera_path.json"
    file.write_text(json.dumps({"camera_path": entries, "render_width": 20, "render_height": 12, "fps": 24, "seconds": 2}))
    path = read_camera_path(file, scene)
    c2w, _ = path.poses_at(path.key_times)
    for i, frame in enumerate(scene.frames("test")[:3]):
        np.testing.assert_allclose(c2w[i], frame.c2w, atol=1e-6)
    assert (path.width, path.height, path.fps, path.seconds) == (20, 12, 24, 2)
    np.testing.assert_allclose(world_c2w_to_cube(np.asarray(source[0]["transform_matrix"]), scene)[0], frame_c2w(scene), atol=1e-9)


def frame_c2w(scene):
    return scene.frames("test")[0].c2w


def test_orbit_frames_are_distinct_look_at_the_centre_at_the_radius(demo_scene):
    scene = load_scene(demo_scene)
    orbit = scene_orbit(scene, radius=1.1, elevation_deg=25.0)
    frames = orbit_cameras(orbit, 9, scene.frames("train")[0].intrinsics)
    positions = np.stack([f.c2w[:3, 3] for f in frames])
    assert len({tuple(np.round(p, 9)) for p in positions}) == 9
    np.testing.assert_allclose(np.linalg.norm(positions - orbit.centre, axis=1), 1.1, atol=1e-9)
    for f in frames:
        forward = -f.c2w[:3, 2]  # OpenGL cameras look down −z
        to_centre = (orbit.centre - f.c2w[:3, 3]) / np.linalg.norm(orbit.centre - f.c2w[:3, 3])
        np.testing.assert_allclose(forward, to_centre, atol=1e-9)
        np.testing.assert_allclose(f.c2w[:3, :3].T @ f.c2w[:3, :3], np.eye(3), atol=1e-9)
        elevation = math.degrees(math.asin(float((f.c2w[:3, 3] - orbit.centre) @ orbit.up) / 1.1))
        assert abs(elevation - 25.0) < 1e-6
    # the demo cameras look at the NeRF origin, the unit cube's centre
    np.testing.assert_allclose(scene_orbit(scene).centre, [0.5, 0.5, 0.5], atol=1e-6)


@pytest.mark.parametrize("changes, message", [
    ({}, "zero keyframes"),
    ({(1, "R"): None}, r"path\[1\]: missing key 'R'"),
    ({(0, "fov"): None}, r"path\[0\]: missing key 'fov'"),
    ({(2, "T"): [0.1, float("nan"), 0.2]}, r"path\[2\]\.T: NaN"),
    ({(0, "R"): [0.0, 0.0, 0.0, 2.0]}, r"path\[0\]\.R: not a unit quaternion \(norm 2\)"),
    ({(1, "T"): [1.0, 2.0]}, r"path\[1\]\.T: expected a list of 3 numbers"),
])
def test_bad_instant_ngp_paths_name_the_file_keyframe_and_key(tmp_path, demo_scene, changes, message):
    file = tmp_path / "base_cam.json"
    if changes:
        _write_ngp_path(file, changes=changes)
    else:
        file.write_text(json.dumps({"path": [], "time": 0.0}))
    with pytest.raises(SceneError, match=message) as info:
        read_camera_path(file, load_scene(demo_scene))
    assert str(file) in str(info.value) and "\n" not in str(info.value)


def test_a_json_without_either_layout_is_refused(tmp_path, demo_scene):
    file = tmp_path / "cams.json"
    file.write_text(json.dumps({"frames": []}))
    with pytest.raises(SceneError, match="neither an instant-ngp camera path"):
        read_camera_path(file, load_scene(demo_scene))


def test_the_captured_arc_is_the_circle_less_its_widest_gap():
    from trainer.inference.cameras import captured_arc

    first, span = captured_arc(np.radians([30.0, 350.0, 10.0]))
    assert math.degrees(first) == pytest.approx(350.0) and math.degrees(span) == pytest.approx(40.0)
    first, span = captured_arc(np.radians([0.0, 120.0, 240.0]))
    assert math.degrees(span) == pytest.approx(240.0)


def test_an_arc_orbit_goes_from_end_to_end_once():
    from trainer.data.scene import Intrinsics
    from trainer.inference.cameras import Orbit

    orbit = Orbit(centre=np.zeros(3), up=np.array([0.0, 0.0, 1.0]), radius=2.0, elevation_deg=0.0,
                  start=np.array([1.0, 0.0, 0.0]), arc_deg=90.0)
    pinhole = Intrinsics(width=8, height=8, fx=8, fy=8, cx=4, cy=4)

    def azimuths(n: int) -> list[float]:
        return [math.degrees(math.atan2(f.c2w[1, 3], f.c2w[0, 3])) for f in orbit_cameras(orbit, n, pinhole)]

    assert azimuths(4) == pytest.approx([0.0, 30.0, 90.0 * 2 / 3, 90.0], abs=1e-9)  # both ends, every view distinct
    assert azimuths(1) == pytest.approx([45.0])  # one frame: the arc's middle


def test_a_capture_of_one_side_orbits_its_own_arc_and_one_all_round_a_full_circle():
    from tests.support.fox import FOX
    from tests.support.paths import SHARED_DATA

    fox_scene = load_scene(FOX)
    fox = scene_orbit(fox_scene)
    assert not fox.full_circle and 80.0 < fox.arc_deg < 100.0  # fox's views span about 90 degrees
    assert fox.description == f"a {round(fox.arc_deg)}° arc"  # what render says of it
    middle = scene_orbit(fox_scene, arc_deg=1.0).start  # a 1° arc: the middle of the views' arc
    round_trip = scene_orbit(fox_scene, arc_deg=360.0)  # --arc 360: all the way round, from the views' middle
    assert round_trip.full_circle and float(round_trip.start @ middle) > 0.999
    assert round_trip.description == "a full circle"
    lego = load_scene(SHARED_DATA / "nerf_synthetic_lego_400")
    assert scene_orbit(lego).full_circle
    np.testing.assert_allclose(scene_orbit(lego, arc_deg=360.0).start, scene_orbit(lego).start, atol=1e-12)


def test_a_camera_straight_above_the_centre_does_not_widen_the_arc():
    from trainer.data.scene import Frame, Intrinsics
    from trainer.inference.cameras import captured_arc

    pinhole = Intrinsics(width=8, height=8, fx=8, fy=8, cx=4, cy=4)
    positions = [np.array([0.0, 3.0, 0.0])] + [3.0 * np.array([math.cos(a), 0.0, math.sin(a)])
                                                for a in np.radians(np.linspace(90.0, 125.0, 8))]
    frames = []
    for i, p in enumerate(positions):
        c2w = np.eye(4)
        back = p / np.linalg.norm(p)
        up = np.array([0.0, 0.0, 1.0]) if i == 0 else np.array([0.0, 1.0, 0.0])
        right = np.cross(up, back)
        c2w[:3, 0], c2w[:3, 1], c2w[:3, 2], c2w[:3, 3] = right / np.linalg.norm(right), up, back, p
        frames.append(Frame(name=str(i), image_path=Path(""), c2w=c2w, intrinsics=pinhole))
    scene = types.SimpleNamespace(frames=lambda split: frames)
    orbit = scene_orbit(scene)
    assert not orbit.full_circle and orbit.arc_deg < 45.0  # the side views span 35°; the overhead one adds none
    assert captured_arc(np.radians([90.0, 120.0]))[1] == pytest.approx(math.radians(30.0))
