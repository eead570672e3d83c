"""Similarity alignment of two sets of camera poses, and the pose errors left after it.

A structure-from-motion reconstruction is defined up to a similarity (rotation, translation,
scale), so recovered cameras are compared with reference cameras after the least-squares
similarity between their centres (Umeyama, *Least-squares estimation of transformation parameters
between two point patterns*, IEEE TPAMI 13(4), 1991, eqs. 40–42).
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["PoseErrors", "Similarity", "pose_errors", "umeyama"]


@dataclasses.dataclass(frozen=True)
class Similarity:
    """``y = scale · rotation · x + translation``.

    Attributes:
        rotation: [3, 3] float64, determinant +1.
        translation: [3] float64.
        scale: float, > 0.
    """

    rotation: np.ndarray
    translation: np.ndarray
    scale: float

    def apply(self, points: np.ndarray) -> np.ndarray:
        """[n, 3] points → [n, 3] transformed points (float64)."""
        return self.scale * np.asarray(points, dtype=np.float64) @ self.rotation.T + self.translation


def umeyama(source: np.ndarray, target: np.ndarray) -> Similarity:
    """The similarity minimising ``Σ |target_i − (s R source_i + t)|²`` (Umeyama 1991).

    With means μ, the covariance ``Σ = (1/n) Σ_i (target_i − μ_t)(source_i − μ_s)ᵀ = U D Vᵀ`` and
    ``S = diag(1, 1, det(U) det(V))``: ``R = U S Vᵀ``, ``s = tr(D S) / σ²_source``,
    ``t = μ_t − s R μ_s``.

    Args:
        source, target: [n, 3] corresponding points, n ≥ 3, not all on one line.

    Raises:
        ValueError: shapes differ, fewer than 3 points, or the source points coincide.
    """
    src = np.asarray(source, dtype=np.float64)
    dst = np.asarray(target, dtype=np.float64)
    if src.shape != dst.shape or src.ndim != 2 or src.shape[1] != 3:
        raise ValueError(f"umeyama: expected two [n, 3] arrays of one shape, got {src.shape} and {dst.shape}")
    if src.shape[0] < 3:
        raise ValueError(f"umeyama: needs at least 3 point pairs, got {src.shape[0]}")
    mean_src, mean_dst = src.mean(axis=0), dst.mean(axis=0)
    centred_src, centred_dst = src - mean_src, dst - mean_dst
    variance_src = float(np.mean(np.sum(centred_src**2, axis=1)))
    if variance_src <= 1e-24:
        raise ValueError("umeyama: the source points coincide (no scale or rotation is defined)")
    covariance = centred_dst.T @ centred_src / src.shape[0]
    u, singular, vt = np.linalg.svd(covariance)
    sign = np.ones(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0.0:
        sign[2] = -1.0
    rotation = (u * sign) @ vt
    scale = float(np.sum(singular * sign)) / variance_src
    return Similarity(rotation=rotation, translation=mean_dst - scale * rotation @ mean_src, scale=scale)


@dataclasses.dataclass(frozen=True)
class PoseErrors:
    """Per-camera errors of recovered poses against reference poses after :func:`umeyama`.

    Attributes:
        rotation_deg: [n] float64, angle of ``R_ref⁻¹ · R_align · R_est`` in degrees.
        position: [n] float64, distance between aligned and reference centres, reference units.
        alignment: the similarity taking recovered centres onto reference centres.
    """

    rotation_deg: np.ndarray
    position: np.ndarray
    alignment: Similarity


def pose_errors(c2w_estimated: np.ndarray, c2w_reference: np.ndarray) -> PoseErrors:
    """Rotation and position errors of ``c2w_estimated`` against ``c2w_reference``.

    Both are camera-to-world [n, 4, 4] (or [n, 3, 4]) with the same camera axes, in worlds that may
    differ by a similarity; row i of both is the same camera. The centres are aligned with
    :func:`umeyama` and the camera rotations are turned by its rotation before they are compared.

    Raises:
        ValueError: shapes differ or fewer than 3 cameras.
    """
    est = np.asarray(c2w_estimated, dtype=np.float64)
    ref = np.asarray(c2w_reference, dtype=np.float64)
    if est.shape[0] != ref.shape[0] or est.shape[1:] not in ((4, 4), (3, 4)) or ref.shape[1:] not in ((4, 4), (3, 4)):
        raise ValueError(f"pose_errors: expected two [n, 4, 4] stacks of one length, got {est.shape} and {ref.shape}")
    alignment = umeyama(est[:, :3, 3], ref[:, :3, 3])
    position = np.linalg.norm(alignment.apply(est[:, :3, 3]) - ref[:, :3, 3], axis=1)
    aligned = np.einsum("ij,njk->nik", alignment.rotation, est[:, :3, :3])
    relative = np.einsum("nji,njk->nik", ref[:, :3, :3], aligned)
    cosine = np.clip((np.trace(relative, axis1=1, axis2=2) - 1.0) / 2.0, -1.0, 1.0)
    return PoseErrors(rotation_deg=np.degrees(np.arccos(cosine)), position=position, alignment=alignment)
