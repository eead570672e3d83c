"""Camera maths of trainer.data.convention, and the four loaders agreeing on one camera ring."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.support.scene_formats import (
    RING_FOCAL,
    RING_HEIGHT,
    RING_WIDTH,
    look_at_c2w,
    ring_c2w,
    write_blender,
    write_colmap_scene,
    write_llff,
    write_ngp,
)
from trainer.data import Intrinsics, SceneError, load_scene
from trainer.data.convention import (
    centre_of_attention,
    decoded_intrinsics,
    fit_intrinsics_to_image,
    holdout_splits,
    llff_to_opengl,
    nerf_to_unit_cube,
    normalize_poses,
    opencv_to_opengl_c2w,
    rotation_between,
    w2c_to_c2w,
)


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q *= np.sign(np.diag(r))
    if np.linalg.det(q) < 0:
        q[:, 0] *= -1
    return q


def test_nerf_to_unit_cube_hand_computed() -> None:
    c2w = np.eye(4)
    c2w[:3, 3] = (1.0, 2.0, 3.0)
    out = nerf_to_unit_cube(c2w, scale=0.5, offset=(0.5, 0.5, 0.5))
    # t*0.5 + 0.5 = (1.0, 1.5, 2.0); cycle (x,y,z) -> (y,z,x) = (1.5, 2.0, 1.0)
    np.testing.assert_allclose(out[:3, 3], [1.5, 2.0, 1.0])
    # rows cycled: new row 0 = old row 1 ...
    np.testing.assert_allclose(out[:3, :3], [[0, 1, 0], [0, 0, 1], [1, 0, 0]])
    np.testing.assert_allclose(out[3], [0, 0, 0, 1])
    # offset is added before the cycle: a non-uniform offset shows the order
    out = nerf_to_unit_cube(np.eye(4), scale=0.33, offset=(0.1, 0.2, 0.3))
    np.testing.assert_allclose(out[:3, 3], [0.2, 0.3, 0.1])


def test_nerf_to_unit_cube_maps_points_and_directions_like_instant_ngp() -> None:
    rng = np.random.default_rng(0)
    c2w = np.tile(np.eye(4), (5, 1, 1))
    for m in c2w:
        m[:3, :3] = random_rotation(rng)
        m[:3, 3] = rng.normal(size=3) * 3
    out = nerf_to_unit_cube(c2w, scale=0.33, offset=(0.5, 0.5, 0.5))
    assert out.shape == (5, 4, 4)

    def cycle(p: np.ndarray) -> np.ndarray:
        return p[..., [1, 2, 0]]

    np.testing.assert_allclose(out[:, :3, 3], cycle(c2w[:, :3, 3] * 0.33 + 0.5), atol=1e-12)
    d_cam = rng.normal(size=3)
    np.testing.assert_allclose(out[:, :3, :3] @ d_cam, cycle(c2w[:, :3, :3] @ d_cam), atol=1e-12)
    # a single matrix gives the same as a stack of one
    np.testing.assert_allclose(nerf_to_unit_cube(c2w[2]), nerf_to_unit_cube(c2w[2:3])[0])


def test_opencv_to_opengl_flips_y_and_z_camera_axes() -> None:
    c2w_cv = np.eye(4)
    c2w_cv[:3, 3] = (1, 2, 3)
    out = opencv_to_opengl_c2w(c2w_cv)
    np.testing.assert_allclose(
        out, np.diag([1.0, -1.0, -1.0, 1.0]) + np.pad(np.array([[1, 2, 3]]).T, ((0, 1), (3, 0)))
    )
    # An OpenCV camera looks down +z: the OpenGL camera's -z column must be that direction.
    rng = np.random.default_rng(1)
    c2w_cv[:3, :3] = random_rotation(rng)
    out = opencv_to_opengl_c2w(c2w_cv)
    np.testing.assert_allclose(-out[:3, 2], c2w_cv[:3, 2])
    np.testing.assert_allclose(out[:3, 0], c2w_cv[:3, 0])
    np.testing.assert_allclose(out[:3, 3], c2w_cv[:3, 3])


def test_w2c_to_c2w_inverts() -> None:
    rng = np.random.default_rng(2)
    rot = np.stack([random_rotation(rng) for _ in range(4)])
    t = rng.normal(size=(4, 3))
    c2w = w2c_to_c2w(rot, t)
    for r, tt, m in zip(rot, t, c2w):
        w2c = np.eye(4)
        w2c[:3, :3], w2c[:3, 3] = r, tt
        np.testing.assert_allclose(m @ w2c, np.eye(4), atol=1e-12)


def test_llff_columns_down_right_back() -> None:
    # An OpenGL identity camera (right=x, up=y, back=z) is stored by LLFF as [down, right, back] = [-y, x, z].
    pose = np.zeros((1, 3, 5))
    pose[0, :, 0] = (0, -1, 0)
    pose[0, :, 1] = (1, 0, 0)
    pose[0, :, 2] = (0, 0, 1)
    pose[0, :, 3] = (4, 5, 6)
    pose[0, :, 4] = (30, 40, 50)  # hwf, ignored
    out = llff_to_opengl(pose)
    expected = np.eye(4)
    expected[:3, 3] = (4, 5, 6)
    np.testing.assert_allclose(out[0], expected)


def test_rotation_between() -> None:
    rng = np.random.default_rng(3)
    for _ in range(5):
        a, b = rng.normal(size=3), rng.normal(size=3)
        r = rotation_between(a, b)
        np.testing.assert_allclose(r @ (a / np.linalg.norm(a)), b / np.linalg.norm(b), atol=1e-12)
        np.testing.assert_allclose(r @ r.T, np.eye(3), atol=1e-12)
        assert np.linalg.det(r) == pytest.approx(1.0)
    np.testing.assert_array_equal(rotation_between(np.array([0, 0, 2.0]), np.array([0, 0, 1.0])), np.eye(3))
    flip = rotation_between(np.array([0, 0, -1.0]), np.array([0, 0, 1.0]))
    np.testing.assert_allclose(flip, np.diag([1.0, -1.0, -1.0]), atol=1e-12)
    flip_x = rotation_between(np.array([1.0, 0, 0]), np.array([-1.0, 0, 0]))
    np.testing.assert_allclose(flip_x @ [1.0, 0, 0], [-1.0, 0, 0], atol=1e-12)
    assert np.linalg.det(flip_x) == pytest.approx(1.0)


def test_centre_of_attention_hand_computed() -> None:
    # colmap2nerf's 1e-10 regularisation of |c|^2 biases t by ~1e-10, hence atol 1e-8.
    up = np.array([0.0, 0.0, 1.0])
    # Two cameras whose axes cross at the origin.
    a = look_at_c2w(np.array([-4.0, 0, 0]), np.zeros(3), up)
    b = look_at_c2w(np.array([0, -4.0, 0]), np.zeros(3), up)
    np.testing.assert_allclose(centre_of_attention(np.stack([a, b])), [0, 0, 0], atol=1e-8)
    # Skew axes: x axis at z=0 and y axis at z=1; closest points (0,0,0), (0,0,1) -> midpoint z=0.5.
    b_high = look_at_c2w(np.array([0, -4.0, 1.0]), np.array([0, 0, 1.0]), up)
    np.testing.assert_allclose(centre_of_attention(np.stack([a, b_high])), [0, 0, 0.5], atol=1e-8)
    # Cameras looking away from each other: the crossing is behind both, so t is clamped to 0 and the
    # pair votes for the midpoint of the two camera centres.
    a_away = look_at_c2w(np.array([-4.0, 0, 0]), np.array([-8.0, 0, 0]), up)
    b_away = look_at_c2w(np.array([0, -4.0, 0]), np.array([0, -8.0, 0]), up)
    np.testing.assert_allclose(centre_of_attention(np.stack([a_away, b_away])), [-2, -2, 0], atol=1e-8)
    # Parallel axes give no vote: the zero vector, as colmap2nerf.
    c = look_at_c2w(np.array([-4.0, 1.0, 0]), np.array([0, 1.0, 0]), up)
    np.testing.assert_array_equal(centre_of_attention(np.stack([a, c])), np.zeros(3))


def test_centre_of_attention_chunking_matches_one_chunk() -> None:
    rng = np.random.default_rng(4)
    targets = rng.normal(size=(37, 3)) * 0.3 + (1.0, 2.0, 3.0)
    c2w = np.stack([look_at_c2w(rng.normal(size=3) * 5, t, np.array([0, 0, 1.0])) for t in targets])
    np.testing.assert_allclose(
        centre_of_attention(c2w, chunk=5), centre_of_attention(c2w, chunk=1000), atol=1e-12
    )


def test_normalize_poses_is_identity_on_a_canonical_ring() -> None:
    ring = ring_c2w()
    out, norm = normalize_poses(ring)
    np.testing.assert_allclose(out, ring, atol=1e-8)
    np.testing.assert_allclose(norm.rotation, np.eye(3), atol=1e-12)
    assert norm.scale == pytest.approx(1.0)


def test_normalize_poses_undoes_a_similarity() -> None:
    ring = ring_c2w(n=12, radius=4.0, elevation_deg=30.0)
    angle = math.radians(35.0)
    tilt = np.array(
        [[1, 0, 0], [0, math.cos(angle), -math.sin(angle)], [0, math.sin(angle), math.cos(angle)]]
    )
    moved = ring.copy()
    moved[:, :3, :3] = tilt @ ring[:, :3, :3]
    moved[:, :3, 3] = 2.5 * (ring[:, :3, 3] @ tilt.T) + (1.0, -2.0, 3.0)
    out, norm = normalize_poses(moved)
    # The minimal rotation taking the tilted up back to +z is exactly the inverse tilt.
    np.testing.assert_allclose(out, ring, atol=1e-9)
    np.testing.assert_allclose(norm.rotation, tilt.T, atol=1e-12)
    assert norm.scale == pytest.approx(1 / 2.5)
    assert np.mean(np.linalg.norm(out[:, :3, 3], axis=1)) == pytest.approx(4.0)
    assert "35 deg" in norm.describe()


def test_fit_and_decoded_intrinsics() -> None:
    full = Intrinsics(width=4032, height=3024, fx=3000.0, fy=3000.0, cx=2016.0, cy=1512.0, k1=0.1)
    quarter = fit_intrinsics_to_image(full, 1008, 756, "x")
    assert (quarter.width, quarter.height, quarter.fx, quarter.cx, quarter.cy, quarter.k1) == (
        1008,
        756,
        750.0,
        504.0,
        378.0,
        0.1,
    )
    assert fit_intrinsics_to_image(full, 4032, 3024, "x") is full
    with pytest.raises(SceneError, match=r"^cam7: image is 1000x1000 .* 4032x3024"):
        fit_intrinsics_to_image(full, 1000, 1000, "cam7")

    odd = Intrinsics(width=41, height=31, fx=50.0, fy=60.0, cx=20.5, cy=15.5)
    half = decoded_intrinsics(odd, 2, "x")
    # decoded size is width // downscale; focal and principal point scale by 1/downscale
    assert (half.width, half.height, half.fx, half.fy, half.cx, half.cy) == (20, 15, 25.0, 30.0, 10.25, 7.75)
    assert decoded_intrinsics(odd, 1, "x") is odd
    with pytest.raises(SceneError, match="frame 3: downscale 64"):
        decoded_intrinsics(odd, 64, "frame 3")


def test_holdout_splits() -> None:
    frames = list(range(17))
    split = holdout_splits(frames, 8)
    assert split["test"] == [0, 8, 16]
    assert split["train"] == [f for f in frames if f not in (0, 8, 16)]
    assert holdout_splits(frames, 0) == {"train": frames, "test": []}
    assert holdout_splits(frames, 1) == {"train": [], "test": frames}


# --- the four formats agree ------------------------------------------------------------------------


def _expected_ring_in_cube(ring: np.ndarray) -> np.ndarray:
    """Hand-built: camera centres cycle(c*0.33 + 0.5), rotation rows cycled."""
    out = ring.copy()
    out[:, :3, 3] = (ring[:, :3, 3] * 0.33 + 0.5)[:, [1, 2, 0]]
    out[:, :3, :3] = ring[:, [1, 2, 0], :3]
    return out


def _centre_pixel_point(c2w: np.ndarray, intr: Intrinsics, depth: float) -> np.ndarray:
    """World point at ``depth`` (unit-cube units, along the unit ray) through the image centre."""
    u, v = intr.width / 2, intr.height / 2
    d_cam = np.array([(u - intr.cx) / intr.fx, -(v - intr.cy) / intr.fy, -1.0])
    d_cam /= np.linalg.norm(d_cam)
    return c2w[:3, :3] @ d_cam * depth + c2w[:3, 3]


@pytest.mark.parametrize("colmap_binary", [False, True], ids=["colmap-text", "colmap-binary"])
def test_four_formats_agree_on_a_camera_ring(tmp_path, colmap_binary: bool) -> None:
    ring = ring_c2w(n=8, radius=4.0, elevation_deg=20.0)
    write_ngp(tmp_path / "ngp", ring)
    write_blender(tmp_path / "blender", ring)
    write_llff(tmp_path / "llff", ring)
    write_colmap_scene(tmp_path / "colmap", ring, binary=colmap_binary)

    expected = _expected_ring_in_cube(ring)
    for name in ("ngp", "blender", "llff", "colmap"):
        scene = load_scene(tmp_path / name, holdout_every=0)
        frames = scene.frames("train")
        assert len(frames) == 8, name
        c2w = np.stack([f.c2w for f in frames])
        np.testing.assert_allclose(c2w, expected, atol=1e-5, err_msg=name)
        for frame in frames:
            intr = frame.intrinsics
            assert (intr.width, intr.height) == (RING_WIDTH, RING_HEIGHT), name
            np.testing.assert_allclose(
                [intr.fx, intr.fy, intr.cx, intr.cy],
                [RING_FOCAL, RING_FOCAL, RING_WIDTH / 2, RING_HEIGHT / 2],
                atol=1e-9,
            )
            assert not intr.has_distortion
        # Each camera looks at the NeRF origin, 4 NeRF units = 1.32 cube units away: the centre
        # pixel's ray reaches the cube centre there; at depth 1 it is 1 cube unit from the camera.
        for frame, cam in zip(frames, ring):
            np.testing.assert_allclose(
                _centre_pixel_point(frame.c2w, frame.intrinsics, 4 * 0.33), [0.5, 0.5, 0.5], atol=1e-5
            )
            p_nerf = cam[:3, 3] + (1 / 0.33) * (-cam[:3, 2])
            np.testing.assert_allclose(
                _centre_pixel_point(frame.c2w, frame.intrinsics, 1.0),
                (p_nerf * 0.33 + 0.5)[[1, 2, 0]],
                atol=1e-5,
            )
