"""The per-image affine colour map: identity at first, per-image rows, and it learns an exposure."""

from __future__ import annotations

import pytest
import torch

from trainer.model.appearance import AffineAppearance


def test_it_starts_as_the_identity_with_one_map_per_image() -> None:
    appearance = AffineAppearance(5)
    assert appearance.matrix.shape == (5, 3, 3) and appearance.offset.shape == (5, 3)
    rgb = torch.rand(40, 3, generator=torch.Generator().manual_seed(0))
    index = torch.arange(40) % 5
    out = appearance(rgb, index)
    assert out.shape == (40, 3) and out.dtype == torch.float32
    assert torch.equal(out, rgb)


def test_each_ray_uses_its_own_image_map_and_only_those_get_gradients() -> None:
    appearance = AffineAppearance(4)
    with torch.no_grad():
        appearance.matrix[2] = torch.diag(torch.tensor([2.0, 3.0, 4.0]))
        appearance.offset[2] = torch.tensor([0.1, 0.2, 0.3])
    rgb = torch.tensor([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
    out = appearance(rgb, torch.tensor([2, 0]))
    assert torch.allclose(out, torch.tensor([[1.1, 1.7, 2.3], [0.5, 0.5, 0.5]]))
    out.sum().backward()
    touched = appearance.matrix.grad.abs().sum(dim=(1, 2)) > 0
    assert touched.tolist() == [True, False, True, False]


def test_it_learns_a_per_image_exposure_and_white_balance() -> None:
    """Targets are the same colours seen through a different gain per image and channel."""
    generator = torch.Generator().manual_seed(1)
    gains = torch.tensor([[0.5, 0.5, 0.5], [1.0, 1.0, 1.0], [1.3, 1.1, 0.8]])
    rgb = torch.rand(3000, 3, generator=generator) * 0.7
    index = torch.randint(0, 3, (3000,), generator=generator)
    target = rgb * gains[index]
    appearance = AffineAppearance(3)
    adam = torch.optim.Adam(appearance.parameters(), lr=1e-2)
    for _ in range(400):
        adam.zero_grad()
        loss = ((appearance(rgb, index) - target) ** 2).mean()
        loss.backward()
        adam.step()
    learnt = torch.diagonal(appearance.matrix.detach(), dim1=1, dim2=2)
    assert torch.allclose(learnt, gains, atol=0.03), learnt
    assert appearance.offset.detach().abs().max() < 0.02


def test_zero_images_is_refused() -> None:
    with pytest.raises(ValueError, match="n_images must be >= 1"):
        AffineAppearance(0)
