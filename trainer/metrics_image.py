"""Image-quality metrics for evaluation: PSNR and SSIM (pure torch, not differentiable).

Both take colours with data range 1 (values in [0, 1]) and compute in float64.

SSIM follows Wang et al., "Image quality assessment: from error visibility to structural
similarity", IEEE TIP 2004, with the settings the NeRF benchmarks use (mip-NeRF / JaxNeRF
``compute_ssim``; scikit-image ``structural_similarity(..., gaussian_weights=True, sigma=1.5,
use_sample_covariance=False, data_range=1)``): an 11 × 11 Gaussian window with σ = 1.5, K1 = 0.01,
K2 = 0.03, population (not sample) covariances, the SSIM map kept only where the window fits inside
the image ("valid" region), averaged over that region and over channels.

It is written here rather than taken from torchmetrics because torchmetrics'
``structural_similarity_index_measure`` averages its map over a reflection-padded border as well,
which gives a different number from the benchmark definition (0.9443 vs 0.9461 on a 40 × 50 test
image), and importing it adds about 1.6 s.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "affine_colour_psnr",
    "SSIM_K1",
    "SSIM_K2",
    "SSIM_SIGMA",
    "SSIM_WINDOW",
    "gaussian_window_1d",
    "mse_to_psnr",
    "psnr",
    "ssim",
    "ssim_map",
]

SSIM_WINDOW = 11  #: side of the Gaussian window, pixels
SSIM_SIGMA = 1.5  #: standard deviation of the Gaussian window, pixels
SSIM_K1 = 0.01
SSIM_K2 = 0.03


def mse_to_psnr(mse: float | torch.Tensor) -> float | torch.Tensor:
    """PSNR in dB of a mean squared error for data range 1: ``−10 · log10(mse)``.

    Args:
        mse: mean squared error ≥ 0, a Python float or a tensor of any shape.

    Returns:
        A float (for a float) or a tensor of the same shape (for a tensor); ``inf`` where mse is 0.

    Raises:
        ValueError: if an mse is negative or NaN.
    """
    if isinstance(mse, torch.Tensor):
        if bool(torch.isnan(mse).any()) or bool((mse < 0).any()):
            raise ValueError(f"mse_to_psnr: expected mse >= 0, got {mse}")
        return -10.0 * torch.log10(mse)
    mse = float(mse)
    if not mse >= 0.0:
        raise ValueError(f"mse_to_psnr: expected mse >= 0, got {mse!r}")
    return math.inf if mse == 0.0 else -10.0 * math.log10(mse)


def psnr(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Peak signal-to-noise ratio in dB over all pixels and channels, data range 1.

    ``PSNR = −10 · log10(mean((pred − target)²))``; values are not clamped.

    Args:
        pred, target: [..., 3] (any matching shape) floating-point colours in [0, 1].

    Returns:
        PSNR in dB as a Python float; ``inf`` for identical images.

    Raises:
        ValueError: if the shapes differ or the tensors are empty.
    """
    _check_pair("psnr", pred, target)
    mse = torch.mean((pred.double() - target.double()) ** 2).item()
    return mse_to_psnr(mse)  # type: ignore[return-value]


def affine_colour_psnr(pred: torch.Tensor, target: torch.Tensor) -> float:
    """PSNR after the best affine colour map of ``pred`` onto ``target``: the evaluation of held-out
    views of a model trained with a per-image appearance (:mod:`trainer.model.appearance`).

    The map ``target ≈ M · pred + b`` (``M`` [3, 3], ``b`` [3]) is fitted by least squares over
    every pixel of the view, then PSNR is taken of the mapped prediction clamped to [0, 1]. A
    held-out view has no learnt appearance of its own; this removes any exposure and white-balance
    difference and keeps every other error (12 numbers against thousands of pixels: the fit cannot
    explain detail). Always >= :func:`psnr` up to the clamping, since the identity is one of the maps.

    Args:
        pred, target: [..., 3] floating-point colours in [0, 1], at least 4 pixels.

    Returns:
        PSNR in dB as a Python float.

    Raises:
        ValueError: if the shapes differ, are not [..., 3] or hold fewer than 4 pixels.
    """
    _check_pair("affine_colour_psnr", pred, target)
    x = pred.detach().double().reshape(-1, pred.shape[-1])
    y = target.detach().double().reshape(-1, target.shape[-1]).to(x.device)
    if x.shape[1] != 3 or x.shape[0] < 4:
        raise ValueError(f"affine_colour_psnr: expected [..., 3] colours of at least 4 pixels, got {tuple(pred.shape)}")
    design = torch.cat([x, torch.ones_like(x[:, :1])], dim=1)  # [P, 4]
    # the normal equations (4 × 4, float64); lstsq copes with a rank-deficient view (one colour)
    gram, moment = (design.T @ design).cpu(), (design.T @ y).cpu()
    solution = torch.linalg.lstsq(gram, moment, driver="gelsd").solution.to(x.device)  # [4, 3]
    mapped = (design @ solution).clamp(0.0, 1.0)
    return mse_to_psnr(torch.mean((mapped - y) ** 2).item())  # type: ignore[return-value]


def gaussian_window_1d(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> torch.Tensor:
    """[size] float64 normalised Gaussian ``exp(−k² / 2σ²)``, ``k = −(size−1)/2 … (size−1)/2``."""
    assert size % 2 == 1, f"window size must be odd, got {size}"
    k = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(k**2) / (2.0 * sigma**2))
    return g / g.sum()


def ssim_map(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-pixel SSIM over the valid region (Wang et al. 2004, eq. 13 with Gaussian weighting).

    ``SSIM = (2 μx μy + C1)(2 σxy + C2) / ((μx² + μy² + C1)(σx² + σy² + C2))`` with
    ``C1 = (K1·1)²``, ``C2 = (K2·1)²`` and local moments from the separable Gaussian window.

    Args:
        pred, target: [H, W, C] floating-point images in [0, 1], H and W ≥ 11.

    Returns:
        [H − 10, W − 10, C] float64 map; pixel (i, j) is the window centred on (i + 5, j + 5).

    Raises:
        ValueError: if the shapes differ, are not [H, W, C], or are smaller than the window.
    """
    _check_pair("ssim", pred, target)
    if pred.ndim != 3 or pred.shape[0] < SSIM_WINDOW or pred.shape[1] < SSIM_WINDOW:
        raise ValueError(
            f"ssim: expected [H, W, C] images with H, W >= {SSIM_WINDOW}, got {tuple(pred.shape)}"
        )
    x = pred.detach().double().permute(2, 0, 1).unsqueeze(1)  # [C, 1, H, W]: channels as batch
    y = target.detach().double().permute(2, 0, 1).unsqueeze(1).to(x.device)
    g = gaussian_window_1d().to(x.device)
    kernel_v, kernel_h = g.view(1, 1, -1, 1), g.view(1, 1, 1, -1)

    def blur(img: torch.Tensor) -> torch.Tensor:  # separable Gaussian, "valid" region only
        return F.conv2d(F.conv2d(img, kernel_v), kernel_h)

    moments = blur(torch.cat([x, y, x * x, y * y, x * y]))  # [5·C, 1, H−10, W−10]
    mu_x, mu_y, e_xx, e_yy, e_xy = moments.split(x.shape[0])
    var_x = e_xx - mu_x * mu_x
    var_y = e_yy - mu_y * mu_y
    cov_xy = e_xy - mu_x * mu_y
    c1, c2 = SSIM_K1**2, SSIM_K2**2
    s = ((2 * mu_x * mu_y + c1) * (2 * cov_xy + c2)) / (
        (mu_x * mu_x + mu_y * mu_y + c1) * (var_x + var_y + c2)
    )
    return s.squeeze(1).permute(1, 2, 0)


def ssim(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Mean structural similarity of two images (the NeRF benchmark SSIM; see module docstring).

    Args:
        pred, target: [H, W, 3] (any channel count C) floating-point images in [0, 1], H, W ≥ 11.

    Returns:
        SSIM in [−1, 1] as a Python float, 1 for identical images: the mean of :func:`ssim_map`
        over the valid region and the channels.

    Raises:
        ValueError: if the shapes differ, are not [H, W, C], or are smaller than the window.
    """
    return ssim_map(pred, target).mean().item()


def _check_pair(name: str, pred: torch.Tensor, target: torch.Tensor) -> None:
    if pred.shape != target.shape:
        raise ValueError(
            f"{name}: pred and target shapes differ: {tuple(pred.shape)} vs {tuple(target.shape)}"
        )
    if pred.numel() == 0:
        raise ValueError(f"{name}: empty images of shape {tuple(pred.shape)}")
    if not (pred.is_floating_point() and target.is_floating_point()):
        raise ValueError(
            f"{name}: expected floating-point images in [0, 1], got {pred.dtype}, {target.dtype}"
        )
