"""The instant-NGP radiance field: hash grid → density MLP → colour MLP (DESIGN.md §2).

Source: Müller et al., SIGGRAPH 2022, §5.4 (NeRF) and instant-ngp ``nerf_network.h``; the
density activation ``trunc_exp`` follows torch-ngp (``activation.py``).

    positions ──(contraction, unbounded model only)──(AABB → [0,1]³)── hash grid [L·F] ── density MLP ── h [16]
        σ = trunc_exp(h₀)
        rgb = sigmoid(colour MLP([h₁..h₁₅, SH_d²(direction)]))   (d = SH degree, 4 by default)
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from trainer.encoding.backends import HashGridEncoding
from trainer.encoding.hashgrid import HashGridConfig
from trainer.encoding.sh import SH_MAX_DEGREE, sh_encode, sh_output_dim
from trainer.contract.errors import ConfigError
from trainer.model.appearance import AffineAppearance
from trainer.model.mlp import MLP, MLPConfig
from trainer.render.contraction import SceneContraction

__all__ = ["DENSITY_OUTPUT_DIM", "MLPConfig", "NGPField", "trunc_exp"]

DENSITY_OUTPUT_DIM = 16  # 1 density logit + 15 geometry features
_TRUNC_EXP_GRAD_MAX = 15.0


class _TruncExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return grad_output * torch.exp(x.clamp(max=_TRUNC_EXP_GRAD_MAX))


def trunc_exp(x: torch.Tensor) -> torch.Tensor:
    """``exp(x)`` whose gradient is ``exp(min(x, 15))`` (torch-ngp ``trunc_exp``).

    Keeps the density activation's gradient finite for large logits. Use float32 inputs: in
    float16 ``exp`` overflows above ~11.

    Args:
        x: any shape, floating.

    Returns:
        ``exp(x)``, same shape and dtype.
    """
    return _TruncExp.apply(x)


@functools.lru_cache(maxsize=None)
def _triton_sh():
    """:func:`trainer.encoding.triton_sh.sh_encode_triton`, or None without Triton."""
    try:
        from trainer.encoding.triton_sh import sh_encode_triton
    except ImportError:
        return None
    return sh_encode_triton


def _encode_directions(directions: torch.Tensor, degree: int = SH_MAX_DEGREE) -> torch.Tensor:
    """SH of float32 directions [S, 3] → [S, degree²]: the one-launch Triton kernel on CUDA when no
    gradient is wanted (bitwise the reference's values; it writes all 16 and lower degrees take the
    leading columns), else :func:`sh_encode`."""
    if directions.is_cuda and not directions.requires_grad and _triton_sh() is not None:
        return _triton_sh()(directions)[:, : sh_output_dim(degree)]
    return sh_encode(directions, degree)


@functools.lru_cache(maxsize=None)
def _triton_mlp():
    """:mod:`trainer.model.triton_mlp`, or None without Triton."""
    try:
        from trainer.model import triton_mlp
    except ImportError:
        return None
    return triton_mlp


def _check_aabb(aabb: torch.Tensor) -> torch.Tensor:
    if not isinstance(aabb, torch.Tensor):
        aabb = torch.as_tensor(aabb)
    if aabb.shape != (2, 3) or not aabb.is_floating_point():
        raise ConfigError(
            f"aabb: expected a [2, 3] floating tensor (min corner, max corner), "
            f"got shape {tuple(aabb.shape)} dtype {aabb.dtype}"
        )
    if not bool(torch.isfinite(aabb).all()) or not bool((aabb[1] > aabb[0]).all()):
        raise ConfigError(f"aabb: expected finite corners with max > min, got {aabb.tolist()}")
    return aabb


class NGPField(nn.Module):
    """instant-NGP field mapping world positions and view directions to density and colour.

    Args:
        aabb: [2, 3] floating (min corner, max corner), world units: the box mapped to [0, 1]³ for
            the hash grid (with ``contraction``, its contracted cube). Its device is where every
            parameter is created.
        grid_cfg: hash-grid layout.
        density_net: density MLP, L·F → 16 (default 64 wide, 1 hidden layer).
        rgb_net: colour MLP, 15 + sh_degree² → 3 (default 64 wide, 2 hidden layers).
        backend: hash-grid backend name (see :func:`trainer.encoding.backends.get_backend`).
        table_dtype: storage dtype of the hash table.
        sh_degree: bands of the view-direction encoding, 1..4 (tiny-cuda-nn's ``degree``; 1 makes
            the colour independent of the view direction).
        fused_mlp: run both MLPs (and the density MLP of :meth:`density` without gradient) in the
            fused Triton kernels of :mod:`trainer.model.triton_mlp` where they apply (float32
            without autocast, instant-ngp's MLP shapes; the caller checks that Triton can run on
            the device, and :func:`~trainer.model.triton_mlp.fused_kernels_problem` that they fit
            it: where not, :attr:`fused_mlp_problem` says why); elsewhere the PyTorch path, their twin.
        mlp_precision: the fused kernels' product precision, ``"ieee"`` (float32), ``"tf32"`` or
            ``"bf16"`` (:data:`trainer.model.triton_mlp.DOT_PRECISIONS`); with ``"bf16"`` the fused
            path also runs under bfloat16 autocast (it casts the products' inputs itself).
        n_appearance_images: > 0 adds :attr:`appearance`, an affine colour map per training
            image (``training.appearance``, :mod:`trainer.model.appearance`); the trainer applies
            it to ray colours, the field's outputs do not depend on it.
        contraction: the unbounded scene model's contraction
            (:class:`~trainer.render.contraction.SceneContraction`): positions are contracted
            before they are mapped into ``aabb``, so the field covers all of space; None (the box
            model) clamps positions outside ``aabb`` onto it.

    Each MLP's ``output_activation`` (default "None") is applied before the fixed ``trunc_exp``
    (density) and sigmoid (colour).

    Raises:
        ConfigError: for a malformed ``aabb``, an unusable backend (``encoding.backend``) or an SH
            degree outside 1..4 (``dir_encoding.degree``).
    """

    def __init__(
        self,
        aabb: torch.Tensor,
        grid_cfg: HashGridConfig | None = None,
        density_net: MLPConfig | None = None,
        rgb_net: MLPConfig | None = None,
        backend: str = "auto",
        table_dtype: torch.dtype = torch.float32,
        sh_degree: int = SH_MAX_DEGREE,
        fused_mlp: bool = False,
        mlp_precision: str = "ieee",
        n_appearance_images: int = 0,
        contraction: SceneContraction | None = None,
    ) -> None:
        super().__init__()
        aabb = _check_aabb(aabb)
        self.contraction = contraction
        try:
            n_sh = sh_output_dim(sh_degree)
        except ValueError as error:
            raise ConfigError(f"dir_encoding.degree: {error}") from None
        self.sh_degree = sh_degree
        grid_cfg = grid_cfg if grid_cfg is not None else HashGridConfig()
        density_net = density_net if density_net is not None else MLPConfig(n_hidden_layers=1)
        rgb_net = rgb_net if rgb_net is not None else MLPConfig(n_hidden_layers=2)
        device = aabb.device
        self.register_buffer("aabb", aabb.to(torch.float32))
        self.encoding = HashGridEncoding(grid_cfg, backend, table_dtype, device)
        self.density_mlp = MLP(self.encoding.output_dim, DENSITY_OUTPUT_DIM, density_net, device)
        self.rgb_mlp = MLP(DENSITY_OUTPUT_DIM - 1 + n_sh, 3, rgb_net, device)
        self.appearance = AffineAppearance(n_appearance_images, device) if n_appearance_images > 0 else None
        activations = (density_net.activation, density_net.output_activation, rgb_net.activation,
                       rgb_net.output_activation)
        self.mlp_precision = mlp_precision
        self.fused_mlp = (
            fused_mlp
            and _triton_mlp() is not None
            and _triton_mlp().fused_head_supported(self.density_mlp.weights(), self.rgb_mlp.weights(), activations)
        )
        self.fused_mlp_problem: str | None = None
        if self.fused_mlp:  # shapes the kernels take may still not fit the GPU's shared memory
            self.fused_mlp_problem = _triton_mlp().fused_kernels_problem(
                self.density_mlp.weights(), self.rgb_mlp.weights(), mlp_precision, self.reference_heads)
            self.fused_mlp = self.fused_mlp_problem is None

    def normalise_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """World positions [S, 3] → [S, 3] float32 in [0, 1]³: contracted first with the unbounded
        model's contraction; points outside the AABB are clamped onto its surface (they take the
        features of the nearest boundary point)."""
        lo, hi = self.aabb[0], self.aabb[1]
        positions = positions.float()
        if self.contraction is not None:
            positions = self.contraction.contract(positions)
        return ((positions - lo) / (hi - lo)).clamp(0.0, 1.0)

    def _density_head(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """σ [S] float32 and the 15 geometry features [S, 15] from hash-grid features [S, L·F]."""
        h = self.density_mlp(features)  # [S, 16], autocast dtype
        sigma = trunc_exp(h[:, 0].float())
        return sigma, h[:, 1:]

    def density(self, positions: torch.Tensor, count: torch.Tensor | None = None) -> torch.Tensor:
        """Density at world positions (what the occupancy-grid update and compaction query).

        Args:
            positions: [S, 3] floating, world units.
            count: optional [] integer device tensor: only the first ``count`` positions are
                samples; with the fused MLP the hash grid (where its backend can,
                :meth:`HashGridEncoding.encode_counted`) and the MLP skip the rest, which get
                density 0 (other paths compute every row; callers ignore rows past the count).

        Returns:
            sigma: [S] float32 >= 0, in 1/world units.
        """
        assert positions.ndim == 2 and positions.shape[1] == 3, tuple(positions.shape)
        normalised = self.normalise_positions(positions)
        if count is not None and self._fused_applies(normalised) and not torch.is_grad_enabled():
            # the hash grid and the MLP both stop at the live count (rows past it: density 0)
            features = self.encoding.encode_counted(normalised, count)
            return _triton_mlp().fused_density(features, self.density_mlp.weights(), self.mlp_precision, count)
        features = self.encoding(normalised)
        if self._fused_applies(features) and not torch.is_grad_enabled():
            return _triton_mlp().fused_density(features, self.density_mlp.weights(), self.mlp_precision, count)
        return self._density_head(features)[0]

    def _fused_applies(self, features: torch.Tensor) -> bool:
        """Whether the fused MLP kernels take these hash-grid features: chosen, float32, and no
        autocast unless the kernels' own precision is bfloat16."""
        autocast_on = torch.is_autocast_enabled(features.device.type)
        return (self.fused_mlp and features.dtype == torch.float32
                and (not autocast_on or self.mlp_precision == "bf16"))

    def forward(
        self, positions: torch.Tensor, directions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Density and colour of samples.

        Args:
            positions: [S, 3] floating, world units.
            directions: [S, 3] floating, unit view directions (ray directions) in world axes.

        Returns:
            sigma: [S] float32 >= 0 (1/world units); rgb: [S, 3] float32 in [0, 1] (straight
            colour). The MLPs run in the autocast dtype when autocast is on.
        """
        assert positions.ndim == 2 and positions.shape[1] == 3, tuple(positions.shape)
        assert directions.shape == positions.shape, (tuple(directions.shape), tuple(positions.shape))
        features = self.encoding(self.normalise_positions(positions))
        if self._fused_applies(features):
            # the kernels read the leading degree² columns of the SH; directions need no gradient
            sh = _encode_directions(directions.detach().float(), SH_MAX_DEGREE)
            return _triton_mlp().fused_field_head(features, sh, self.density_mlp.weights(), self.rgb_mlp.weights(),
                                                  self.mlp_precision)
        return self.reference_heads(features, _encode_directions(directions.float(), self.sh_degree))

    def reference_heads(self, features: torch.Tensor, sh: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The PyTorch path of both MLPs (the fused kernels' twin): σ [S] float32 (1/world units)
        and rgb [S, 3] float32 in [0, 1] from hash-grid features [S, L·F] and the SH encoding of
        the directions [S, sh_degree²]; the MLPs run in the autocast dtype when autocast is on."""
        sigma, geometry = self._density_head(features)
        rgb = torch.sigmoid(self.rgb_mlp(torch.cat([geometry, sh.to(geometry.dtype)], dim=1)).float())
        return sigma, rgb

    def mlp_weight_parameters(self) -> list[nn.Parameter]:
        """Weight matrices of both MLPs (the parameters that get L2 1e-6 in the optimiser)."""
        return self.density_mlp.weights() + self.rgb_mlp.weights()

    def appearance_parameters(self) -> list[nn.Parameter]:
        """The per-image colour maps' parameters (none without ``training.appearance``)."""
        return [] if self.appearance is None else list(self.appearance.parameters())

    def encoding_parameters(self) -> list[nn.Parameter]:
        """Hash-grid parameters (the table, or the tcnn module's ``params``)."""
        return list(self.encoding.parameters())

    @property
    def n_params(self) -> int:
        """Total number of trainable scalars."""
        return sum(p.numel() for p in self.parameters())
