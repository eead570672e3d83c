"""Camera → rays (trainer/data/rays.py)."""

from __future__ import annotations

import doctest
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

from trainer.data import rays as rays_module
from trainer.data.rays import (
    IntrinsicsTensors,
    camera_rays_for_image,
    composite_background,
    distort_normalized,
    generate_rays,
    pixel_to_camera_dirs,
    undistort_normalized,
)
from trainer.data.scene import Frame, Intrinsics

# OpenCV order (k1, k2, p1, p2, k3, k4), every term non-zero, k4 in the denominator.
DISTORTION = (-0.21, 0.08, 0.0012, -0.0009, -0.015, 0.05)
CAMERA = Intrinsics(
    640, 480, fx=520.0, fy=515.0, cx=318.2, cy=243.7,
    **dict(zip(("k1", "k2", "p1", "p2", "k3", "k4"), DISTORTION)),
)


def camera_matrix(i: Intrinsics) -> np.ndarray:
    return np.array([[i.fx, 0, i.cx], [0, i.fy, i.cy], [0, 0, 1]], dtype=np.float64)


def opencv_distortion(i: Intrinsics) -> np.ndarray:
    # cv2 wants (k1, k2, p1, p2, k3, k4, k5, k6); our k4 is OpenCV's k4 (first denominator term)
    return np.array([*i.distortion, 0.0, 0.0], dtype=np.float64)


def project_with_cv2(camera_points: np.ndarray) -> np.ndarray:
    """[n, 3] points in OpenCV camera axes → [n, 2] pixels through CAMERA (cv2.projectPoints)."""
    zero = np.zeros(3)
    matrix, distortion = camera_matrix(CAMERA), opencv_distortion(CAMERA)
    pixels, _ = cv2.projectPoints(camera_points, zero, zero, matrix, distortion)
    return pixels[:, 0, :]


def test_forward_model_matches_cv2_project_points():
    rng = np.random.default_rng(0)
    xy = rng.uniform(-0.6, 0.6, (200, 2))
    points = np.concatenate([xy, np.ones((200, 1))], axis=1)
    pixels = project_with_cv2(points)
    distortion = torch.tensor(DISTORTION, dtype=torch.float64)
    ours = distort_normalized(torch.from_numpy(xy), distortion).numpy()
    ours_px = ours * [CAMERA.fx, CAMERA.fy] + [CAMERA.cx, CAMERA.cy]
    np.testing.assert_allclose(ours_px, pixels, atol=1e-9)


def test_undistortion_matches_cv2_undistort_points():
    rng = np.random.default_rng(1)
    pixels = rng.uniform([0, 0], [CAMERA.width, CAMERA.height], (500, 2))
    criteria = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-15)
    args = (pixels[:, None, :], camera_matrix(CAMERA), opencv_distortion(CAMERA))
    if hasattr(cv2, "undistortPointsIter"):  # OpenCV 4.x
        expected = cv2.undistortPointsIter(*args, None, None, criteria)
    else:  # OpenCV 5 takes the criteria in undistortPoints
        expected = cv2.undistortPoints(*args, criteria=criteria)
    expected = expected[:, 0, :]
    cameras = IntrinsicsTensors.from_intrinsics([CAMERA])[torch.zeros(500, dtype=torch.int64)]
    u, v = torch.from_numpy(pixels).float().unbind(-1)
    dirs = pixel_to_camera_dirs(u, v, cameras)
    assert dirs.dtype == torch.float32
    np.testing.assert_array_equal(dirs[:, 2].numpy(), -1.0)
    ours = np.stack([dirs[:, 0].numpy(), -dirs[:, 1].numpy()], -1)  # back to OpenCV's y-down
    np.testing.assert_allclose(ours, expected, atol=1e-6)
    # and it inverts the forward model (in float64, to much tighter precision)
    xy_d = torch.from_numpy((pixels - [CAMERA.cx, CAMERA.cy]) / [CAMERA.fx, CAMERA.fy])
    distortion = torch.tensor(DISTORTION, dtype=torch.float64)
    round_trip = distort_normalized(undistort_normalized(xy_d, distortion), distortion)
    np.testing.assert_allclose(round_trip.numpy(), xy_d.numpy(), atol=1e-12)


def test_rays_from_a_camera_on_the_z_axis_hit_hand_computed_points():
    # camera at (0, 0, 5) looking down −z at the origin; f = 100 px, principal point (50.5, 50.5)
    # so the centre of pixel (u, v) is at normalised (u − 50, v − 50) / 100.
    intrinsics = Intrinsics(101, 101, fx=100.0, fy=100.0, cx=50.5, cy=50.5)
    c2w = torch.eye(4)
    c2w[2, 3] = 5.0
    cameras = IntrinsicsTensors.from_intrinsics([intrinsics])[torch.zeros(3, dtype=torch.int64)]
    # world (1, 2, 0) is 0.2 right and 0.4 up at depth 5 → pixel (70, 10); (0, 0, 0) → (50, 50);
    # (−0.5, −1, 0) → (40, 70)
    u, v = torch.tensor([70, 50, 40]), torch.tensor([10, 50, 70])
    rays_o, rays_d = generate_rays(c2w[None].expand(3, -1, -1), cameras, u, v)
    targets = torch.tensor([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0], [-0.5, -1.0, 0.0]])
    torch.testing.assert_close(rays_o, torch.tensor([[0.0, 0.0, 5.0]] * 3))
    torch.testing.assert_close(torch.linalg.vector_norm(rays_d, dim=-1), torch.ones(3))
    expected_d = (targets - rays_o) / torch.linalg.vector_norm(targets - rays_o, dim=-1, keepdim=True)
    torch.testing.assert_close(rays_d, expected_d)
    # a 3x4 c2w gives the same rays
    _, rays_d_34 = generate_rays(c2w[None, :3].expand(3, -1, -1), cameras, u, v)
    torch.testing.assert_close(rays_d_34, rays_d)


def look_at_c2w(eye: np.ndarray, target: np.ndarray) -> np.ndarray:
    forward = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    c2w = np.eye(4)
    c2w[:3, :3] = np.stack([right, up, -forward], axis=1)  # OpenGL: x right, y up, looks down −z
    c2w[:3, 3] = eye
    return c2w


def test_rays_of_a_posed_distorted_camera_pass_through_the_points_it_sees():
    rng = np.random.default_rng(2)
    c2w = look_at_c2w(np.array([3.0, -2.0, 4.0]), np.array([0.5, 0.5, 0.5]))
    world = 0.5 + rng.uniform(-0.4, 0.4, (50, 3))
    # project with OpenCV (OpenCV camera axes = OpenGL's with y and z flipped)
    w2c = np.linalg.inv(c2w)
    camera_points = (world - c2w[:3, 3]) @ c2w[:3, :3] * [1, -1, -1]
    pixels = project_with_cv2(camera_points)
    assert np.allclose(w2c[:3, :3], c2w[:3, :3].T)
    u, v = torch.from_numpy(pixels - 0.5).unbind(-1)  # generate_rays adds the half pixel
    cameras = IntrinsicsTensors.from_intrinsics([CAMERA])[torch.zeros(50, dtype=torch.int64)]
    c2w_t = torch.from_numpy(c2w).float()[None].expand(50, -1, -1)
    rays_o, rays_d = generate_rays(c2w_t, cameras, u, v)
    to_point = torch.from_numpy(world).float() - rays_o
    distance = torch.linalg.vector_norm(to_point, dim=-1)
    # the point lies on the ray: its distance to the ray line is ~0 (float32, ~5 units away)
    along = (to_point * rays_d).sum(-1, keepdim=True) * rays_d
    off_ray = torch.linalg.vector_norm(to_point - along, dim=-1)
    assert off_ray.max() < 1e-5 * distance.max()


def test_camera_rays_for_image_are_row_major():
    c2w = look_at_c2w(np.array([1.0, 2.0, 3.0]), np.zeros(3))
    intrinsics = Intrinsics(7, 5, fx=6.0, fy=6.5, cx=3.1, cy=2.4, k1=0.05, p2=0.001)
    frame = Frame("f", Path("f.png"), c2w, intrinsics)
    rays_o, rays_d = camera_rays_for_image(frame)
    assert rays_o.shape == (35, 3) and rays_d.shape == (35, 3) and rays_d.dtype == torch.float32
    v, u = torch.meshgrid(torch.arange(5), torch.arange(7), indexing="ij")
    cameras = IntrinsicsTensors.from_intrinsics([intrinsics])[torch.zeros(35, dtype=torch.int64)]
    c2w_t = torch.from_numpy(c2w).float()[None].expand(35, -1, -1)
    o, d = generate_rays(c2w_t, cameras, u.reshape(-1), v.reshape(-1))
    torch.testing.assert_close(rays_o, o)
    torch.testing.assert_close(rays_d, d)
    # row v * 7 + u: pixel (6, 0) is right of the principal point, so its ray turns right (+x cam)
    right = torch.from_numpy(c2w[:3, 0]).float()
    assert (rays_d[6] @ right) > 0 > (rays_d[0] @ right)


def test_composite_background():
    rgb = torch.tensor([[0.2, 0.4, 0.6], [0.9, 0.1, 0.3], [1.0, 1.0, 1.0]])
    alpha = torch.tensor([[1.0], [0.0], [0.25]])
    white = torch.ones(3)
    expected = torch.tensor([[0.2, 0.4, 0.6], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    torch.testing.assert_close(composite_background(rgb, alpha, white), expected)
    per_ray = torch.tensor([[0.0, 0.0, 0.0], [0.5, 0.6, 0.7], [0.0, 0.0, 0.0]])
    expected = torch.tensor([[0.2, 0.4, 0.6], [0.5, 0.6, 0.7], [0.25, 0.25, 0.25]])
    torch.testing.assert_close(composite_background(rgb, alpha, per_ray), expected)


def test_docstring_examples_run():
    result = doctest.testmod(rays_module, verbose=False)
    assert result.attempted >= 1 and result.failed == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_rays_match_cpu():
    frame = Frame("f", Path("f.png"), look_at_c2w(np.array([1.0, 2.0, 3.0]), np.zeros(3)), CAMERA)
    o_cpu, d_cpu = camera_rays_for_image(frame, "cpu")
    o_gpu, d_gpu = camera_rays_for_image(frame, "cuda")
    torch.testing.assert_close(o_gpu.cpu(), o_cpu)
    torch.testing.assert_close(d_gpu.cpu(), d_cpu, atol=1e-6, rtol=0)
