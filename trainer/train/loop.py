"""The single-process instant-NGP training loop (DESIGN.md §2).

One step: sample rays → march them through the occupancy grid into packed samples → field forward
→ composite against the background → Huber loss → backward → Adam step; every
``training.occupancy_update_every`` steps the occupancy grid is refreshed from the field's density,
and the number of rays per step adapts so that the number of samples approaches
``training.target_samples_per_step``. The rays and samples of step k+1 are prepared while step k
runs (:mod:`trainer.train.prefetch`, ``training.prefetch_march``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import random
import resource
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from trainer.contract.config import EncodingConfig, TrainConfig, config_differences, config_to_dict
from trainer.data import Scene, load_scene
from trainer.data.images import PixelTable, load_pixel_table, pixel_table_nbytes
from trainer.data.footprint import footprint_resolution
from trainer.data.sampler import RaySampler, choose_placement, placement_note
from trainer.encoding.hashgrid import HashGridConfig
from trainer.contract.errors import ConfigError, SnapshotError, TrainingError
from trainer.model.field import MLPConfig, NGPField
from trainer.render.compact import compact_samples, kept_counts
from trainer.render.march import PackedSamples, march_rays, triton_march_available
from trainer.render.contraction import SceneContraction
from trainer.render.occupancy import OccupancyGrid
from trainer.render.scene_model import SceneModelChoice, choose_scene_model, field_box
from trainer.data.capture_kind import classify_capture
from trainer.render.volrend import EARLY_STOP_TRANSMITTANCE, composite
from trainer.contract.rundir import RunDir
from trainer.contract.world import check_world_size
from trainer.contract.metrics import PHASES, MetricsWriter, truncate_metrics_after
from trainer.metrics_tensorboard import open_scalars
from trainer.train.capture import WARMUP_STEPS, resolve_fixed_step
from trainer.train.divergence import check_interval, diverged_instead
from trainer.train.ema import WeightEMA
from trainer.train.evaluate import evaluate
from trainer.train.faults import inject_step_faults, phase_faults
from trainer.train.grid_adam import GridAdam
from trainer.train.hostcopy import HostCopy
from trainer.train.loss import drop_rays, photometric_loss
from trainer.train.precision import autocast, set_matmul_precision
from trainer.train.prefetch import InputPrefetcher, StepInput
from trainer.train.snapshot import load_snapshot, load_state_checked, save_snapshot
from trainer.train.startup import StartupReport, startup_steps, triton_cache_entries
from trainer.train.timing import PhaseTimer
from trainer.train.tracing import TraceWindow

MIN_STEP_SIZE = math.sqrt(3.0) / 1024.0  # instant-ngp MIN_CONE_STEPSIZE()
# training.precision → the fused MLP kernels' product precision (fp16 steps run the PyTorch MLPs)
MLP_PRECISION = {"fp32": "ieee", "tf32": "tf32", "bf16": "bf16", "fp16": "ieee"}
MAX_CONSECUTIVE_OVERFLOWS = 50  # fp16 steps the scaler may skip in a row before training stops
RAY_GRANULARITY = 64  # rays per step are a multiple of this (instant-ngp uses 256 on GPUs)
CAPACITY_GRANULARITY = 256  # a compacted batch holds a multiple of this many samples
KEPT_READ_LAG = 1  # training.compact_samples: a step's kept count sizes the rays this many steps later


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


def hash_grid_config(enc: EncodingConfig, aabb_scale: int, footprint_resolution: float | None = None) -> HashGridConfig:
    """The encoding block as a :class:`HashGridConfig` for a scene of this ``aabb_scale`` whose
    training views have this pixel-footprint resolution (None: not measured); the finest resolution
    from :meth:`~trainer.contract.config.EncodingConfig.finest_resolution`."""
    return HashGridConfig(
        n_levels=enc.n_levels,
        n_features_per_level=enc.n_features_per_level,
        log2_hashmap_size=enc.log2_hashmap_size,
        base_resolution=enc.base_resolution,
        per_level_scale=enc.per_level_scale,
        max_resolution=enc.finest_resolution(aabb_scale, footprint_resolution),
    )


def check_finest_resolution(path: Path, trainer_state: Any, finest_resolution: int | None) -> None:
    """Refuse a snapshot or checkpoint whose hash grid was built with another finest resolution.

    The resolution is derived from the scene's views unless ``encoding.max_resolution`` is set
    (:meth:`~trainer.contract.config.EncodingConfig.finest_resolution`), and it changes every level's
    resolution without changing any tensor's shape, so the shapes alone cannot catch it.

    Args:
        path: the snapshot or checkpoint folder (named in the error).
        trainer_state: its ``trainer_state`` entry (``finest_resolution`` absent in older ones:
            not checked).
        finest_resolution: this trainer's N_max (None with ``encoding.per_level_scale``).

    Raises:
        SnapshotError: the two differ; the message names both and the override.
    """
    stored = trainer_state.get("finest_resolution") if isinstance(trainer_state, dict) else None
    if stored is None or finest_resolution is None or int(stored) == finest_resolution:
        return
    raise SnapshotError(
        f"{path}: its hash grid was trained with a finest resolution of {int(stored)}, this config and "
        f"scene give {finest_resolution} (encoding.max_resolution, else derived from the training views); "
        f"load it with --set encoding.max_resolution={int(stored)}"
    )


def check_scene_model(path: Path, trainer_state: Any, scene_model: str) -> None:
    """Refuse a snapshot or checkpoint trained with another scene model (``training.scene_model``,
    :mod:`trainer.render.scene_model`): the field's domain and the occupancy grid's levels differ.

    Args:
        path: the snapshot or checkpoint folder (named in the error).
        trainer_state: its ``trainer_state`` entry (``scene_model`` absent: written before the
            unbounded model existed, a box model).
        scene_model: this trainer's scene model.

    Raises:
        SnapshotError: the two differ; the message names both and the override.
    """
    stored = trainer_state.get("scene_model", "box") if isinstance(trainer_state, dict) else "box"
    if stored == scene_model:
        return
    raise SnapshotError(
        f"{path}: trained with the scene model {stored!r}, this config and scene give {scene_model!r} "
        f"(training.scene_model); load it with --set training.scene_model={stored}"
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
        aabb=aabb,
        grid_cfg=hash_grid_config(cfg.encoding, aabb_scale, footprint_resolution),
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
    if cfg.training.mlp_backend == "triton":
        if not field.fused_mlp:
            warnings.warn("training.mlp_backend: 'triton' does not apply to these MLPs (the fused kernels take a "
                          "density MLP with 1 hidden layer and a colour MLP with 2, one width of 16-128, ReLU, no "
                          "output activation); the PyTorch path runs them", stacklevel=2)
        elif cfg.training.precision == "fp16":
            warnings.warn("training.mlp_backend: 'triton' runs fp32, tf32 and bf16 steps; with training.precision "
                          "'fp16' the PyTorch path runs the MLPs", stacklevel=2)
    return field.to(device)


def warn_config_differences(path: Path, saved: Any, cfg: TrainConfig) -> None:
    """Warn (one line) when a run resumes ``path`` with training settings other than the ones it
    was written with (:func:`trainer.contract.config.config_differences`): legal, but usually a forgotten
    ``--config``."""
    if not isinstance(saved, dict):
        return
    lines = config_differences(saved, cfg)
    if lines:
        more = f" (and {len(lines) - 6} more)" if len(lines) > 6 else ""
        warnings.warn(f"{path}: resuming with settings other than it was trained with: {'; '.join(lines[:6])}{more}; "
                      "pass its run's config.json as --config to continue the same training", stacklevel=2)


def check_trainable(cfg: TrainConfig) -> None:
    """Settings a config may hold but training cannot use (checked before any rank starts too).

    Raises:
        ConfigError: ``encoding.table_dtype`` float16 (Adam's moments and epsilon underflow in
            float16 and the loss turns NaN; float16 tables are for the encoding kernels and
            bench/encoding.py).
    """
    if cfg.encoding.table_dtype != "float32":
        raise ConfigError(
            f"encoding.table_dtype: training needs 'float32' tables, got {cfg.encoding.table_dtype!r} "
            "(float16 tables are for the encoding kernels and bench/encoding.py: Adam's moments and its "
            "epsilon underflow in float16 and the loss turns NaN)"
        )


def lr_factor(step: int, decay_start: int, decay_interval: int, decay_base: float) -> float:
    """Step decay of tiny-cuda-nn's ExponentialDecay: ``decay_base ** (1 + (step - start) // interval)``
    once ``step >= decay_start``, else 1."""
    if step < decay_start:
        return 1.0
    return decay_base ** (1 + (step - decay_start) // decay_interval)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


@dataclasses.dataclass
class StepStats:
    """Host-side numbers of one step."""

    n_rays: int
    n_samples: int
    skipped: bool
    trained: bool = True  # False when the step had no sample to train on (loss undefined)


class Trainer:
    """Single-process instant-NGP trainer.

    Args:
        cfg: the resolved :class:`TrainConfig`.
        scene: a loaded :class:`Scene` (training frames are ``scene.frames("train")``).
        run_dir: where metrics, evaluation results, renders and snapshots go, or None.
        pixel_table: the decoded training pixels (decoded here when None).

    Raises:
        ConfigError: for an impossible device/precision combination.
        SceneError: when the scene has no training frames.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        scene: Scene,
        run_dir: RunDir | None = None,
        pixel_table: PixelTable | None = None,
    ) -> None:
        self.created_s = time.perf_counter()
        self.triton_cache_before = triton_cache_entries()
        self._init_process(cfg)
        check_world_size(cfg, self.world_size)  # the process's one check of the world-size rules
        self.cfg = cfg
        self.scene = scene
        self.run_dir = run_dir
        t = cfg.training
        self.device = resolve_device(t.device)
        set_matmul_precision(self.device, t.precision)
        seed_everything(t.seed)
        self.train_frames = scene.frames("train")
        if not self.train_frames:
            from trainer.contract.errors import SceneError

            raise SceneError(
                f"{scene.root}: the scene has no training frames (splits: {scene.split_counts}; "
                "formats without splits hold out every data.holdout_every-th frame for testing)"
            )
        self.aabb_scale = scene.aabb_scale
        self.aabb = torch.tensor(scene.aabb, dtype=torch.float32, device=self.device)
        self.scene_choice: SceneModelChoice = choose_scene_model(t.scene_model, classify_capture(scene),
                                                                 cfg.parallel.mode)
        self.scene_model = self.scene_choice.model
        # the unbounded model: the field over the contracted cube (twice the box), the grid's shell
        self.contraction = SceneContraction.of_box(self.aabb_scale) if self.scene_choice.unbounded else None
        self.background_steps = t.background_steps if self.scene_choice.unbounded else 0
        field_box_np, self.field_scale = field_box(self.aabb_scale, self.scene_model)
        self.field_aabb = torch.tensor(field_box_np, dtype=torch.float32, device=self.device)
        self.footprint_resolution = footprint_resolution(self.train_frames, field_box_np)
        self.finest_resolution = cfg.encoding.finest_resolution(self.field_scale, self.footprint_resolution)
        check_trainable(cfg)
        self.field = self._build_model()
        self.grid = OccupancyGrid(
            aabb_scale=self.aabb_scale,
            resolution=t.occupancy_resolution,
            decay=t.occupancy_decay,
            threshold=t.occupancy_threshold,
            background_shell=self.scene_choice.unbounded,
        ).to(self.device)
        n_cascades = int(math.log2(self.aabb_scale)) + 1
        self.cone_angle = t.resolved_cone_angle(self.aabb_scale)
        self.max_step_size = MIN_STEP_SIZE * 2 ** (n_cascades - 1)
        self.march_backend = "triton" if use_triton_kernels("march_backend", t.march_backend, self.device) else "torch"
        self.triton_render = use_triton_kernels("render_backend", t.render_backend, self.device)
        self.compact = t.compact_samples
        # (rays, kept samples) of steps whose kept count is still on its way to the host
        self._kept_pending: collections.deque[tuple[int, HostCopy]] = collections.deque()
        self.optimizer = self._build_optimizer()
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=t.precision == "fp16")
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(t.seed)
        # Occupancy-grid updates draw from their own generator; one process shares it with the
        # rest of the step (distributed trainers give every rank an identically seeded one).
        self.grid_generator = self.generator
        budget = None if cfg.data.memory_budget_gib is None else int(cfg.data.memory_budget_gib * 2**30)
        placement = cfg.data.placement
        if placement == "auto":
            nbytes = pixel_table_nbytes(self.train_frames, downscale=scene.downscale)
            placement = choose_placement(nbytes, self.device, budget)
            note = placement_note(placement, nbytes, self.device, budget, scene.downscale)
            if note:
                warnings.warn(note, stacklevel=2)
        if pixel_table is None and placement != "stream":
            pixel_table = load_pixel_table(
                self.train_frames,
                downscale=scene.downscale,
                threads=cfg.data.decode_threads,
                cache_dir=Path(cfg.data.cache_dir) if cfg.data.cache_dir else None,
            )
        self.sampler = RaySampler(
            self.train_frames,
            pixel_table if placement != "stream" else None,
            placement=placement,
            device=self.device,
            seed=self.sampler_seed(),
            memory_budget_bytes=budget,
            downscale=scene.downscale,
            subpixel_jitter=t.subpixel_jitter,
            triton_rays=use_triton_kernels("rays_backend", t.rays_backend, self.device),
        )
        self.random_background = t.background == "random"
        self.fixed_background = torch.tensor(
            [1.0, 1.0, 1.0] if t.background == "white" else [0.0, 0.0, 0.0], device=self.device
        )
        self.step = 0
        self.n_rays = int(t.initial_rays_per_step)
        self.samples_per_ray_ema: float | None = None
        # called after each scored view of an evaluation: (views done, views in all, image record)
        self.eval_progress: Callable[[int, int, dict[str, Any]], None] | None = None
        self._step_s_by_kind: dict[bool, float] = {}  # occupancy-update step or not -> its last duration (s)
        self.eval_rays_progress: Callable[[int, int], None] | None = None
        self.train_time_s = 0.0
        faults = phase_faults(cfg.faults, self.rank)
        self.timer = PhaseTimer(self.device, enabled=cfg.profile.phase_timers, faults=faults)
        self._trace: TraceWindow | None = None
        self._overflow_run = 0
        self._zero_sample_steps = 0
        self._sample_phases = cfg.profile.phase_timers  # the captured step's timed eager step (capture.py)
        self.prefetcher = InputPrefetcher(self.device) if t.prefetch_march else None
        decay = cfg.optimizer.ema_decay
        self.weight_ema = WeightEMA(decay) if decay is not None else None
        # training.cuda_graphs: the fixed-capacity step (captured or eager), None for the dynamic one
        self.fixed_step, self.step_choice = resolve_fixed_step(self)
        if self.fixed_step is not None:
            self.prefetcher = None  # the fixed step never waits for the host: nothing to prepare ahead
        self.startup: StartupReport | None = None  # set when the start-up steps are done (startup.py)
        self._startup_recorded = False
        self._after_init()

    # ------------------------------------------------------------------ construction hooks
    rank = 0  # distributed trainers set their rank and world size in ``_init_process``
    world_size = 1
    max_consecutive_overflows = MAX_CONSECUTIVE_OVERFLOWS

    def _init_process(self, cfg: TrainConfig) -> None:
        """Runs first in ``__init__`` (distributed trainers read their rank and world size here)."""

    def _after_init(self) -> None:
        """Runs last in ``__init__`` (subclasses add their own state here)."""

    def sampler_seed(self) -> int:
        """Seed of the ray sampler (``training.seed``; data-parallel ranks add their rank)."""
        return self.cfg.training.seed

    def _build_model(self) -> torch.nn.Module:
        """The trained model (one :class:`NGPField`; the subgrid trainer builds its boxes)."""
        return build_field(self.cfg, self.field_aabb, self.field_scale, self.device, self.footprint_resolution,
                           len(self.train_frames), self.contraction)

    def _build_optimizer(self) -> torch.optim.Optimizer:
        """Adam over the field: hash-grid entries without weight decay, MLP weights with
        ``optimizer.l2_reg`` (group order: encoding, MLP), and the per-image colour maps without
        weight decay when ``training.appearance`` is on (a third group)."""
        adam = self._adam(list(self.field.encoding_parameters()), list(self.field.mlp_weight_parameters()))
        if self.field.appearance_parameters():
            adam.add_param_group({"params": self.field.appearance_parameters(), "weight_decay": 0.0, "lazy": False})
        return adam

    def _adam(self, encoding_params: list, mlp_params: list) -> torch.optim.Optimizer:
        """Adam with the config's hyper-parameters over two groups: ``encoding_params`` without
        weight decay (lazy with ``optimizer.lazy_grid_updates``, see :class:`GridAdam`),
        ``mlp_params`` with ``optimizer.l2_reg``. On CUDA PyTorch's fused kernel (one launch per
        parameter group instead of ~15 for the multi-tensor path) for the dense groups."""
        opt = self.cfg.optimizer
        return GridAdam(
            [
                {"params": encoding_params, "weight_decay": 0.0, "lazy": opt.lazy_grid_updates},
                {"params": mlp_params, "weight_decay": opt.l2_reg, "lazy": False},
            ],
            lr=opt.learning_rate,
            betas=(opt.beta1, opt.beta2),
            eps=opt.epsilon,
            fused=self.device.type == "cuda",  # one launch per group; foreach (the twin) elsewhere
        )

    def _time_budget_spent(self, time_budget_s: float) -> bool:
        """Whether the next step would end past the budget: :meth:`projected_train_time_s` above
        ``time_budget_s`` (distributed trainers agree across ranks). A run so stops within one step
        of its budget, and never starts a step it expects to overrun it (the first step always runs)."""
        return self.projected_train_time_s() > time_budget_s

    def _is_occupancy_step(self, step: int) -> bool:
        return step % self.cfg.training.occupancy_update_every == 0

    def projected_train_time_s(self) -> float:
        """Training time after the next step: ``train_time_s`` plus the last duration of a step
        of its kind (one that updates the occupancy grid, or one that does not: on a CPU an update
        step can take many times as long), or of the other kind before one of its own was timed."""
        durations = self._step_s_by_kind
        expected = durations.get(self._is_occupancy_step(self.step))
        if expected is None:
            expected = next((d for d in durations.values() if d is not None), 0.0)
        return self.train_time_s + expected

    def _periodic_save(self) -> None:
        """The snapshot written every ``snapshot_every`` steps."""
        self.save(self.run_dir.snapshot_path(self.step))

    # ------------------------------------------------------------------ one step
    def march(self, rays_o: torch.Tensor, rays_d: torch.Tensor, jitter: bool,
              generator: torch.Generator | None = None):
        """March rays [n,3] through the occupancy grid (see :func:`trainer.render.march.march_rays`);
        with ``jitter`` the offsets come from ``generator`` (default: the training generator)."""
        return march_rays(
            rays_o,
            rays_d,
            self.aabb,
            self.grid,
            step_size=MIN_STEP_SIZE,
            cone_angle=self.cone_angle,
            max_steps=self.cfg.training.max_march_steps,
            max_step_size=self.max_step_size,
            jitter=jitter,
            generator=(generator or self.generator) if jitter else None,
            near=self.cfg.training.near_distance,
            backend=self.march_backend,
            background_steps=self.background_steps,
        )

    def field_outputs(self, samples: PackedSamples) -> tuple[torch.Tensor, torch.Tensor]:
        """The field's densities [S] and colours [S, 3] at ``samples`` (with gradients, under the
        precision's autocast)."""
        with autocast(self.device, self.cfg.training.precision):
            return self.field(samples.positions, samples.directions)

    def _density_for_grid(self, positions: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), autocast(self.device, self.cfg.training.precision):
            return self.field.density(positions).float()

    def compaction_density(self, positions: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        """Density without gradient at the first ``count`` (device scalar) of ``positions`` [C, 3]
        (compaction's pass over the march buffers; rows past the count are not read)."""
        with torch.no_grad(), autocast(self.device, self.cfg.training.precision):
            return self.field.density(positions, count).float()

    def train_step(self) -> tuple[StepStats, torch.Tensor, torch.Tensor]:
        """Run one optimiser step. Returns host stats, the loss and the MSE (device scalars).

        The step's rays and samples were usually prepared during the previous step
        (:mod:`trainer.train.prefetch`); the march's sample count is the one host read of this
        step's work. With ``training.compact_samples`` the kept count of the step
        :data:`KEPT_READ_LAG` steps back is read too (it waits for that step's copy only).

        Raises:
            TrainingError: when, after the occupancy warm-up, no ray sample hits an occupied cell.
        """
        t = self.cfg.training
        timer = self.timer
        self._maybe_update_occupancy()
        if self.fixed_step is not None:  # training.cuda_graphs: the fixed-capacity step
            self.fixed_step.advance(sample_phases=self._sample_phases)
            self._sample_phases = False
            self.step += 1
            zero = torch.zeros((), device=self.device)
            return StepStats(0, 0, skipped=False, trained=False), zero, zero
        step_input = self._step_input(self.n_rays)
        samples, n_rays, n_samples = step_input.samples, step_input.n_rays, step_input.n_samples
        if n_samples == 0:
            self._zero_sample_steps += 1
            if self.step >= t.occupancy_warmup_steps:
                raise TrainingError(
                    f"no ray sample hit an occupied cell at step {self.step} (after the occupancy "
                    f"warm-up of {t.occupancy_warmup_steps} steps; occupied fraction "
                    f"{self.grid.occupancy_fraction():.3g}): the scene box {self.scene.aabb.tolist()} "
                    "may not be crossed by any camera ray, or the density is zero everywhere"
                )
            self.step += 1
            zero = torch.zeros((), device=self.device)
            return StepStats(n_rays, 0, skipped=True, trained=False), zero, step_input.target.var()
        self._zero_sample_steps = 0
        samples, ray_fits, n_trained, n_kept = self._training_samples(step_input)
        if n_kept is not None:
            self._kept_pending.append((n_rays, HostCopy(n_kept)))
        with timer.phase("field_forward"):
            sigmas, rgbs = self.field_outputs(samples)
        with timer.phase("render"):
            rgb = self._render_rgb(sigmas.float(), rgbs.float(), samples, step_input.background)
            rgb = self._appearance_rgb(rgb, step_input.batch.image_index)
            rgb = drop_rays(rgb, ray_fits, step_input.target)
            loss, mse = self._loss_and_mse(rgb, step_input.target, n_rays)
        self._backward(loss)
        skipped = self._optimizer_step()
        self.step += 1
        if self.compact:
            self._settle_kept(keep=KEPT_READ_LAG)
        else:
            self._resize_batch(n_rays, n_samples)
        self._prefetch_next(self.n_rays)
        return StepStats(n_rays, n_trained, skipped=skipped), loss.detach(), mse

    # ------------------------------------------------------------------ step phases (shared with subclasses)
    def _training_samples(
        self, step_input: StepInput
    ) -> tuple[PackedSamples, torch.Tensor | None, int, torch.Tensor | None]:
        """The samples the step trains on, which rays they cover whole, how many samples there
        are (host int) and how many were kept before the capacity cut (device scalar).

        Without ``training.compact_samples``: the marched samples, None (every ray), their count,
        None. With it (the "compact" phase, :mod:`trainer.render.compact`): a density pass without
        gradients over the marched samples, each ray's samples in front of its early stop, whole
        rays of them in a batch of :meth:`_compact_capacity` samples; ``ray_fits`` [n_rays] bool
        marks the rays in the batch. The caller sends the kept count to the host without waiting;
        it sizes the rays of a later step. Needs at least one marched sample.
        """
        samples = step_input.samples
        if not self.compact:
            return samples, None, step_input.n_samples, None
        with self.timer.phase("compact"):
            with torch.no_grad():
                with autocast(self.device, self.cfg.training.precision):
                    sigmas = self.field.density(samples.positions).float()
                if self.triton_render:
                    from trainer.render.triton_volrend import kept_counts_triton

                    kept = kept_counts_triton(sigmas, samples.dt, samples.packed_info, EARLY_STOP_TRANSMITTANCE)
                else:
                    kept = kept_counts(sigmas, samples.dt, samples, EARLY_STOP_TRANSMITTANCE)
                capacity = self._compact_capacity(step_input.n_rays, step_input.n_samples)
                compacted = compact_samples(samples, kept, capacity, triton=self.triton_render)
        return compacted.samples, compacted.ray_fits, capacity, compacted.n_kept

    def _compact_capacity(self, n_rays: int, n_marched: int) -> int:
        """Samples of a compacted batch: the rays times the kept samples per ray seen so far (about
        ``target_samples_per_step`` once the ray count has adapted), a multiple of 256, at most the
        marched count; the marched count until a kept count has been read."""
        ema = self.samples_per_ray_ema
        if ema is None:
            return n_marched
        wanted = int(math.ceil(n_rays * ema / CAPACITY_GRANULARITY)) * CAPACITY_GRANULARITY
        return max(1, min(n_marched, wanted))

    def _settle_kept(self, keep: int = 0) -> None:
        """Size the ray batch on the kept counts of earlier steps, oldest first, until at most
        ``keep`` are pending (each read waits only for its own step's count)."""
        while len(self._kept_pending) > keep:
            n_rays, kept = self._kept_pending.popleft()
            n_kept = int(kept.value())
            if n_kept > 0:
                self._resize_batch(n_rays, n_kept)

    def _maybe_update_occupancy(self) -> None:
        """Refresh the occupancy grid every ``training.occupancy_update_every`` steps."""
        t = self.cfg.training
        if self.step % t.occupancy_update_every == 0:
            self._rewind_prefetch()  # (none is made for such a step; the grid is about to change)
            with self.timer.phase("occupancy_update"):
                self.grid.update(
                    self.step,
                    self._density_for_grid,
                    warmup_steps=t.occupancy_warmup_steps,
                    generator=self.grid_generator,
                )
            if self.prefetcher is not None:
                self.prefetcher.mark_shared_state_written()

    def _background_and_target(self, batch: Any, n_rays: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The background colours [n_rays, 3] of the step and the batch's colours composited on them."""
        if self.random_background:
            background = torch.rand(n_rays, 3, device=self.device, generator=self.generator)
        else:
            background = self.fixed_background.expand(n_rays, 3)
        target = batch.rgb * batch.alpha + background * (1.0 - batch.alpha)
        return background, target

    def draw_batch(self, n_rays: int) -> Any:
        """The step's ``n_rays`` training rays (a :class:`~trainer.data.sampler.RayBatch`)."""
        return self.sampler.sample(n_rays)

    def _prepare_input(self, n_rays: int) -> StepInput:
        """The "data" and "march" phases: ``n_rays`` rays, their backgrounds and targets, and their
        jittered samples with the sample count read on the host (a sync on the current stream)."""
        with self.timer.phase("data"):
            batch = self.draw_batch(n_rays)
            background, target = self._background_and_target(batch, n_rays)
        with self.timer.phase("march"):
            samples = self.march(batch.rays_o, batch.rays_d, jitter=True)
            n_samples = int(samples.ray_indices.shape[0])
        return StepInput(batch, n_rays, background, target, samples, n_samples)

    def _step_input(self, n_rays: int) -> StepInput:
        """The input of the current step: the one prefetched during the previous step when it
        holds ``n_rays`` rays, else prepared now (a mismatching prefetch is rewound first)."""
        if self.prefetcher is not None:
            step_input = self.prefetcher.take(n_rays)
            if step_input is not None:
                return step_input
            self._rewind_prefetch()
        return self._prepare_input(n_rays)

    def _prefetch_next(self, n_rays: int) -> None:
        """Prepare the next step's input now (``training.prefetch_march``), unless that step
        starts with an occupancy update (the march must see the updated grid)."""
        if self.prefetcher is None or self.step % self.cfg.training.occupancy_update_every == 0:
            return
        self.prefetcher.prefetch(lambda: self._prepare_input(n_rays), self._draw_state())

    def _draw_state(self) -> dict[str, Any]:
        """States of the generators a step input draws from (step generator, sampler)."""
        return {"generator": self.generator.get_state(), "sampler": self.sampler.rng_state()}

    def _rewind_prefetch(self) -> None:
        """Drop a pending prefetched input and rewind the random draws it made."""
        dropped = self.prefetcher.drop() if self.prefetcher is not None else None
        if dropped is not None and dropped.rng_before is not None:
            self.generator.set_state(dropped.rng_before["generator"])
            self.sampler.set_rng_state(dropped.rng_before["sampler"])

    def _render_rgb(self, sigmas: torch.Tensor, rgbs: torch.Tensor, samples: PackedSamples,
                    background: torch.Tensor) -> torch.Tensor:
        """Ray colours [n_rays, 3] of the step's samples over their background: the Triton
        compositing kernels (``training.render_backend``) or :func:`composite`, its twin."""
        if self.triton_render:
            from trainer.render.triton_volrend import composite_rgb_triton

            return composite_rgb_triton(sigmas, rgbs, samples.dt, samples.packed_info, background,
                                        EARLY_STOP_TRANSMITTANCE)
        return composite(sigmas, rgbs, samples.dt, samples.ray_indices, samples.n_rays, background).rgb

    def _appearance_rgb(self, rgb: torch.Tensor, image_index: torch.Tensor) -> torch.Tensor:
        """Ray colours [n_rays, 3] as their training images record them (``training.appearance``;
        unchanged when it is off)."""
        appearance = self.field.appearance
        return rgb if appearance is None else appearance(rgb, image_index)

    def _loss_and_mse(self, rgb: torch.Tensor, target: torch.Tensor, n_rays: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss of rendered colours ``rgb`` [n_rays, 3] against ``target`` (normalised per
        channel and ray) and their mean squared error (detached)."""
        loss = photometric_loss(rgb, target, self.cfg.loss) / (n_rays * 3)
        mse = ((rgb.detach() - target) ** 2).mean()
        return loss, mse

    def _backward(self, loss: torch.Tensor) -> None:
        """The "backward" phase: clear the gradients, back-propagate the (scaled) loss."""
        with self.timer.phase("backward"):
            self.optimizer.zero_grad(set_to_none=True)
            self.scaler.scale(loss).backward()

    def _optimizer_step(self) -> bool:
        """The "optimizer" phase: learning rate, (scaled) Adam step, scaler update. Returns whether
        the grad scaler skipped the step (inf/nan gradients)."""
        with self.timer.phase("optimizer"):
            self._set_learning_rate()
            scale_before = self.scaler.get_scale() if self.scaler.is_enabled() else 1.0
            self.scaler.step(self.optimizer)
            self.scaler.update()
            skipped = self.scaler.is_enabled() and self.scaler.get_scale() < scale_before
            if self.weight_ema is not None and not skipped:  # an overflow step left the weights as they were
                self.weight_ema.update(list(self.field.parameters()))
        self._overflow_run = self._overflow_run + 1 if skipped else 0
        if self._overflow_run >= MAX_CONSECUTIVE_OVERFLOWS:
            raise TrainingError(
                f"fp16 gradients overflowed on {self._overflow_run} consecutive steps (grad scale now "
                f"{self.scaler.get_scale():.3g}): the model does not fit fp16's range; use "
                "training.precision bf16 or fp32"
            )
        return skipped

    def _synchronize(self) -> None:
        """Wait for the device (CUDA) to finish queued work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _set_learning_rate(self) -> None:
        """Learning rate of the current step: tiny-cuda-nn's ExponentialDecay on the base rate."""
        opt = self.cfg.optimizer
        lr = opt.learning_rate * lr_factor(self.step, opt.decay_start, opt.decay_interval, opt.decay_base)
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _resize_batch(self, n_rays: int, n_samples: int, scale: float = 1) -> None:
        """Adapt rays per step so samples per step approach the target (instant-ngp's rule);
        ``scale`` multiplies both the sample target and the ray limit (data parallel: world size)."""
        t = self.cfg.training
        per_ray = n_samples / max(n_rays, 1)
        ema = self.samples_per_ray_ema
        self.samples_per_ray_ema = per_ray if ema is None else 0.9 * ema + 0.1 * per_ray
        wanted = t.target_samples_per_step * scale / max(self.samples_per_ray_ema, 1e-3)
        wanted = int(math.ceil(wanted / RAY_GRANULARITY)) * RAY_GRANULARITY
        self.n_rays = max(RAY_GRANULARITY, min(int(t.max_rays_per_step * scale), wanted))

    # ------------------------------------------------------------------ state
    def _rng_state(self, **extra: torch.Tensor) -> dict[str, Any]:
        """The random states of this process: torch CPU, the step generator, ``extra`` (by
        name), torch CUDA (on a GPU) and the sampler's (``sampler_<name>``). A pending prefetched
        input is dropped first and its draws rewound, so the state is that of a step boundary."""
        self._rewind_prefetch()
        rng: dict[str, Any] = {"torch_cpu": torch.get_rng_state(), "generator": self.generator.get_state(), **extra}
        if self.device.type == "cuda":
            rng["torch_cuda"] = torch.cuda.get_rng_state(self.device)
        for name, value in self.sampler.rng_state().items():
            rng[f"sampler_{name}"] = value
        return rng

    def _set_rng_state(self, rng: dict[str, Any]) -> None:
        """Restore what :meth:`_rng_state` returned (extra entries are left to the caller)."""
        if self.prefetcher is not None:
            self.prefetcher.drop()
        torch.set_rng_state(rng["torch_cpu"])
        self.generator.set_state(rng["generator"])
        if "torch_cuda" in rng and self.device.type == "cuda":
            torch.cuda.set_rng_state(rng["torch_cuda"], self.device)
        self.sampler.set_rng_state({k[len("sampler_"):]: v for k, v in rng.items() if k.startswith("sampler_")})

    def _restore_counters(self, step: Any, state: dict[str, Any], ema: float | None) -> None:
        """Step, rays per step, samples-per-ray EMA (None: unset) and training time of a resume;
        the weight average starts again from the loaded weights (it is not in snapshots)."""
        if self.weight_ema is not None:
            self.weight_ema = WeightEMA(self.weight_ema.decay)
        self.step = int(step)
        self.n_rays = int(state["n_rays"])
        self.samples_per_ray_ema = ema
        self.train_time_s = float(state["train_time_s"])
        self._kept_pending.clear()  # counts of the steps this trainer ran before the resume

    def state_dict(self) -> dict[str, Any]:
        rng = self._rng_state()
        # kept counts still in flight are saved, not applied: applying them now would size the
        # next step's rays early and make a run with snapshots differ from one without
        kept_pending = [[n_rays, int(kept.value())] for n_rays, kept in self._kept_pending]
        return {
            "step": self.step,
            "config": config_to_dict(self.cfg),
            "model": self.field.state_dict(),
            "occupancy": self.grid.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng,
            "trainer_state": {
                "n_rays": self.n_rays,
                "samples_per_ray_ema": -1.0 if self.samples_per_ray_ema is None else self.samples_per_ray_ema,
                "train_time_s": self.train_time_s,
                "kept_pending": kept_pending,
                "finest_resolution": self.finest_resolution,
                "scene_model": self.scene_model,
                **({"fixed_step": self.fixed_step.state_dict()} if self.fixed_step is not None else {}),
            },
        }

    def save(self, path: Path) -> Path:
        """Write a snapshot atomically (see :mod:`trainer.train.snapshot`)."""
        return save_snapshot(path, self.state_dict())

    def load(self, path: Path) -> None:
        """Restore a snapshot written by :meth:`save`.

        Raises:
            SnapshotError: truncated/corrupt file, or a snapshot of another config (names the entry).
        """
        payload = load_snapshot(path)
        warn_config_differences(path, payload.get("config"), self.cfg)
        check_finest_resolution(path, payload.get("trainer_state"), self.finest_resolution)
        check_scene_model(path, payload.get("trainer_state"), self.scene_model)
        if self.fixed_step is not None:
            self.fixed_step.forget_graph()  # the optimiser's tensors are about to be replaced
        load_state_checked(self.field, payload["model"], "model", path)
        load_state_checked(self.grid, payload["occupancy"], "occupancy grid", path)
        try:
            self.optimizer.load_state_dict(payload["optimizer"])
        except (ValueError, KeyError, RuntimeError, TypeError) as exc:
            raise SnapshotError(f"{path}: optimiser state does not match this config ({exc})") from None
        if self.scaler.is_enabled() and payload["scaler"]:
            self.scaler.load_state_dict(payload["scaler"])  # an fp32 snapshot resumed in fp16 starts a fresh scaler
        try:
            self._set_rng_state(payload["rng"])
            state = payload["trainer_state"]
            ema = float(state["samples_per_ray_ema"])
            self._restore_counters(payload["step"], state, None if ema < 0 else ema)
            for n_rays, n_kept in state.get("kept_pending", []):  # (absent in older snapshots)
                self._kept_pending.append((int(n_rays), HostCopy(torch.tensor(int(n_kept)))))
            if self.fixed_step is not None and "fixed_step" in state:
                self.fixed_step.load_state_dict(state["fixed_step"])
        except (KeyError, TypeError, ValueError, RuntimeError) as exc:
            raise SnapshotError(f"{path}: random-number or trainer state is unusable ({type(exc).__name__}: {exc})") from None
        if self.run_dir is not None:  # resuming into the run it came from: forget the lost steps
            truncate_metrics_after(self.run_dir.metrics_path(self.rank), self.step)

    def warm_start(self, path: Path) -> int:
        """Start from another run's snapshot: its model and occupancy grid, with a fresh optimiser,
        learning-rate schedule, step counter and random state (a neighbouring time step of a
        sequence, or any scene trained with the same config).

        Returns:
            The snapshot's step.

        Raises:
            SnapshotError: truncated/corrupt file, or a snapshot of another config (names the entry).
        """
        payload = load_snapshot(path)
        warn_config_differences(path, payload.get("config"), self.cfg)
        check_finest_resolution(path, payload.get("trainer_state"), self.finest_resolution)
        check_scene_model(path, payload.get("trainer_state"), self.scene_model)
        if self.fixed_step is not None:
            self.fixed_step.forget_graph()
        load_state_checked(self.field, payload["model"], "model", path)
        load_state_checked(self.grid, payload["occupancy"], "occupancy grid", path)
        if self.weight_ema is not None:
            self.weight_ema = WeightEMA(self.weight_ema.decay)
        return int(payload["step"])

    # ------------------------------------------------------------------ loop
    def _memory_record(self) -> dict[str, float]:
        rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        record = {"host_rss_mib": rss_mib}
        if self.device.type == "cuda":
            record["mem_allocated_mib"] = torch.cuda.max_memory_allocated(self.device) / 2**20
            record["mem_reserved_mib"] = torch.cuda.memory_reserved(self.device) / 2**20
            torch.cuda.reset_peak_memory_stats(self.device)
        return record

    def train(
        self,
        n_steps: int | None = None,
        time_budget_s: float | None = None,
        on_log: Callable[[dict[str, Any]], None] | None = None,
        on_eval: Callable[[dict[str, Any]], None] | None = None,
        snapshot_every: int = 0,
        eval_every: int = 0,
        on_step: Callable[[int, float], None] | None = None,
    ) -> dict[str, Any]:
        """Train until ``n_steps`` steps are done (counted from step 0, so a resumed run
        finishes at the same step) or ``time_budget_s`` seconds of training have passed.
        ``on_step(step, train_time_s)`` is called after every step (a progress display).

        The first call starts with the start-up steps (:mod:`trainer.train.startup`): their seconds
        are not training time; when they are done, :attr:`startup` holds the report and a metrics
        record carrying it is written.

        Returns the last metrics record.
        """
        t = self.cfg.training
        n_steps = t.n_steps if n_steps is None else n_steps
        time_budget_s = t.time_budget_s if time_budget_s is None else time_budget_s
        writer = MetricsWriter(self.run_dir.metrics_path(self.rank),
                               open_scalars(self.cfg, self.run_dir, self.rank, self.device, self.step)) if self.run_dir else None
        last_record: dict[str, Any] = {}
        interval = {"steps": 0, "trained": 0, "rays": 0, "samples": 0, "skipped": 0, "t0": time.perf_counter()}
        loss_sum = torch.zeros((), device=self.device)
        mse_sum = torch.zeros((), device=self.device)
        def flush(eval_result: dict[str, Any] | None = None) -> dict[str, Any]:
            """Write the interval's record (one CUDA sync), with the evaluation made at its step if
            any, and start a new interval."""
            nonlocal interval, loss_sum, mse_sum
            record = self._interval_record(interval, loss_sum, mse_sum)
            if eval_result is not None:
                record["eval_psnr_db"] = eval_result["mean_psnr_db"]
                record["eval_ssim"] = eval_result["mean_ssim"]
            if writer:
                writer.write(record)
            if on_log:
                on_log(record)
            check_interval(record, self.field, self.step)  # a NaN loss or parameter stops the run here
            interval = {"steps": 0, "trained": 0, "rays": 0, "samples": 0, "skipped": 0, "t0": time.perf_counter()}
            loss_sum = torch.zeros((), device=self.device)
            mse_sum = torch.zeros((), device=self.device)
            return record

        startup_until = None
        if self.startup is None:
            startup_until = self.step + startup_steps(self.step_choice.kind, WARMUP_STEPS)
        try:
            while self.step < n_steps:
                if time_budget_s is not None and self._time_budget_spent(time_budget_s):
                    break
                inject_step_faults(self.cfg.faults, self.rank, self.step)
                self._trace_window_edge()
                t_step = time.perf_counter()
                occupancy_step = self._is_occupancy_step(self.step)
                stats, loss, mse = self.train_step()
                if stats.trained and not stats.skipped:  # an fp16 overflow step's loss is not data
                    loss_sum += loss
                    mse_sum += mse
                    interval["trained"] += 1
                interval["steps"] += 1
                interval["rays"] += stats.n_rays
                interval["samples"] += stats.n_samples
                interval["skipped"] += int(stats.skipped)
                done = self.step >= n_steps
                timed_step = startup_until is None
                if startup_until is not None:  # a start-up step: its seconds are not training
                    if self.step >= startup_until or done:
                        self._synchronize()
                        self.startup = self._startup_report(self.step - startup_until + startup_steps(
                            self.step_choice.kind, WARMUP_STEPS))
                        startup_until = None
                        self.timer.collect()  # start-up phase times are not the interval's
                        interval["t0"] = time.perf_counter()
                        interval["untimed"] = interval["steps"]
                    t_step = time.perf_counter()
                eval_now = bool(eval_every) and self.step % eval_every == 0 and not done
                if self.step % t.log_every == 0 or done or eval_now:
                    self._synchronize()
                    step_s = time.perf_counter() - t_step
                    self.train_time_s += step_s
                    result = None
                    if eval_now:  # its PSNR goes into this step's record; its time is not training
                        t_eval = time.perf_counter()
                        result = self.evaluate(max_images=t.eval_every_max_images)
                        interval["t0"] += time.perf_counter() - t_eval
                        if on_eval:
                            on_eval(result)
                    last_record = flush(result)
                else:
                    step_s = time.perf_counter() - t_step
                    self.train_time_s += step_s
                if timed_step:
                    self._step_s_by_kind[occupancy_step] = step_s
                if self.run_dir and snapshot_every and self.step % snapshot_every == 0:
                    self._periodic_save()
                if on_step:
                    on_step(self.step, self.train_time_s)
            if interval["steps"] > 0:  # stopped by the time budget between two records
                self._synchronize()
                last_record = flush()
        except TrainingError as exc:  # an empty occupancy grid may be a diverged model's doing
            raise diverged_instead(exc, self.field, self.step) or exc
        finally:
            if writer:
                writer.close()
            if self._trace is not None:  # the run ended inside the window: keep what was recorded
                self._trace.stop()
                self._trace = None
        return last_record

    def _startup_report(self, steps: int) -> StartupReport:
        """The start-up's report once its ``steps`` steps are done (the device is idle)."""
        return StartupReport(
            startup_s=time.perf_counter() - self.created_s,
            startup_steps=steps,
            kernels_compiled=max(0, triton_cache_entries() - self.triton_cache_before),
            step_kind=self.step_choice.kind,
            step_reason=self.step_choice.reason,
        )

    def _trace_window_edge(self) -> None:
        """Open or close the ``profile.trace_steps`` / cudaProfiler window at its first and end step."""
        window = self.cfg.profile.window()
        if window is None:
            return
        start, stop = window
        if self._trace is None and start <= self.step < stop:
            trace_path = None
            if self.cfg.profile.trace_steps is not None and self.run_dir is not None:
                trace_path = self.run_dir.trace_path(self.rank)
            self._trace = TraceWindow(self.device, trace_path, self.cfg.profile.cuda_profiler_range, self.timer)
            self._trace.start()
        elif self._trace is not None and self.step >= stop:
            self._trace.stop()
            self._trace = None

    def _interval_record(self, interval: dict, loss_sum: torch.Tensor, mse_sum: torch.Tensor) -> dict[str, Any]:
        """The interval's metrics record. Counts cover every step of the interval; times and rates
        only its timed steps (an interval that held start-up steps: ``interval["untimed"]``)."""
        steps = max(interval["steps"], 1)
        timed = max(steps - interval.get("untimed", 0), 1)
        elapsed_s = max(time.perf_counter() - interval["t0"], 1e-9)
        phases = self.timer.collect()
        step_time_ms = elapsed_s * 1e3 / timed
        trained = interval.get("trained", steps)
        mean_mse = float(mse_sum) / trained if trained else 0.0
        record: dict[str, Any] = {
            "rank": 0,
            "world_size": 1,
            "step": self.step,
            "wall_time_s": self.train_time_s,
            "loss": float(loss_sum) / trained if trained else None,
            "train_psnr_db": -10.0 * math.log10(mean_mse) if mean_mse > 0 else None,
            "lr": float(self.optimizer.param_groups[0]["lr"]),  # (a device tensor in a captured step)
            "rays_per_step": interval["rays"] / steps,
            "samples_per_step": interval["samples"] / steps,
            "rays_per_s": interval["rays"] / steps * timed / elapsed_s,
            "throughput_samples_per_s": interval["samples"] / steps * timed / elapsed_s,
            "rank_rays_per_s": interval["rays"] / steps * timed / elapsed_s,
            "rank_throughput_samples_per_s": interval["samples"] / steps * timed / elapsed_s,
            "steps_per_s": timed / elapsed_s,
            "step_time_ms": step_time_ms,
            "occupancy_fraction": self.grid.occupancy_fraction(),
            "skipped_steps": interval["skipped"],
            "samples_clipped": 0,  # the dynamic step's march buffer grows to fit
            "grad_scale": self.scaler.get_scale() if self.scaler.is_enabled() else 1.0,
            "emulated_interconnect": self.cfg.distributed.emulate_interconnect if self.world_size > 1 else "none",
        }
        named_ms = 0.0
        for phase in PHASES:
            ms = phases.get(phase, 0.0) / timed
            record[f"{phase}_ms"] = ms
            named_ms += ms
        record["other_ms"] = max(step_time_ms - named_ms, 0.0)
        if self.fixed_step is not None:  # its sums live on the device (read here, once)
            record.update(self.fixed_step.interval_values(interval["steps"], elapsed_s, timed))
            record.update(self.fixed_step.sampled_phase_ms(record, timed, step_time_ms))
            self._sample_phases = self.cfg.profile.phase_timers
        record.update(self._memory_record())
        if self.startup is not None and not self._startup_recorded:
            record.update(self.startup.record())
            self._startup_recorded = True
        return record

    def evaluate(self, split: str | None = None, max_images: int | None = None, save_renders: bool = True,
                 spp: int | None = None) -> dict[str, Any]:
        """Render the evaluation split and compute PSNR/SSIM (see :func:`trainer.train.evaluate.evaluate`;
        ``spp`` None takes ``training.eval_spp``)."""
        t = self.cfg.training
        with self.inference_weights():
            return evaluate(
                self,
                split=split,
                max_images=t.eval_max_images if max_images is None else max_images,
                save_renders=save_renders,
                spp=spp,
            )

    def inference_weights(self) -> contextlib.AbstractContextManager:
        """Within the block the field holds the weights evaluation renders with: the debiased EMA
        of ``optimizer.ema_decay`` (:mod:`trainer.train.ema`), else the trained weights."""
        if self.weight_ema is None:
            return contextlib.nullcontext()
        return self.weight_ema.applied(list(self.field.parameters()))

    def close(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.drop()
        self.sampler.close()


def train_from_config(
    cfg: TrainConfig,
    scene_path: Path,
    run_dir: RunDir | None,
    resume: Path | None = None,
    on_log: Callable[[dict[str, Any]], None] | None = None,
) -> Trainer:
    """Load the scene and build a :class:`Trainer` (optionally resumed)."""
    scene = load_scene(scene_path, **cfg.data.scene_options())
    trainer = Trainer(cfg, scene, run_dir)
    if resume is not None:
        trainer.load(Path(resume))
    return trainer


__all__ = ["Trainer", "train_from_config", "build_field", "hash_grid_config", "lr_factor", "resolve_device"]
