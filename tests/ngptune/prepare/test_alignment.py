"""Umeyama's similarity recovers a known one exactly, and pose errors measure what was perturbed."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from ngptune.prepare.alignment import pose_errors, umeyama


def test_umeyama_recovers_a_known_similarity() -> None:
    rng = np.random.default_rng(3)
    source = rng.normal(size=(12, 3))
    rotation = Rotation.from_rotvec([0.3, -1.2, 2.0]).as_matrix()
    target = 2.5 * source @ rotation.T + np.array([1.0, -4.0, 0.5])
    found = umeyama(source, target)
    np.testing.assert_allclose(found.rotation, rotation, atol=1e-12)
    assert found.scale == pytest.approx(2.5, rel=1e-12)
    np.testing.assert_allclose(found.translation, [1.0, -4.0, 0.5], atol=1e-12)
    np.testing.assert_allclose(found.apply(source), target, atol=1e-12)


def test_umeyama_returns_a_rotation_for_planar_points_not_a_mirror() -> None:
    """Coplanar points (a ring of cameras) leave the SVD a free sign; the result is still a rotation."""
    angles = np.linspace(0, 2 * np.pi, 9)[:-1]
    source = np.stack([np.cos(angles), np.sin(angles), np.zeros_like(angles)], axis=1)
    rotation = Rotation.from_rotvec([0.0, 0.0, 0.7]).as_matrix()
    found = umeyama(source, 3.0 * source @ rotation.T)
    assert np.linalg.det(found.rotation) == pytest.approx(1.0)
    np.testing.assert_allclose(found.apply(source), 3.0 * source @ rotation.T, atol=1e-12)


def test_umeyama_refuses_too_few_or_coincident_points() -> None:
    with pytest.raises(ValueError, match="at least 3"):
        umeyama(np.zeros((2, 3)), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="coincide"):
        umeyama(np.ones((4, 3)), np.zeros((4, 3)))


def test_pose_errors_measure_a_perturbed_camera_after_the_alignment() -> None:
    rng = np.random.default_rng(0)
    reference = np.tile(np.eye(4), (6, 1, 1))
    reference[:, :3, :3] = Rotation.random(6, random_state=1).as_matrix()
    reference[:, :3, 3] = rng.normal(size=(6, 3)) * 4.0
    similarity = Rotation.from_rotvec([0.5, 0.1, -0.4]).as_matrix()
    estimated = reference.copy()
    estimated[:, :3, :3] = np.einsum("ij,njk->nik", similarity.T, reference[:, :3, :3])
    estimated[:, :3, 3] = 0.2 * (reference[:, :3, 3] - 1.0) @ similarity  # scale 0.2, rotated back, shifted
    estimated[2, :3, :3] = estimated[2, :3, :3] @ Rotation.from_rotvec([0.0, np.radians(1.5), 0.0]).as_matrix()
    errors = pose_errors(estimated, reference)
    assert errors.alignment.scale == pytest.approx(5.0)
    np.testing.assert_allclose(errors.position, 0.0, atol=1e-9)
    np.testing.assert_allclose(np.delete(errors.rotation_deg, 2), 0.0, atol=1e-5)
    assert errors.rotation_deg[2] == pytest.approx(1.5, abs=1e-6)
