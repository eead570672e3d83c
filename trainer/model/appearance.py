"""Per-image appearance: an affine colour map for each training image (``training.appearance``).

Photos of a real capture differ in exposure and white balance (auto exposure, clouds passing);
a field that must reproduce every one of them puts the differences into view-dependent colour or
floaters. With ``training.appearance = "affine"`` a training ray of image ``i`` is compared with
its pixel after ``rgb' = M_i · rgb + b_i``, with ``M_i`` [3, 3] (per-channel gain and cross-talk: white
balance, exposure) and ``b_i`` [3] (black level) learnt per image, starting from the identity. The
field then learns one appearance shared by all images; renders of new views and of held-out views
show it (no held-out view has an ``M_i``), and evaluation reports, beside plain PSNR, the PSNR after
the best affine colour map of each held-out view (:func:`trainer.metrics_image.affine_colour_psnr`).

The map is applied to the ray's colour over its background, the camera's response to what reached
it: on captures without alpha that is the photograph. Per-image latent codes fed to the colour MLP
(NeRF in the Wild, Martin-Brualla et al. 2021; nerfstudio's ``appearance_embedding``) can also
model local changes; the affine map keeps the field's network as it is and is what "affine colour
per image" evaluation undoes exactly (12 numbers per image, cf. Mildenhall et al. 2022, *NeRF in the
Dark*, per-image exposure scaling).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["AffineAppearance"]


class AffineAppearance(nn.Module):
    """``rgb' = M_i rgb + b_i`` per training image ``i`` (module docstring).

    Args:
        n_images: training images (rows of the parameters), >= 1.
        device: where the parameters live.

    Attributes:
        matrix: [n_images, 3, 3] float32, initialised to the identity.
        offset: [n_images, 3] float32, initialised to zero.
    """

    def __init__(self, n_images: int, device: torch.device | str | None = None) -> None:
        super().__init__()
        if n_images < 1:
            raise ValueError(f"AffineAppearance: n_images must be >= 1, got {n_images}")
        self.matrix = nn.Parameter(torch.eye(3, device=device).repeat(n_images, 1, 1))
        self.offset = nn.Parameter(torch.zeros(n_images, 3, device=device))

    @property
    def n_images(self) -> int:
        return self.matrix.shape[0]

    def forward(self, rgb: torch.Tensor, image_index: torch.Tensor) -> torch.Tensor:
        """Colours as image ``image_index`` records them.

        Args:
            rgb: [n, 3] float ray colours (over their background).
            image_index: [n] int64, each ray's training image, in [0, n_images).

        Returns:
            [n, 3] float32 (not clamped: the loss compares it with the pixel).
        """
        return torch.einsum("nij,nj->ni", self.matrix[image_index], rgb.float()) + self.offset[image_index]
