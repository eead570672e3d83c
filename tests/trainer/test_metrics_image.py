"""PSNR and SSIM against hand-computed values, a slow twin and scikit-image's reference SSIM."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trainer.metrics_image import (
    SSIM_K1,
    SSIM_K2,
    SSIM_SIGMA,
    SSIM_WINDOW,
    affine_colour_psnr,
    gaussian_window_1d,
    mse_to_psnr,
    psnr,
    ssim,
    ssim_map,
)

C1, C2 = SSIM_K1**2, SSIM_K2**2


def _smooth_pair(height: int = 24, width: int = 31) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic [H, W, 3] float64 image pair made from sines (no RNG)."""
    i = torch.arange(height, dtype=torch.float64)[:, None, None]
    j = torch.arange(width, dtype=torch.float64)[None, :, None]
    c = torch.arange(3, dtype=torch.float64)[None, None, :]
    target = 0.5 + 0.4 * torch.sin(0.37 * i + 0.23 * j + c)
    pred = (target + 0.15 * torch.cos(0.05 * i * j + 1.3 * c)).clamp(0, 1)
    return pred, target


# ----------------------------------------------------------------------------------- PSNR


def test_mse_to_psnr_hand_values() -> None:
    assert mse_to_psnr(1e-3) == pytest.approx(30.0, abs=1e-12)
    assert mse_to_psnr(0.01) == pytest.approx(20.0, abs=1e-12)
    assert mse_to_psnr(1.0) == 0.0
    assert mse_to_psnr(0.0) == math.inf
    as_tensor = mse_to_psnr(torch.tensor([1e-2, 1e-4, 0.0], dtype=torch.float64))
    assert isinstance(as_tensor, torch.Tensor)
    assert torch.equal(as_tensor, torch.tensor([20.0, 40.0, math.inf], dtype=torch.float64))


@pytest.mark.parametrize("bad", [-1e-3, float("nan"), torch.tensor([0.1, -0.1])])
def test_mse_to_psnr_rejects_negative_or_nan(bad: object) -> None:
    with pytest.raises(ValueError, match="mse >= 0"):
        mse_to_psnr(bad)  # type: ignore[arg-type]


def test_psnr_hand_values() -> None:
    target = torch.full((4, 5, 3), 0.1)
    assert psnr(torch.zeros(4, 5, 3), target) == pytest.approx(20.0, abs=1e-6)  # MSE 0.01
    # Half the pixels off by 0.2 in every channel: MSE = 0.5 · 0.04 = 0.02.
    pred = target.clone()
    pred[:2] += 0.2
    assert psnr(pred, target) == pytest.approx(-10 * math.log10(0.02), abs=1e-6)
    # Flat [n_rays, 3] batches work the same way.
    assert psnr(pred.reshape(-1, 3), target.reshape(-1, 3)) == pytest.approx(16.9897000, abs=1e-6)
    assert psnr(target, target) == math.inf


def test_psnr_rejects_mismatched_or_empty() -> None:
    message = r"psnr: pred and target shapes differ: \(2, 3\) vs \(3, 3\)"
    with pytest.raises(ValueError, match=message):
        psnr(torch.zeros(2, 3), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="empty"):
        psnr(torch.zeros(0, 3), torch.zeros(0, 3))


# ----------------------------------------------------------------------------------- SSIM


def test_gaussian_window() -> None:
    g = gaussian_window_1d()
    assert g.shape == (SSIM_WINDOW,)
    assert g.sum().item() == pytest.approx(1.0, abs=1e-15)
    raw = [math.exp(-(k**2) / (2 * SSIM_SIGMA**2)) for k in range(-5, 6)]
    assert g.tolist() == pytest.approx([v / sum(raw) for v in raw], abs=1e-15)


def test_ssim_identical_images_is_one() -> None:
    _, target = _smooth_pair()
    assert ssim(target, target) == pytest.approx(1.0, abs=1e-12)
    assert ssim(target.float(), target.float()) == pytest.approx(1.0, abs=1e-6)


def test_ssim_constant_images_luminance_formula() -> None:
    # Constant images: σ = 0 so SSIM = (2ab + C1) / (a² + b² + C1) at every pixel.
    a, b = 0.25, 0.75
    got = ssim(torch.full((16, 20, 3), a), torch.full((16, 20, 3), b))
    assert got == pytest.approx((2 * a * b + C1) / (a * a + b * b + C1), abs=1e-7)


def test_ssim_ramp_against_mirrored_ramp_closed_form() -> None:
    # x = p + q·j (ramp along width), y = m − x. Within a Gaussian window the local mean of x is its
    # value at the centre, σx² = σy² = q²·s² with s² = Σ g_k k², and σxy = −q²·s².
    height, width, p, q, m = 13, 20, 0.2, 0.03, 1.1
    x = (p + q * torch.arange(width, dtype=torch.float64)).expand(height, width)
    x = x[..., None].expand(height, width, 3)
    y = m - x
    g = gaussian_window_1d().tolist()
    s2 = sum(gk * (k - 5) ** 2 for k, gk in enumerate(g))
    var = q * q * s2
    expected = []
    for centre in range(5, width - 5):
        mu_x = p + q * centre
        mu_y = m - mu_x
        lum = (2 * mu_x * mu_y + C1) / (mu_x**2 + mu_y**2 + C1)
        expected.append(lum * (-2 * var + C2) / (2 * var + C2))
    got_map = ssim_map(y, x)
    assert got_map.shape == (height - 10, width - 10, 3)
    assert got_map[0, :, 0].tolist() == pytest.approx(expected, abs=1e-12)
    assert ssim(y, x) == pytest.approx(sum(expected) / len(expected), abs=1e-12)


def _ssim_slow(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Slow twin: explicit weighted moments over every 11 × 11 window (unfold), per channel."""
    w2d = torch.outer(gaussian_window_1d(), gaussian_window_1d()).reshape(-1, 1)  # [121, 1]
    scores = []
    for ch in range(pred.shape[2]):
        patches_x = F.unfold(pred[None, None, :, :, ch].double(), SSIM_WINDOW)[0]  # [121, L]
        patches_y = F.unfold(target[None, None, :, :, ch].double(), SSIM_WINDOW)[0]
        mu_x = (w2d * patches_x).sum(0)
        mu_y = (w2d * patches_y).sum(0)
        var_x = (w2d * (patches_x - mu_x) ** 2).sum(0)
        var_y = (w2d * (patches_y - mu_y) ** 2).sum(0)
        cov = (w2d * (patches_x - mu_x) * (patches_y - mu_y)).sum(0)
        luminance = (2 * mu_x * mu_y + C1) / (mu_x**2 + mu_y**2 + C1)
        s = luminance * (2 * cov + C2) / (var_x + var_y + C2)
        scores.append(s)
    return torch.cat(scores).mean().item()


@pytest.mark.parametrize("shape", [(11, 11, 3), (23, 40, 3), (32, 17, 1)])
def test_ssim_matches_slow_twin_on_random_images(shape: tuple[int, int, int]) -> None:
    gen = torch.Generator().manual_seed(sum(shape))
    target = torch.rand(shape, generator=gen, dtype=torch.float64)
    pred = (target + 0.2 * torch.randn(shape, generator=gen, dtype=torch.float64)).clamp(0, 1)
    got = ssim(pred, target)
    assert got == pytest.approx(_ssim_slow(pred, target), abs=1e-12)
    assert got == pytest.approx(ssim(target, pred), abs=1e-12)  # symmetric
    assert -1.0 <= got < 0.999


def test_ssim_golden_value_from_scikit_image() -> None:
    # scikit-image 0.26.0 structural_similarity(pred, target, channel_axis=-1,
    # gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1)
    # on this pair gave 0.8239841332368032.
    pred, target = _smooth_pair()
    assert ssim(pred, target) == pytest.approx(0.8239841332368032, abs=1e-12)
    assert ssim(pred.float(), target.float()) == pytest.approx(0.8239841332368032, abs=1e-6)


def test_ssim_rejects_bad_shapes() -> None:
    message = r"ssim: expected \[H, W, C\] images with H, W >= 11, got \(10, 20, 3\)"
    with pytest.raises(ValueError, match=message):
        ssim(torch.zeros(10, 20, 3), torch.zeros(10, 20, 3))
    with pytest.raises(ValueError, match="shapes differ"):
        ssim(torch.zeros(12, 12, 3), torch.zeros(12, 13, 3))
    with pytest.raises(ValueError, match=r"got \(144, 3\)"):
        ssim(torch.zeros(144, 3), torch.zeros(144, 3))


def test_affine_colour_psnr_undoes_exposure_and_white_balance_only() -> None:
    generator = torch.Generator().manual_seed(0)
    target = torch.rand(24, 32, 3, generator=generator) * 0.8 + 0.1
    exposed = target * torch.tensor([0.6, 0.7, 0.8]) + 0.02  # another exposure and white balance
    assert psnr(exposed, target) < 20.0
    assert affine_colour_psnr(exposed, target) > 80.0  # the map undoes it exactly
    noisy = (target + 0.05 * torch.randn(24, 32, 3, generator=generator)).clamp(0, 1)
    # noise is not a colour map: the fit gains a fraction of a dB (12 numbers, 768 pixels)
    assert psnr(noisy, target) <= affine_colour_psnr(noisy, target) < psnr(noisy, target) + 0.5
    flat = torch.full((8, 8, 3), 0.5)  # one colour: the fit is the view's mean colour
    expected = psnr(target[:8, :8].mean(dim=(0, 1)).expand(8, 8, 3), target[:8, :8])
    assert affine_colour_psnr(flat, target[:8, :8]) == pytest.approx(expected, abs=1e-6)


def test_affine_colour_psnr_rejects_too_few_pixels_or_other_channels() -> None:
    with pytest.raises(ValueError, match="at least 4 pixels"):
        affine_colour_psnr(torch.zeros(1, 3, 3), torch.zeros(1, 3, 3))
    with pytest.raises(ValueError, match=r"\[\.\.\., 3\]"):
        affine_colour_psnr(torch.zeros(4, 4, 4), torch.zeros(4, 4, 4))
