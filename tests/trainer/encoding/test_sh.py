"""Spherical-harmonics encoding: hand values, exact orthonormality, an independent general formula."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from trainer.encoding.sh import SH_OUTPUT_DIM, sh_encode

C0 = 1 / (2 * math.sqrt(math.pi))  # Y_0^0
C1 = math.sqrt(3) / (2 * math.sqrt(math.pi))


def real_sh_general(l: int, m: int, x: float, y: float, z: float) -> float:
    """Real orthonormal Y_l^m with the Condon–Shortley phase, from associated Legendre functions
    (standard recurrences) — written independently of the polynomial table under test."""
    am = abs(m)
    cos_t = z
    sin_t = math.sqrt(max(0.0, 1 - z * z))
    phi = math.atan2(y, x)
    # P_am^am = (−1)^am (2am − 1)!! sin^am θ, then upward in l
    p_mm = (-1) ** am * math.prod(range(1, 2 * am, 2)) * sin_t**am
    if l == am:
        p = p_mm
    else:
        p_prev, p = p_mm, (2 * am + 1) * cos_t * p_mm
        for ll in range(am + 2, l + 1):
            p_prev, p = p, ((2 * ll - 1) * cos_t * p - (ll + am - 1) * p_prev) / (ll - am)
    k = math.sqrt((2 * l + 1) / (4 * math.pi) * math.factorial(l - am) / math.factorial(l + am))
    if m > 0:
        return math.sqrt(2) * k * p * math.cos(am * phi)
    if m < 0:
        return math.sqrt(2) * k * p * math.sin(am * phi)
    return k * p


def test_shape_and_dtype():
    d = torch.nn.functional.normalize(torch.randn(7, 3), dim=1)
    assert SH_OUTPUT_DIM == 16
    assert sh_encode(d).shape == (7, 16) and sh_encode(d).dtype == torch.float32
    assert sh_encode(d.double()).dtype == torch.float64


def test_hand_values_on_the_axes():
    axes = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], dtype=torch.float64)
    out = sh_encode(axes)
    expected_z = [0.0] * 16
    expected_z[0] = C0
    expected_z[2] = C1  # Y_1^0 = √3 z / (2√π)
    expected_z[6] = math.sqrt(5) / (2 * math.sqrt(math.pi))  # √5 (3 − 1) / (4√π)
    expected_z[12] = math.sqrt(7) / (2 * math.sqrt(math.pi))  # √7 (5 − 3) / (4√π)
    assert out[0].tolist() == pytest.approx(expected_z, abs=1e-12)

    expected_x = [0.0] * 16
    expected_x[0] = C0
    expected_x[3] = -C1  # Condon–Shortley: Y_1^1 = −√3 x / (2√π)
    expected_x[6] = -math.sqrt(5) / (4 * math.sqrt(math.pi))
    expected_x[8] = math.sqrt(15) / (4 * math.sqrt(math.pi))
    expected_x[13] = math.sqrt(42) / (8 * math.sqrt(math.pi))
    expected_x[15] = -math.sqrt(70) / (8 * math.sqrt(math.pi))
    assert out[1].tolist() == pytest.approx(expected_x, abs=1e-12)

    expected_y = [0.0] * 16
    expected_y[0] = C0
    expected_y[1] = -C1
    expected_y[6] = -math.sqrt(5) / (4 * math.sqrt(math.pi))
    expected_y[8] = -math.sqrt(15) / (4 * math.sqrt(math.pi))
    expected_y[9] = math.sqrt(70) / (8 * math.sqrt(math.pi))
    expected_y[11] = math.sqrt(42) / (8 * math.sqrt(math.pi))
    assert out[2].tolist() == pytest.approx(expected_y, abs=1e-12)


def test_matches_general_legendre_formula():
    torch.manual_seed(0)
    dirs = torch.nn.functional.normalize(torch.randn(20, 3, dtype=torch.float64), dim=1)
    out = sh_encode(dirs)
    for i, (x, y, z) in enumerate(dirs.tolist()):
        expected = [real_sh_general(l, m, x, y, z) for l in range(4) for m in range(-l, l + 1)]
        assert out[i].tolist() == pytest.approx(expected, abs=1e-12)


def test_orthonormal_on_the_sphere():
    # Gauss–Legendre in z (8 nodes) × 16 uniform azimuths integrates the products of two band-≤3
    # harmonics exactly, so ∫ Y_i Y_j dΩ must be the identity to rounding.
    z_nodes, z_weights = np.polynomial.legendre.leggauss(8)
    n_phi = 16
    phi = 2 * np.pi * np.arange(n_phi) / n_phi
    z = np.repeat(z_nodes, n_phi)
    r = np.sqrt(1 - z * z)
    dirs = np.stack([r * np.cos(np.tile(phi, 8)), r * np.sin(np.tile(phi, 8)), z], axis=1)
    weights = np.repeat(z_weights, n_phi) * (2 * np.pi / n_phi)
    y = sh_encode(torch.from_numpy(dirs))
    gram = y.T @ (y * torch.from_numpy(weights)[:, None])
    assert torch.allclose(gram, torch.eye(16, dtype=torch.float64), atol=1e-12)


def test_gradcheck():
    d = torch.nn.functional.normalize(torch.randn(4, 3, dtype=torch.float64), dim=1).requires_grad_(True)
    assert torch.autograd.gradcheck(sh_encode, (d,), fast_mode=True)


@pytest.mark.parametrize("degree", [1, 2, 3])
def test_lower_degrees_are_the_leading_bands(degree):
    # tiny-cuda-nn's degree d keeps bands 0..d−1: the first d² coefficients, checked against the
    # independent Legendre formula band by band.
    dirs = torch.nn.functional.normalize(torch.randn(9, 3, dtype=torch.float64), dim=1)
    out = sh_encode(dirs, degree)
    assert out.shape == (9, degree * degree)
    for i, (x, y, z) in enumerate(dirs.tolist()):
        expected = [real_sh_general(l, m, x, y, z) for l in range(degree) for m in range(-l, l + 1)]
        assert out[i].tolist() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("degree", [0, 5, 2.0, True])
def test_degree_outside_1_to_4_is_refused(degree):
    with pytest.raises(ValueError, match=r"degree must be an int in 1\.\.4, got"):
        sh_encode(torch.zeros(1, 3), degree)
