"""What a trainer is built from: the device, the kernel backends of its step, and the field.

:func:`resolve_device` and :func:`use_triton_kernels` resolve ``training.device`` and the
``training.<name>_backend`` keys; :func:`build_field` makes the :class:`~trainer.model.field.NGPField`
of a config (its hash grid from :func:`hash_grid_config`); :func:`trainer.train.trainable.check_trainable`
refuses what a config may hold but training cannot use.
"""

from __future__ import annotations

import random
import warnings

import torch

from trainer.contract.config import EncodingConfig, TrainConfig
from trainer.contract.errors import ConfigError
from trainer.encoding.hashgrid import HashGridConfig
from trainer.model.field import MLPConfig, NGPField
from trainer.render.contraction import SceneContraction
from trainer.render.march import triton_march_available

__all__ = ["MLP_PRECISION", "build_field", "hash_grid_config", "resolve_device",
           "seed_everything", "use_triton_kernels"]

# training.precision → the fused MLP kernels' product precision (fp16 steps run the PyTorch MLPs)
MLP_PRECISION = {"fp32": "ieee", "tf32": "tf32", "bf16": "bf16", "fp16": "ieee"}


def resolve_device(name: str) -> torch.device:
    """``"auto"`` → ``cuda`` when available else ``cpu``; ``cuda`` without a GPU is a ConfigError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"training.device: '{name}' requested but no CUDA device is available")
    return device


def use_triton_kernels(key: str, backend: str, device: torch.device) -> bool:
    """Resolve ``training.<key>`` (``auto``/``triton``/``torch``): whether the step uses the Triton
    kernels of :mod:`trainer.render` (``auto``: on CUDA when Triton imports).

    Raises:
        ConfigError: ``triton`` where the kernels cannot run (no Triton, or a CPU without
            ``TRITON_INTERPRET=1``).
    """
    if backend == "torch":
        return False
    usable = triton_march_available(device)
    if backend == "triton" and not usable:
        raise ConfigError(
            f"training.{key}: 'triton' cannot run on {device} (it needs Triton and a CUDA device, or "
            "TRITON_INTERPRET=1 on the CPU); use 'auto' or 'torch'"
        )
    return usable and (backend == "triton" or device.type == "cuda")


def hash_grid_config(enc: EncodingConfig, aabb_scale: int, footprint_resolution: float | None = None,
                     unbounded: bool = False) -> HashGridConfig:
    """The encoding block as a :class:`HashGridConfig` for a scene of this ``aabb_scale`` whose
    training views have this pixel-footprint resolution (None: not measured), trained with the
    unbounded scene model or not (``unbounded``): the finest resolution from
    :meth:`~trainer.contract.config.EncodingConfig.finest_resolution`, F and T from its
    ``resolved_features_per_level`` and ``resolved_log2_hashmap_size``."""
    return HashGridConfig(
        n_levels=enc.n_levels,
        n_features_per_level=enc.resolved_features_per_level(unbounded),
        log2_hashmap_size=enc.resolved_log2_hashmap_size(unbounded),
        base_resolution=enc.base_resolution,
        per_level_scale=enc.per_level_scale,
        max_resolution=enc.finest_resolution(aabb_scale, footprint_resolution),
    )


def build_field(
    cfg: TrainConfig, aabb: torch.Tensor, aabb_scale: int, device: torch.device,
    footprint_resolution: float | None = None, n_train_images: int = 0,
    contraction: SceneContraction | None = None,
) -> NGPField:
    """The NGP field described by ``cfg`` on ``device`` over ``aabb`` ([2, 3] float32; of side
    ``aabb_scale``), its hash grid as :func:`hash_grid_config` gives it; with ``training.appearance``
    "affine", a colour map for each of the ``n_train_images`` training images; with
    ``contraction`` (the unbounded scene model) positions are contracted into ``aabb`` first."""
    table_dtype = torch.float16 if cfg.encoding.table_dtype == "float16" else torch.float32
    field = NGPField(
        aabb=aabb.to(device),  # built where it runs: the fused kernels are checked on that device
        grid_cfg=hash_grid_config(cfg.encoding, aabb_scale, footprint_resolution, unbounded=contraction is not None),
        density_net=MLPConfig(
            n_neurons=cfg.network.n_neurons,
            n_hidden_layers=cfg.network.n_hidden_layers,
            activation=cfg.network.activation,
            output_activation=cfg.network.output_activation,
        ),
        rgb_net=MLPConfig(
            n_neurons=cfg.rgb_network.n_neurons,
            n_hidden_layers=cfg.rgb_network.n_hidden_layers,
            activation=cfg.rgb_network.activation,
            output_activation=cfg.rgb_network.output_activation,
        ),
        backend=cfg.encoding.backend,
        table_dtype=table_dtype,
        sh_degree=cfg.dir_encoding.degree,
        fused_mlp=use_triton_kernels("mlp_backend", cfg.training.mlp_backend, device),
        mlp_precision=MLP_PRECISION[cfg.training.precision],
        n_appearance_images=n_train_images if cfg.training.appearance == "affine" else 0,
        contraction=contraction,
    )
    if field.fused_mlp_problem is not None:
        warnings.warn(f"training.mlp_backend: the fused MLP kernels cannot run on {device} at width "
                      f"{cfg.network.n_neurons} ({field.fused_mlp_problem}); the PyTorch path runs the MLPs",
                      stacklevel=2)
    elif cfg.training.mlp_backend == "triton":
        if not field.fused_mlp:
            warnings.warn("training.mlp_backend: 'triton' does not apply to these MLPs (the fused kernels take a "
                          "density MLP with 1 hidden layer and a colour MLP with 2, one width of 16, 32, 64 or 128, "
                          "ReLU, no output activation, at most 64 hash-grid features); the PyTorch path runs them", stacklevel=2)
        elif cfg.training.precision == "fp16":
            warnings.warn("training.mlp_backend: 'triton' runs fp32, tf32 and bf16 steps; with training.precision "
                          "'fp16' the PyTorch path runs the MLPs", stacklevel=2)
    return field.to(device)


def seed_everything(seed: int) -> None:
    """Seed Python's and torch's global random generators (the field's initial weights draw from torch's)."""
    random.seed(seed)
    torch.manual_seed(seed)

