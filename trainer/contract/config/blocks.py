"""The twelve blocks of the trainer config and the whole :class:`TrainConfig` (see
:mod:`trainer.contract.config` for the file layout): frozen dataclasses whose fields carry their
:mod:`~trainer.contract.config.rules` rule and are checked at construction.

Derived values are computed here from the config and the scene (its ``aabb_scale``, its views'
pixel footprint) and never written back: the finest hash-grid resolution
(:meth:`EncodingConfig.finest_resolution`) and the cone angle
(:meth:`TrainingConfig.resolved_cone_angle`). :data:`DERIVED_SETTINGS` names every setting whose null
a run resolves so.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar

from trainer.contract.config.rules import (
    REQUIRED, Block, BoolRule, DeviceRule, EntriesRule, FloatRule, IntListRule, IntRule, OneOf, OptionalRule, Rule,
    StepWindowRule, StrRule, is_int, parse_step_window, rule_field, rule_of,
)
from trainer.contract.backend import EMULATED_INTERCONNECT_ENV
from trainer.contract.errors import ConfigError
from trainer.contract.formats import FORMAT_CHOICES
from trainer.contract.world import check_boxes_per_rank, check_rank_entries

__all__ = [
    "BLOCKS",
    "DERIVED_SETTINGS",
    "FORMER_FIXED_DEFAULTS",
    "DataConfig",
    "DirEncodingConfig",
    "DistributedConfig",
    "EncodingConfig",
    "FaultsConfig",
    "GpuCapability",
    "LossConfig",
    "MAX_TIMEOUT_S",
    "NGP_DESIRED_RESOLUTION",
    "NetworkConfig",
    "OptimizerConfig",
    "ParallelConfig",
    "ProfileConfig",
    "RGBNetworkConfig",
    "TrainConfig",
    "TrainingConfig",
    "field_rule",
]

# instant-ngp's finest hash-grid resolution over the unit cube for NeRF (src/testbed.cu,
# ``reset_network``: ``desired_resolution = 2048``), multiplied by the scene's aabb_scale.
NGP_DESIRED_RESOLUTION = 2048


#: ``encoding.n_features_per_level`` null with the box scene model: on lego_400 F=4 with T=2^18
#: scored 35.4 dB on all 200 test views after 180 s (two runs: 35.43, 35.38) against 35.1 with
#: F=2, T=2^19, at the same step rate on one H100 (docs/benchmarks.md, "Features per level").
BOX_FEATURES_PER_LEVEL = 4
#: ``encoding.n_features_per_level`` null with the unbounded scene model: instant-ngp's F=2 (fox
#: scored 30.6 dB with F=4 against 30.9 dB with F=2 at 3000 steps, one run each).
UNBOUNDED_FEATURES_PER_LEVEL = 2
#: log2 of the features each level's table holds when ``encoding.log2_hashmap_size`` is null:
#: instant-ngp's F=2 · T=2^19 (4 MiB of float32 per level), kept whatever F is.
LOG2_FEATURES_PER_TABLE = 20

DERIVED_SETTINGS: tuple[str, ...] = (
    "data.aabb_scale",
    "data.downscale",
    "encoding.n_features_per_level",
    "encoding.log2_hashmap_size",
    "encoding.per_level_scale",
    "encoding.max_resolution",
    "loss.distortion_weight",
    "optimizer.l2_reg",
    "training.cone_angle",
)
"""Dotted keys whose null a run resolves from its scene: the scene's box, the automatic size rule,
the hash grid's F and T of the scene model, the per-level scale and finest resolution of the
views' pixel footprint, the distortion weight and the MLP weights' L2 regularisation of the scene
model, the cone angle of the box. A
run's ``status.json`` gives the values it chose (:data:`trainer.contract.runstatus.DERIVED_KEY`);
another null setting (``optimizer.ema_decay``, ``training.time_budget_s``, ...) means off, none
or all, not a value the run chooses."""

FORMER_FIXED_DEFAULTS: dict[str, object] = {"optimizer.l2_reg": 1e-6}
"""Settings of :data:`DERIVED_SETTINGS` whose default was once one value for every scene, and
that value: a sweep study begun then keeps it for its remaining trials (``ngptune sweep``), so its
trials stay comparable."""


@dataclasses.dataclass(frozen=True)
class EncodingConfig(Block):
    """Multiresolution hash encoding of positions (Müller et al. 2022, §3).

    Attributes:
        otype: ``"HashGrid"`` (the only encoding).
        n_levels: L, number of levels (1..32).
        n_features_per_level: F, features per level (1, 2, 4 or 8), or null (the default):
            :data:`BOX_FEATURES_PER_LEVEL` with the box scene model and
            :data:`UNBOUNDED_FEATURES_PER_LEVEL` with the unbounded one
            (:meth:`resolved_features_per_level`).
        log2_hashmap_size: log2 of T, the table size per level ([10, 24]), or null (the
            default): each level's table holds 2^20 features, T = 2^20 / F (instant-ngp's F=2,
            T=2^19; :meth:`resolved_log2_hashmap_size`).
        base_resolution: N_min, resolution of the coarsest level (>= 2).
        per_level_scale: b, growth factor between levels (> 1), or null.
        max_resolution: N_max, resolution of the finest level, or null (derived from the scene's
            views). At most one of
            ``per_level_scale`` and ``max_resolution`` may be set; see
            :meth:`finest_resolution`.
        max_resolution_factor: factor (> 0, at most 16) on the derived N_max (1: as derived; 0.5
            a level coarser, 2 a level finer); only without ``max_resolution`` and
            ``per_level_scale``.
        backend: ``"auto"``, ``"torch"`` (reference), ``"triton"`` or ``"tcnn"``.
        table_dtype: storage of the hash tables, ``"float32"`` or ``"float16"`` (the encoding
            kernels and benchmarks only: training refuses float16, see ``Trainer``).
    """

    _PATH: ClassVar[str] = "encoding"

    otype: str = rule_field("HashGrid", OneOf("HashGrid"))
    n_levels: int = rule_field(16, IntRule(1, 32))
    n_features_per_level: int | None = rule_field(None, OptionalRule(OneOf(1, 2, 4, 8)))
    log2_hashmap_size: int | None = rule_field(None, OptionalRule(IntRule(10, 24)))
    base_resolution: int = rule_field(16, IntRule(2))
    per_level_scale: float | None = rule_field(None, OptionalRule(FloatRule(1, lo_open=True)))
    max_resolution: int | None = rule_field(None, OptionalRule(IntRule(2)))
    max_resolution_factor: float = rule_field(1.0, FloatRule(0, 16, lo_open=True))
    backend: str = rule_field("auto", OneOf("auto", "torch", "triton", "tcnn"))
    table_dtype: str = rule_field("float32", OneOf("float32", "float16"))

    def _check_relations(self) -> None:
        if self.per_level_scale is not None and self.max_resolution is not None:
            raise ConfigError(
                f"encoding.max_resolution: set either it or encoding.per_level_scale, not both "
                f"(got {self.max_resolution} and {self.per_level_scale})"
            )
        if self.max_resolution_factor != 1.0 and (self.max_resolution is not None or self.per_level_scale is not None):
            given = "max_resolution" if self.max_resolution is not None else "per_level_scale"
            raise ConfigError(
                f"encoding.max_resolution_factor: scales the derived finest resolution; with encoding.{given} "
                f"set there is none to scale (got factor {self.max_resolution_factor:g}); leave it at 1"
            )
        if self.max_resolution is not None and self.max_resolution <= self.base_resolution:
            raise ConfigError(
                f"encoding.max_resolution: expected an integer > encoding.base_resolution "
                f"({self.base_resolution}), got {self.max_resolution}"
            )

    def resolved_features_per_level(self, unbounded: bool) -> int:
        """F a run trains with: ``n_features_per_level``, or when it is null
        :data:`UNBOUNDED_FEATURES_PER_LEVEL` for the unbounded scene model and
        :data:`BOX_FEATURES_PER_LEVEL` for the box."""
        if self.n_features_per_level is not None:
            return self.n_features_per_level
        return UNBOUNDED_FEATURES_PER_LEVEL if unbounded else BOX_FEATURES_PER_LEVEL

    def resolved_log2_hashmap_size(self, unbounded: bool) -> int:
        """log2 T a run trains with: ``log2_hashmap_size``, or when it is null
        :data:`LOG2_FEATURES_PER_TABLE` − log2 F (F from :meth:`resolved_features_per_level`; 17
        to 20 for F of 8 to 1): every level's table holds the same 2^20 features whatever F is."""
        if self.log2_hashmap_size is not None:
            return self.log2_hashmap_size
        return LOG2_FEATURES_PER_TABLE - int(math.log2(self.resolved_features_per_level(unbounded)))

    def finest_resolution(self, aabb_scale: int, footprint_resolution: float | None = None) -> int | None:
        """N_max, the resolution of the finest level for a scene of this ``aabb_scale``; None when
        ``per_level_scale`` is set (then b, not N_max, is given).

        The rule: ``max_resolution`` if set. Otherwise, for a scene whose training views were
        measured (``footprint_resolution``, :func:`trainer.data.footprint.footprint_resolution`:
        the resolution across the box at which a cell spans one pixel), the smallest power of two
        at or above it, kept within [2 · N_min, 2048 · aabb_scale]: the finest level resolves the
        views' pixels and no more. Without a measurement, instant-ngp's 2048 · aabb_scale
        (``src/testbed.cu``, ``reset_network``: the unit cube's 2048 grows with the scene box).
        A derived N_max is multiplied by ``max_resolution_factor`` (rounded, at least 2 · N_min).
        The hash grid derives b = exp(ln(N_max / N_min) / (L − 1)) from it (Müller et al. 2022,
        eq. 2–3; :attr:`trainer.encoding.hashgrid.HashGridConfig.growth_factor`).

        Args:
            aabb_scale: the scene's AABB scale, a power of two in 1..128.
            footprint_resolution: the scene's pixel-footprint resolution (> 0), or None.
        """
        assert is_int(aabb_scale) and aabb_scale >= 1, aabb_scale
        if self.per_level_scale is not None:
            return None
        if self.max_resolution is not None:
            return self.max_resolution
        ngp = NGP_DESIRED_RESOLUTION * aabb_scale
        derived = ngp
        if footprint_resolution is not None:
            assert footprint_resolution > 0, footprint_resolution
            pixels = 2 ** max(0, math.ceil(math.log2(footprint_resolution)))
            derived = int(min(max(pixels, 2 * self.base_resolution), ngp))
        return max(int(round(derived * self.max_resolution_factor)), 2 * self.base_resolution)


@dataclasses.dataclass(frozen=True)
class NetworkConfig(Block):
    """The density MLP (tiny-cuda-nn network layout; every otype means the same MLP here).

    Attributes:
        otype: ``"FullyFusedMLP"``, ``"CutlassMLP"`` or ``"MLP"``.
        activation: hidden activation, ``"ReLU"``.
        output_activation: ``"None"`` (the trainer applies trunc_exp / sigmoid itself).
        n_neurons: width, a multiple of 16 in [16, 256].
        n_hidden_layers: 1..8.
    """

    _PATH: ClassVar[str] = "network"

    otype: str = rule_field("FullyFusedMLP", OneOf("FullyFusedMLP", "CutlassMLP", "MLP"))
    activation: str = rule_field("ReLU", OneOf("ReLU"))
    output_activation: str = rule_field("None", OneOf("None"))
    n_neurons: int = rule_field(64, IntRule(16, 256, multiple_of=16))
    n_hidden_layers: int = rule_field(1, IntRule(1, 8))


@dataclasses.dataclass(frozen=True)
class RGBNetworkConfig(NetworkConfig):
    """The colour MLP: the fields of :class:`NetworkConfig`, with 2 hidden layers by default."""

    _PATH: ClassVar[str] = "rgb_network"

    n_hidden_layers: int = rule_field(2, IntRule(1, 8))


@dataclasses.dataclass(frozen=True)
class DirEncodingConfig(Block):
    """Direction encoding: real spherical harmonics (:func:`trainer.encoding.sh.sh_encode`).

    Attributes:
        otype: ``"SphericalHarmonics"``, the only one.
        degree: bands, 1..4 (tiny-cuda-nn's ``degree``: degree² outputs). 4 is instant-ngp's choice;
            lower degrees give the colour less freedom to vary with the view direction (1: none).

    instant-ngp's ``Composite`` form is accepted on load (see the module docstring).
    """

    _PATH: ClassVar[str] = "dir_encoding"

    otype: str = rule_field("SphericalHarmonics", OneOf("SphericalHarmonics"))
    degree: int = rule_field(4, IntRule(1, 4))


#: ``optimizer.l2_reg`` null with the box scene model: none. On lego_400 after 20 000 steps (all
#: 200 test views over white, one H100, one call) 0 scored 35.96 dB, 1e-7 35.86, instant-ngp's 1e-6
#: 35.40, 1e-5 33.38 and 1e-4 32.52; after 180 s with 0, 35.90 and 36.00 dB in two runs
#: (docs/benchmarks.md, "MLP weight decay").
BOX_L2_REG = 0.0
#: ``optimizer.l2_reg`` null with the unbounded scene model: instant-ngp's 1e-6 (fox at 6000 steps,
#: 7 held-out views, one H100: 31.20 dB against 30.70 without).
UNBOUNDED_L2_REG = 1e-6


@dataclasses.dataclass(frozen=True)
class OptimizerConfig(Block):
    """Adam with step-wise exponential decay and an optional EMA of the weights (flat form).

    tiny-cuda-nn's nested ``Ema → ExponentialDecay → Adam`` form is accepted on load.

    Attributes:
        learning_rate: Adam step size (> 0).
        beta1, beta2: Adam moment decays in [0, 1).
        epsilon: Adam denominator term (> 0).
        l2_reg: L2 regularisation of the MLP weights (>= 0; added to their gradient as in
            tiny-cuda-nn's Adam, never to the hash tables), or null (the default):
            :data:`BOX_L2_REG` with the box scene model and :data:`UNBOUNDED_L2_REG` with the
            unbounded one (:meth:`resolved_l2_reg`).
        decay_start, decay_interval, decay_base: from step ``decay_start`` on, the learning rate
            is multiplied by ``decay_base`` every ``decay_interval`` steps (tiny-cuda-nn
            ``ExponentialDecay``); ``decay_base`` 1.0 keeps it constant. From step 8000, every
            4000 by default (instant-ngp: 20000 and 10000, configs/base.json). The captured step
            trains 18k steps in 60 s, 54k in 180 s; at 20 000 steps the earlier decay scored
            +0.3 to +0.5 dB on lego_400's test views in three side-by-side calls, and 35.1 dB
            against 34.8–34.9 on all 200 after 180 s; fox +0.2 dB at 10 000 steps
            (``bench/psnr_at_steps.py``, docs/benchmarks.md, "Quality at equal steps").
        ema_decay: decay of an exponential moving average of the weights in (0, 1), or null for
            none (tiny-cuda-nn ``Ema``): evaluation renders with the debiased average while training
            continues on the weights (:mod:`trainer.train.ema`).
        lazy_grid_updates: hash-grid entries whose gradient is exactly 0 in a step keep their
            value and Adam moments, as in tiny-cuda-nn's Adam (:mod:`trainer.train.grid_adam`);
            false moves every entry with its decaying momentum (dense :class:`torch.optim.Adam`).
    """

    _PATH: ClassVar[str] = "optimizer"

    learning_rate: float = rule_field(1e-2, FloatRule(0, lo_open=True))
    beta1: float = rule_field(0.9, FloatRule(0, 1, hi_open=True))
    beta2: float = rule_field(0.99, FloatRule(0, 1, hi_open=True))
    epsilon: float = rule_field(1e-15, FloatRule(0, lo_open=True))
    l2_reg: float | None = rule_field(None, OptionalRule(FloatRule(0)))
    decay_start: int = rule_field(8000, IntRule(0))
    decay_interval: int = rule_field(4000, IntRule(1))
    decay_base: float = rule_field(0.33, FloatRule(0, 1, lo_open=True))
    ema_decay: float | None = rule_field(None, OptionalRule(FloatRule(0, 1, lo_open=True, hi_open=True)))
    lazy_grid_updates: bool = rule_field(False, BoolRule())

    def resolved_l2_reg(self, unbounded: bool) -> float:
        """The MLP weights' L2 regularisation a run trains with: ``l2_reg``, or when it is null
        :data:`UNBOUNDED_L2_REG` for the unbounded scene model and :data:`BOX_L2_REG` for the box."""
        if self.l2_reg is not None:
            return float(self.l2_reg)
        return UNBOUNDED_L2_REG if unbounded else BOX_L2_REG


#: ``loss.distortion_weight`` null with the unbounded scene model: fox at 0.01 / 0.05 / 0.1 on the
#: CPU preset scored 23.2 / 24.1 / 22.7 dB against 22.9 dB without (docs/benchmarks.md).
UNBOUNDED_DISTORTION_WEIGHT = 0.05


@dataclasses.dataclass(frozen=True)
class LossConfig(Block):
    """Photometric loss between rendered and reference colours.

    Attributes:
        otype: ``"Huber"``, ``"L2"``, ``"L1"`` or ``"RelativeL2"`` (tiny-cuda-nn loss names).
            L2 by default: on lego_400 it scores 0.3–0.4 dB above instant-ngp's Huber at equal
            steps (6000 and 8000 steps, ``bench/psnr_at_steps.py``, docs/benchmarks.md);
            configs/base.json keeps instant-ngp's Huber.
        huber_delta: δ of the Huber loss (> 0): 0.5·x² for |x| <= δ, δ·(|x| − δ/2) beyond.
            0.1 is instant-ngp's NeRF value (``include/neural-graphics-primitives/nerf_device.cuh``,
            ``loss_and_gradient``: ``huber_loss(target, prediction, 0.1f) / 5.0f``, which also
            divides by 5 so the loss reads roughly like L2).
        distortion_weight: weight (>= 0) of mip-NeRF 360's distortion regulariser, the mean over
            the step's rays of each ray's distortion (:mod:`trainer.render.distortion`), added to
            the photometric loss; 0 leaves it out; null (the default) takes
            :data:`UNBOUNDED_DISTORTION_WEIGHT` with the unbounded scene model (a capture with
            background) and 0 with the box model (:meth:`resolved_distortion_weight`). It gathers
            a ray's weights into one interval, against the haze a capture with background trains in
            front of the cameras: on fox (one H200, 60 s) 0.05 trained on 8.8 samples per ray
            instead of 141 and scored 31.0 dB instead of 27.3 dB held out; lego_400 scored the same
            with it at a 16 % slower step (docs/benchmarks.md). mip-NeRF 360 uses 0.01, nerfacto
            0.002. Not in subgrid mode.
        alpha_weight: weight (>= 0) of the opacity term: the mean over the step's rays of
            (A − α)², where A = 1 − exp(−Σ σ·Δt) is the ray's accumulated opacity over its trained
            samples and α its pixel's alpha (:func:`trainer.train.phases.alpha_term`), added to the
            photometric loss. It applies to captures whose images carry alpha (an object without
            background, such as NeRF-synthetic) and is 0 for the others, whose pixels all read α = 1.
            The random training background supervises A only through colour, with the noise of
            its draw; this term does so directly. 0 (off) by default: on lego_400 after 180 s
            (one H100) 1.0 scored 35.26 dB over white and 35.66 over black, 0.3 scored 35.45 and
            35.91, against the defaults' 35.39 and 35.86 (docs/benchmarks.md, "Time to PSNR, one
            GPU"). Not in subgrid mode.
    """

    _PATH: ClassVar[str] = "loss"

    otype: str = rule_field("L2", OneOf("Huber", "L2", "L1", "RelativeL2"))
    huber_delta: float = rule_field(0.1, FloatRule(0, lo_open=True))
    distortion_weight: float | None = rule_field(None, OptionalRule(FloatRule(0)))
    alpha_weight: float = rule_field(0.0, FloatRule(0))

    def resolved_alpha_weight(self, images_carry_alpha: bool) -> float:
        """The opacity term's weight a run trains with: ``alpha_weight`` for a capture whose images
        carry alpha, else 0."""
        return float(self.alpha_weight) if images_carry_alpha else 0.0

    def resolved_distortion_weight(self, unbounded: bool) -> float:
        """The distortion weight a run trains with: ``distortion_weight``, or when it is null
        :data:`UNBOUNDED_DISTORTION_WEIGHT` for the unbounded scene model and 0 for the box."""
        if self.distortion_weight is not None:
            return float(self.distortion_weight)
        return UNBOUNDED_DISTORTION_WEIGHT if unbounded else 0.0


@dataclasses.dataclass(frozen=True)
class TrainingConfig(Block):
    """The training loop.

    Attributes:
        n_steps: optimiser steps (>= 1); 35k is instant-ngp's default.
        time_budget_s: stop after this many seconds of training (> 0), or null.
        seed: RNG seed in [0, 2^32 − 1].
        precision: ``"fp32"``, ``"tf32"`` (the default: TF32 tensor-core products in CUDA
            matmuls and the fused MLP kernels, float32 everywhere else; the same as ``"fp32"`` on a
            CPU), ``"bf16"`` (autocast; bfloat16 products in the fused MLP kernels) or ``"fp16"``
            (autocast + gradient scaling).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        target_samples_per_step: samples per step the adaptive ray batch aims at (>= 256; 2^18 in
            instant-ngp).
        initial_rays_per_step, max_rays_per_step: first and largest ray batch.
        log_every: steps between metric records (>= 1).
        tensorboard: also write each metric record and each evaluation as TensorBoard scalars in
            the run folder (rank 0; :mod:`trainer.metrics_tensorboard`), when the ``tensorboard``
            package is installed.
        eval_every: steps between test-view evaluations; 0 = only at the end.
        eval_at_s: whole seconds of training at which the test views are also evaluated (distinct,
            1..2^31; empty: none): each at the first step whose training time reaches it (rank 0's
            clock on every rank; checked at the metrics records and at the step the pace predicts
            for the next mark, :mod:`trainer.train.time_marks`), outside the training clock. The
            marks of a study whose pruner judges trials at fixed seconds (its rungs).
        eval_max_images: evaluate at most this many test images, or null for all.
        eval_every_max_images: views of the periodic evaluations (``eval_every``, ``eval_at_s``), evenly spaced
            over the split (the same views each time), or null for ``eval_max_images``; the final
            evaluation always takes ``eval_max_images``.
        eval_spp: renders averaged per test view, in [1, 64]: with more than one, every render
            marches with a random offset of the first sample along each ray (drawn from a generator
            seeded with ``seed``, so evaluations are repeatable and leave training's draws alone),
            as instant-ngp's ``scripts/run.py`` scores test views (8 renders at pixel centres); 1
            renders once without offsets. The subgrid mode always renders once.
        snapshot_every: steps between snapshots; 0 = none during training.
        background: colour behind straight-alpha pixels during training: ``"random"`` (per
            ray), ``"white"`` or ``"black"`` (evaluation of NeRF-synthetic uses white). One
            colour scores more on a composite of that colour and less on any other: on lego_400
            after 180 s, white 35.8 dB over white and 33.0 over black, random 35.4 and 35.9
            (docs/benchmarks.md, "Time to PSNR, one GPU").
        occupancy_resolution: cells per axis of each occupancy-grid cascade, an even integer
            in [2, 1024] (so R³ fills whole bitfield bytes; instant-ngp: 128).
        occupancy_update_every: steps between occupancy-grid updates (>= 1).
        occupancy_warmup_steps: steps during which every cell is updated (>= 0).
        occupancy_decay: EMA decay of cell densities, in (0, 1).
        occupancy_threshold: density above which a cell is occupied (> 0; the trainer uses
            min(threshold, mean density)).
        max_march_steps: ray-marching steps per unit length across the unit cube (>= 1;
            instant-ngp's 1024 gives Δt = √3/1024).
        cone_angle: step growth with distance (>= 0), or null; see :meth:`resolved_cone_angle`.
        scene_model: how space is represented and marched: ``"box"`` (instant-ngp: cascaded
            occupancy grids over the scene box, nothing beyond it; a ray that leaves the box shows
            the training background), ``"unbounded"`` (the box as in ``"box"``, and beyond it the
            rest of space contracted into a shell around the box, Mip-NeRF 360 style, marched in
            ``background_steps`` steps uniform in disparity: :mod:`trainer.render.scene_model`) or
            ``"auto"``: chosen from the capture (:mod:`trainer.data.capture_kind`): ``"box"`` for an
            object without background (images with alpha, such as NeRF-synthetic), ``"unbounded"``
            for a forward-facing or 360° capture with background; ``"box"`` in subgrid mode (its
            boxes partition the scene box). The trainer says which in its first lines.
        background_steps: steps from the scene box's exit to the far end of a ray in the unbounded
            model (2..4096; the far end is (N + 1) times the distance at which the ray leaves the box).
        near_distance: rays start this far from their camera (>= 0, unit-cube units): samples
            closer are never marched, in training, evaluation and rendering (floaters in front of
            a capture's cameras); 0 marches from the camera (or the box entry).
        subpixel_jitter: training rays pass through a random point of their pixel rather than its
            centre (a scene with lens distortion in any camera uses pixel centres in every frame:
            its rays come from per-camera direction maps of the pixel centres). Off by default:
            evaluation renders one ray through each pixel centre (the NeRF protocol), and training
            on pixel centres then scores 1.4 dB higher on lego_400 after 3000 steps (32.2 vs
            30.8 dB, ``bench/psnr_at_steps.py``, docs/benchmarks.md); instant-ngp jitters and
            renders test views with several jittered samples per pixel instead.
        prefetch_march: draw and march the next step's rays while the current step trains (a
            side CUDA stream; see :mod:`trainer.train.prefetch`); false marches inside the step.
        march_backend: ``"auto"`` (the Triton marcher on CUDA when Triton imports, else the
            PyTorch one), ``"triton"`` or ``"torch"``; see :func:`trainer.render.march.march_rays`.
        render_backend: the same choice for the training step's compositing
            (:mod:`trainer.render.triton_volrend`, twin :func:`trainer.render.volrend.composite`),
            kept-sample counts and compaction's per-slot copies (:mod:`trainer.render.triton_compact`).
        rays_backend: the same choice for building training rays and decoding their colours
            (:mod:`trainer.data.triton_rays`, one kernel for distortion-free cameras and for
            distorted ones through their direction map; twin: the sampler's PyTorch path, which
            distorted cameras too large for a map take).
        mlp_backend: the same choice for both MLPs of the field: one fused Triton launch
            forward and one backward (:mod:`trainer.model.triton_mlp`; float32 training and
            instant-ngp's MLP shapes, else the PyTorch path, its twin). On one H200 it lifted a
            whole 180 s lego_400 run from 144.4 to 151.3 steps/s (docs/benchmarks.md, "Time to PSNR").
        compact_samples: train on the samples in front of each ray's early stop only
            (instant-ngp's step, :mod:`trainer.render.compact`): a density pass without gradients
            over the marched samples finds where each ray's transmittance falls below 1e-4, those
            samples of whole rays fill a batch of about ``target_samples_per_step``, and rays per
            step are sized on the kept count. False trains on every marched sample and sizes rays
            on the marched count. The subgrid mode always trains on every marched sample (a box's
            segment cannot know the transmittance in front of it).
        cuda_graphs: ``"auto"``, ``"on"``, ``"off"`` or ``"dynamic"``: the fixed-capacity step
            (:mod:`trainer.train.fixed_step`: buffers sized on the device's needs, counts on the
            device, no host read inside a step) captured in a CUDA graph and replayed (``on``,
            :mod:`trainer.train.capture`), or run eagerly (``off``, the twin; one process), or the
            dynamically sized step of :mod:`trainer.train.dynamic_step` (``dynamic``).
            ``auto`` captures where nothing blocks it (one CUDA process with the Triton kernels,
            fp32/tf32/bf16, no weight EMA) and runs the dynamic step elsewhere, saying why.
        capacity_headroom: marched samples a fixed-capacity step holds at first, as a multiple of
            ``target_samples_per_step`` (>= 1); rays whose samples do not fit are left out and
            counted in the ``samples_clipped`` metric, and the capacity grows when the batch
            sizing needs more (:mod:`trainer.train.fixed_step`).
        appearance: ``"off"`` or ``"affine"``: a learnt affine colour map per training image
            (exposure, white balance; :mod:`trainer.model.appearance`) between the rendered ray
            colour and its pixel in the loss. Renders and held-out views use the shared appearance;
            ``eval.json`` gives ``mean_psnr_affine_db`` (PSNR after each held-out view's best affine
            colour map) beside ``mean_psnr_db``. Off until measured on real captures; "off" in
            subgrid mode.
        quiet: no progress output on the console.
        cpu_threads: intra-op threads of each rank on a CPU (>= 1), or 0 for the rule
            ``the cores other processes leave free // ranks on the host`` (:mod:`trainer.contract.threads`).
    """

    _PATH: ClassVar[str] = "training"

    n_steps: int = rule_field(35000, IntRule(1))
    time_budget_s: float | None = rule_field(None, OptionalRule(FloatRule(0, lo_open=True)))
    seed: int = rule_field(1337, IntRule(0, 2**32 - 1))
    precision: str = rule_field("tf32", OneOf("fp32", "tf32", "bf16", "fp16"))
    device: str = rule_field("auto", DeviceRule())
    # at most 2^31: sample and ray indices of the kernels are int32, and no device holds more
    target_samples_per_step: int = rule_field(262144, IntRule(256, 2**31))
    initial_rays_per_step: int = rule_field(4096, IntRule(1, 2**31))
    max_rays_per_step: int = rule_field(1048576, IntRule(1, 2**31))
    log_every: int = rule_field(100, IntRule(1))
    tensorboard: bool = rule_field(True, BoolRule())
    eval_every: int = rule_field(0, IntRule(0))
    eval_at_s: tuple[int, ...] = rule_field((), IntListRule(1, 2**31))
    eval_max_images: int | None = rule_field(None, OptionalRule(IntRule(1)))
    eval_every_max_images: int | None = rule_field(None, OptionalRule(IntRule(1)))
    eval_spp: int = rule_field(1, IntRule(1, 64))
    snapshot_every: int = rule_field(0, IntRule(0))
    background: str = rule_field("random", OneOf("random", "white", "black"))
    appearance: str = rule_field("off", OneOf("off", "affine"))
    occupancy_resolution: int = rule_field(128, IntRule(2, 1024, multiple_of=2))
    occupancy_update_every: int = rule_field(16, IntRule(1))
    occupancy_warmup_steps: int = rule_field(256, IntRule(0))
    occupancy_decay: float = rule_field(0.95, FloatRule(0, 1, lo_open=True, hi_open=True))
    occupancy_threshold: float = rule_field(0.01, FloatRule(0, lo_open=True))
    max_march_steps: int = rule_field(1024, IntRule(1))
    cone_angle: float | None = rule_field(None, OptionalRule(FloatRule(0)))
    scene_model: str = rule_field("auto", OneOf("auto", "box", "unbounded"))
    background_steps: int = rule_field(64, IntRule(2, 4096))
    near_distance: float = rule_field(0.0, FloatRule(0))
    subpixel_jitter: bool = rule_field(False, BoolRule())
    prefetch_march: bool = rule_field(True, BoolRule())
    march_backend: str = rule_field("auto", OneOf("auto", "triton", "torch"))
    render_backend: str = rule_field("auto", OneOf("auto", "triton", "torch"))
    rays_backend: str = rule_field("auto", OneOf("auto", "triton", "torch"))
    mlp_backend: str = rule_field("auto", OneOf("auto", "triton", "torch"))
    compact_samples: bool = rule_field(True, BoolRule())
    cuda_graphs: str = rule_field("auto", OneOf("auto", "on", "off", "dynamic"))
    capacity_headroom: float = rule_field(4.0, FloatRule(1))
    quiet: bool = rule_field(False, BoolRule())
    cpu_threads: int = rule_field(0, IntRule(0))

    def _check_relations(self) -> None:
        if self.max_rays_per_step < self.initial_rays_per_step:
            raise ConfigError(
                f"training.max_rays_per_step: expected an integer >= "
                f"training.initial_rays_per_step ({self.initial_rays_per_step}), "
                f"got {self.max_rays_per_step}"
            )

    def resolved_cone_angle(self, aabb_scale: int) -> float:
        """The cone angle used for a scene of this ``aabb_scale``.

        ``cone_angle`` if set; otherwise 1/256 when aabb_scale > 1 (exponential stepping in large
        scenes) and 0 (constant steps, like the original NeRF) for the unit cube, as instant-ngp
        does (``src/testbed_nerf.cu``, ``cone_angle_constant``). The step at distance t is
        max(Δt_min, t · cone_angle).
        """
        assert is_int(aabb_scale) and aabb_scale >= 1, aabb_scale
        if self.cone_angle is not None:
            return self.cone_angle
        return 1.0 / 256.0 if aabb_scale > 1 else 0.0


@dataclasses.dataclass(frozen=True)
class DataConfig(Block):
    """The scene and how its pixels are held (DESIGN.md §1).

    Attributes:
        scene: path of the scene folder or file, or null (then the caller supplies one).
        downscale: integer image shrink factor (>= 1), or null for the automatic rule (LLFF and
            COLMAP: longest side to <= 1600 px; instant-ngp and Blender: full size; docs/loading.md).
            An explicit factor wins over the automatic rule.
        min_downscale: a floor on the automatic rule's factor (>= 1): the factor is the larger of
            the two, so it never trains at more pixels than the automatic rule (the CPU preset's 2:
            half-size images). Ignored when ``downscale`` is set.
        holdout_every: every n-th frame goes to ``test`` for formats without splits; 0 = none.
        aabb_scale: override of the scene's aabb_scale (power of two 1..128), or null.
        format: ``"auto"`` (most camera information: COLMAP, LLFF, Blender, instant-ngp) or the
            format to read from a folder holding several (a ``--format`` value of
            :data:`~trainer.contract.formats.SCENE_FORMATS`: ``"colmap"``, ``"llff"``, ``"blender"``, ``"ngp"``).
        camera_convention: camera axes of ``transforms*.json`` poses: ``"opengl"`` or ``"opencv"``.
        placement: ``"auto"``, ``"device"``, ``"pinned"`` or ``"stream"``.
        memory_budget_gib: memory the pixel table may use when choosing ``auto`` placement
            (GiB, > 0), or null for the device's free memory.
        cache_dir: folder of the decoded-image cache, or null for no cache.
        decode_threads: image decoding threads (>= 1), or null for the CPU count.
    """

    _PATH: ClassVar[str] = "data"

    scene: str | None = rule_field(None, OptionalRule(StrRule()))
    downscale: int | None = rule_field(None, OptionalRule(IntRule(1)))
    min_downscale: int = rule_field(1, IntRule(1))
    holdout_every: int = rule_field(8, IntRule(0))
    aabb_scale: int | None = rule_field(None, OptionalRule(IntRule(1, 128, power_of_two=True)))
    format: str = rule_field("auto", OneOf("auto", *FORMAT_CHOICES))
    camera_convention: str = rule_field("opengl", OneOf("opengl", "opencv"))
    placement: str = rule_field("auto", OneOf("auto", "device", "pinned", "stream"))
    memory_budget_gib: float | None = rule_field(None, OptionalRule(FloatRule(0, lo_open=True)))
    cache_dir: str | None = rule_field(None, OptionalRule(StrRule()))
    decode_threads: int | None = rule_field(None, OptionalRule(IntRule(1)))

    def scene_options(self) -> dict[str, Any]:
        """Keyword arguments of ``trainer.data.load_scene`` (``SceneOptions``) from this block."""
        return {
            "downscale": self.downscale,
            "min_downscale": self.min_downscale,
            "holdout_every": self.holdout_every,
            "aabb_scale": self.aabb_scale,
            "format": None if self.format == "auto" else self.format,
            "camera_convention": self.camera_convention,
        }


@dataclasses.dataclass(frozen=True)
class ParallelConfig(Block):
    """How training is spread over ranks (DESIGN.md §3).

    Attributes:
        mode: ``"data"`` (every rank holds the whole model) or ``"subgrid"`` (the scene box is
            cut into ``num_subgrids`` boxes, each with its own field, composited exactly).
        num_subgrids: K boxes (>= 1; >= world size in subgrid mode).
        overlap: fraction of a box's size its encoding domain is enlarged by, in [0, 0.5].
        bucket_mib: gradient all-reduce bucket size (MiB, > 0).
        compression: gradient compression, ``"none"``, ``"fp16"`` or ``"bf16"``.
        overlap_comm: launch each gradient bucket's all-reduce from a hook during backward.
            Off by default: the hash-grid table, by far the largest gradient, is produced last
            (the encoding is the first layer), so there is little to overlap, and the per-parameter
            hooks add host work to a step that is host-bound on an H200 (measured on 2×H200,
            lego_400: 31.2 M samples/s with overlap, 35.4 M without; docs/benchmarks.md).
        balance_every: steps between load-balancing moves; 0 = static shares.
    """

    _PATH: ClassVar[str] = "parallel"

    mode: str = rule_field("data", OneOf("data", "subgrid"))
    num_subgrids: int = rule_field(1, IntRule(1))
    overlap: float = rule_field(0.0, FloatRule(0, 0.5))
    bucket_mib: float = rule_field(25.0, FloatRule(0, lo_open=True))
    compression: str = rule_field("none", OneOf("none", "fp16", "bf16"))
    overlap_comm: bool = rule_field(False, BoolRule())
    balance_every: int = rule_field(0, IntRule(0))


@dataclasses.dataclass(frozen=True)
class GpuCapability(Block):
    """Relative compute power of one rank's GPU; sets the initial static load shares.

    Attributes:
        rank: the rank (>= 0, unique in the list).
        compute_power: relative speed (> 0); shares are proportional to it.
        type: a free-form name of the GPU (for reports), may be empty.
    """

    _PATH: ClassVar[str] = "distributed.gpu_capabilities[]"

    rank: int = rule_field(REQUIRED, IntRule(0))
    compute_power: float = rule_field(REQUIRED, FloatRule(0, lo_open=True))
    type: str = rule_field("", StrRule(allow_empty=True))


MAX_TIMEOUT_S = 2_000_000  # gloo/NCCL keep timeouts in int32 milliseconds (2^31 ms ≈ 2.1e6 s)


@dataclasses.dataclass(frozen=True)
class DistributedConfig(Block):
    """Process-group settings used when the launcher does not provide them (DESIGN.md §3).

    Attributes:
        world_size: number of ranks (>= 1), or null to take it from the launcher / GPU count.
        master_addr: rendezvous host.
        master_port: rendezvous port in [0, 65535]; 0 picks a free port automatically.
        backend: ``"auto"`` (NCCL on CUDA, gloo on CPU), ``"nccl"`` or ``"gloo"``.
        timeout_s: collective timeout (s, > 0, at most 2e6 ≈ 23 days: gloo and NCCL hold it in
            milliseconds in a 32-bit int); no rank may hang longer.
        gpu_capabilities: per-rank :class:`GpuCapability` entries (ranks unique and, when
            ``world_size`` is set, below it).
        emulate_interconnect: ``"none"``, or make NCCL on one NVLink host behave like another
            link (DESIGN.md §5, ANCHORS.md): ``"nvlink"`` (no change, labelled), ``"pcie"``
            (``NCCL_P2P_DISABLE=1``, ~26 GB/s) or ``"sockets"`` (also ``NCCL_SHM_DISABLE=1``,
            ~3.6 GB/s). NCCL only: a gloo run rejects any value but ``"none"``.
    """

    _PATH: ClassVar[str] = "distributed"

    world_size: int | None = rule_field(None, OptionalRule(IntRule(1)))
    master_addr: str = rule_field("127.0.0.1", StrRule())
    master_port: int = rule_field(0, IntRule(0, 65535))
    backend: str = rule_field("auto", OneOf("auto", "nccl", "gloo"))
    timeout_s: float = rule_field(300.0, FloatRule(0, MAX_TIMEOUT_S, lo_open=True))
    gpu_capabilities: tuple[GpuCapability, ...] = rule_field((), EntriesRule(GpuCapability))
    emulate_interconnect: str = rule_field("none", OneOf(*EMULATED_INTERCONNECT_ENV))

    def _check_relations(self) -> None:
        first_index: dict[int, int] = {}
        for i, entry in enumerate(self.gpu_capabilities):
            key = f"distributed.gpu_capabilities[{i}].rank"
            if entry.rank in first_index:
                raise ConfigError(
                    f"{key}: duplicate rank {entry.rank} "
                    f"(also in distributed.gpu_capabilities[{first_index[entry.rank]}])"
                )
            first_index[entry.rank] = i
        if self.world_size is not None:
            check_rank_entries("distributed.gpu_capabilities[{i}].rank",
                               (entry.rank for entry in self.gpu_capabilities), self.world_size)


@dataclasses.dataclass(frozen=True)
class ProfileConfig(Block):
    """Instrumentation of a training run (DESIGN.md §4); all of it is off the hot path by default.

    Attributes:
        trace_steps: ``"A:B"``: ``torch.profiler`` records steps A..B-1 (CPU and CUDA
            activities) and each rank writes a Chrome trace to ``RunDir.trace_path(rank)``;
            null for none.
        phase_timers: time the step's phases (CUDA events + NVTX ranges); off only to measure
            their overhead.
        cuda_profiler_range: call cudaProfilerStart/Stop around the trace window (steps 10:20
            when ``trace_steps`` is null), for ``nsys profile --capture-range=cudaProfilerApi``.
    """

    _PATH: ClassVar[str] = "profile"

    trace_steps: str | None = rule_field(None, OptionalRule(StepWindowRule()))
    phase_timers: bool = rule_field(True, BoolRule())
    cuda_profiler_range: bool = rule_field(False, BoolRule())

    def window(self) -> tuple[int, int] | None:
        """The steps ``(A, B)`` of the trace / profiler-range window, or None."""
        if self.trace_steps is not None:
            return parse_step_window(self.trace_steps)
        return (10, 20) if self.cuda_profiler_range else None


@dataclasses.dataclass(frozen=True)
class FaultsConfig(Block):
    """Deliberate faults, for tests, demonstrations of the profiler's diagnoses and the sweep's
    outcome handling. All off by default.

    Attributes:
        ranks: ranks the faults apply to; empty = every rank.
        data_delay_ms: sleep this long inside the "data" phase of every step (a slow data path).
        compute_slowdown: the step's compute takes this many times longer (>= 1): after the
            backward pass the rank sleeps (factor − 1) × the step's compute time so far.
        oom_at_step: at this step raise ``torch.OutOfMemoryError`` (a simulated CUDA OOM).
        crash_at_step: at this step raise ``RuntimeError`` (a crash).
        hang_at_step: at this step sleep forever (a hang, for timeouts).
    """

    _PATH: ClassVar[str] = "faults"

    ranks: tuple[int, ...] = rule_field((), IntListRule(0))
    data_delay_ms: float = rule_field(0.0, FloatRule(0))
    compute_slowdown: float = rule_field(1.0, FloatRule(1))
    oom_at_step: int | None = rule_field(None, OptionalRule(IntRule(0)))
    crash_at_step: int | None = rule_field(None, OptionalRule(IntRule(0)))
    hang_at_step: int | None = rule_field(None, OptionalRule(IntRule(0)))

    def applies_to(self, rank: int) -> bool:
        return not self.ranks or rank in self.ranks


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The whole trainer config: one typed block per concern (see the module docstring).

    Build it with :func:`load_config` or :func:`config_from_dict`; ``TrainConfig()`` holds the
    defaults. Blocks are replaced, not mutated: ``dataclasses.replace(cfg, training=...)`` or
    :func:`apply_overrides`.

    Raises:
        ConfigError: for settings that contradict each other across blocks
            (``parallel.num_subgrids`` below ``distributed.world_size`` in subgrid mode,
            ``training.appearance`` other than "off", or a ``loss.distortion_weight`` or
            ``loss.alpha_weight`` above 0 in subgrid mode).
    """

    encoding: EncodingConfig = dataclasses.field(default_factory=EncodingConfig)
    network: NetworkConfig = dataclasses.field(default_factory=NetworkConfig)
    rgb_network: RGBNetworkConfig = dataclasses.field(default_factory=RGBNetworkConfig)
    dir_encoding: DirEncodingConfig = dataclasses.field(default_factory=DirEncodingConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    parallel: ParallelConfig = dataclasses.field(default_factory=ParallelConfig)
    distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)
    profile: ProfileConfig = dataclasses.field(default_factory=ProfileConfig)
    faults: FaultsConfig = dataclasses.field(default_factory=FaultsConfig)

    def __post_init__(self) -> None:
        for name, cls in BLOCKS.items():
            assert type(getattr(self, name)) is cls, f"TrainConfig.{name} must be a {cls.__name__}"
        if self.parallel.mode == "subgrid" and self.distributed.world_size is not None:
            check_boxes_per_rank(self.parallel.num_subgrids, self.distributed.world_size)
        if self.parallel.mode == "subgrid" and (self.loss.distortion_weight or 0) > 0:
            raise ConfigError(
                f"loss.distortion_weight: expected 0 in subgrid mode (a ray's weights are split across "
                f"ranks), got {self.loss.distortion_weight:g}"
            )
        if self.parallel.mode == "subgrid" and self.loss.alpha_weight > 0:
            raise ConfigError(
                f"loss.alpha_weight: expected 0 in subgrid mode (a ray's samples are split across "
                f"ranks), got {self.loss.alpha_weight:g}"
            )
        if self.parallel.mode == "subgrid" and self.training.appearance != "off":
            raise ConfigError(
                f"training.appearance: expected 'off' in subgrid mode (a ray's colour is composited "
                f"across ranks), got {self.training.appearance!r}"
            )


BLOCKS: dict[str, type] = {
    "encoding": EncodingConfig,
    "network": NetworkConfig,
    "rgb_network": RGBNetworkConfig,
    "dir_encoding": DirEncodingConfig,
    "optimizer": OptimizerConfig,
    "loss": LossConfig,
    "training": TrainingConfig,
    "data": DataConfig,
    "parallel": ParallelConfig,
    "distributed": DistributedConfig,
    "profile": ProfileConfig,
    "faults": FaultsConfig,
}
"""Block name → block class, in the order of :class:`TrainConfig`'s fields."""


def field_rule(key: str) -> Rule | None:
    """The rule of the config field ``key`` (dotted, ``"training.precision"``), or None when
    ``key`` names no field of a block.

    The rule tells what the field accepts: ``rule.accepts(value)``, ``rule.description`` (as in
    the error line), ``rule.value_type`` and ``rule.choices`` (see :class:`~trainer.contract.config.rules.Rule`);
    ``rule.from_json(key, value)`` raises the field's own :class:`~trainer.contract.errors.ConfigError`.
    Checks between fields are not the rule's: :func:`~trainer.contract.config.apply_overrides` makes them.
    """
    block, _, name = key.partition(".")
    cls = BLOCKS.get(block)
    if cls is None or name not in {f.name for f in dataclasses.fields(cls)}:
        return None
    return rule_of(cls, name)
