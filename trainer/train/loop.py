"""The single-process instant-NGP trainer (DESIGN.md §2).

A :class:`Trainer` builds what training is made of (the field, the occupancy grid, the ray sampler,
the optimiser) and composes one training :class:`~trainer.train.step.Step`, chosen by
:func:`~trainer.train.step_choice.choose_step` (dynamic, fixed capacity, captured; the distributed
trainers of :mod:`trainer.parallel` run theirs). Its :meth:`Trainer.train` loop delegates: the
step to the Step, the loop and its clocks to :mod:`trainer.train.training_loop`, interval records
to :mod:`trainer.train.records`, snapshots to
:mod:`trainer.train.snapshot_state`, the profiling window to :mod:`trainer.train.tracing`, the
start-up report to :mod:`trainer.train.startup`, the time budget's look-ahead to
:mod:`trainer.train.budget`. A loss or parameter that is no longer finite stops the run as
diverged (:mod:`trainer.train.divergence`), checked at every interval record and before every
snapshot.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any, Callable

import torch

from trainer.contract.config import DERIVED_SETTINGS, TrainConfig
from trainer.contract.errors import SceneError
from trainer.contract.rundir import RunDir
from trainer.contract.world import check_world_size
from trainer.data import Scene, load_scene
from trainer.data.capture_kind import classify_capture
from trainer.data.footprint import footprint_resolution
from trainer.data.images import PixelTable
from trainer.render.contraction import SceneContraction
from trainer.render.march import PackedSamples, march_rays
from trainer.render.occupancy import MIN_STEP_SIZE, OccupancyGrid
from trainer.render.scene_model import SceneModelChoice, choose_scene_model, field_box
from trainer.train.batch_size import BatchSizer
from trainer.train.budget import StepDurations
from trainer.train.records import RunThroughput
from trainer.train.build import build_field, hash_grid_config, resolve_device, seed_everything, use_triton_kernels
from trainer.train.trainable import check_trainable
from trainer.train.evaluate import evaluate
from trainer.train.faults import phase_faults
from trainer.train.inputs import StepInputs, build_sampler
from trainer.train.optimization import Optimization, build_adam
from trainer.train.phases import OccupancyRefresh
from trainer.train.precision import set_matmul_precision
from trainer.train.prefetch import InputPrefetcher
from trainer.train.snapshot import save_snapshot
from trainer.train.snapshot_state import load_snapshot_into, snapshot_payload, warm_start_from
from trainer.train.startup import StartupClock, StartupReport
from trainer.train.training_loop import TrainingLoop
from trainer.train.step import Step, StepOutcome
from trainer.train.step_choice import choose_step
from trainer.train.timing import PhaseTimer
from trainer.train.tracing import TraceSchedule

__all__ = ["Trainer", "train_from_config"]


class Trainer:
    """Single-process instant-NGP trainer.

    Args:
        cfg: the resolved :class:`TrainConfig`.
        scene: a loaded :class:`Scene` (training frames are ``scene.frames("train")``).
        run_dir: where metrics, evaluation results, renders and snapshots go, or None.
        pixel_table: the decoded training pixels (decoded here when None).

    Attributes:
        field, grid: the trained model and its occupancy grid.
        sampler, generator, grid_generator: the training rays and the step's and the occupancy
            update's random generators (one and the same in one process).
        inputs, batch_sizing, optim, occupancy_refresh: the step's parts
            (:mod:`~trainer.train.inputs`, :mod:`~trainer.train.batch_size`,
            :mod:`~trainer.train.optimization`, :class:`~trainer.train.phases.OccupancyRefresh`).
        stepper, step_choice: the :class:`~trainer.train.step.Step` and why it was chosen.
        step, train_time_s: steps done and seconds of training (start-up and evaluation excluded).
        step_durations: the last timed step of each kind (:mod:`trainer.train.budget`).
        startup: the :class:`~trainer.train.startup.StartupReport`, once the start-up steps are done.

    Raises:
        ConfigError: for an impossible device/precision combination.
        SceneError: when the scene has no training frames.
    """

    rank = 0  # distributed trainers set their rank and world size before this constructor runs
    world_size = 1
    parallel_step: Callable[[Any], Step] | None = None  # a distributed trainer's step

    def __init__(self, cfg: TrainConfig, scene: Scene, run_dir: RunDir | None = None,
                 pixel_table: PixelTable | None = None) -> None:
        self.startup_clock = StartupClock()
        check_world_size(cfg, self.world_size)  # the process's one check of the world-size rules
        self.cfg, self.scene, self.run_dir = cfg, scene, run_dir
        t = cfg.training
        self.device = resolve_device(t.device)
        set_matmul_precision(self.device, t.precision)
        seed_everything(t.seed)
        self.train_frames = scene.frames("train")
        if not self.train_frames:
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
        self.distortion_weight = cfg.loss.resolved_distortion_weight(self.scene_choice.unbounded)
        self.l2_reg = cfg.optimizer.resolved_l2_reg(self.scene_choice.unbounded)
        self.alpha_weight = cfg.loss.resolved_alpha_weight(self.scene_choice.capture.kind == "object")
        field_box_np, self.field_scale = field_box(self.aabb_scale, self.scene_model)
        self.field_aabb = torch.tensor(field_box_np, dtype=torch.float32, device=self.device)
        self.footprint_resolution = footprint_resolution(self.train_frames, field_box_np)
        check_trainable(cfg)
        # the hash grid as built: encoding's values, null ones chosen by the scene model and the views
        self.grid_config = hash_grid_config(cfg.encoding, self.field_scale, self.footprint_resolution,
                                            self.scene_choice.unbounded)
        self.hash_grid = (self.grid_config.n_features_per_level, self.grid_config.log2_hashmap_size)  # (F, log2 T)
        self.finest_resolution = self.grid_config.max_resolution
        self.field = self.build_model()
        self.grid = OccupancyGrid(aabb_scale=self.aabb_scale, resolution=t.occupancy_resolution,
                                  decay=t.occupancy_decay, threshold=t.occupancy_threshold,
                                  background_shell=self.scene_choice.unbounded).to(self.device)
        self.cone_angle = t.resolved_cone_angle(self.aabb_scale)
        self.max_step_size = MIN_STEP_SIZE * 2 ** int(math.log2(self.aabb_scale))  # the coarsest cascade's
        self.march_backend = "triton" if use_triton_kernels("march_backend", t.march_backend, self.device) else "torch"
        self.triton_render = use_triton_kernels("render_backend", t.render_backend, self.device)
        self.compact = t.compact_samples
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(t.seed)
        # Occupancy-grid updates draw from their own generator; one process shares it with the
        # rest of the step (distributed trainers give every rank an identically seeded one).
        self.grid_generator = self.generator
        self.sampler = build_sampler(cfg, self.train_frames, scene.downscale, self.device, self.sampler_seed(),
                                     pixel_table)
        self.timer = PhaseTimer(self.device, enabled=cfg.profile.phase_timers,
                                faults=phase_faults(cfg.faults, self.rank))
        self.optim = Optimization(cfg, self.build_optimizer(), self.device, self.timer, lambda: self.field.parameters())
        prefetcher = InputPrefetcher(self.device) if t.prefetch_march else None
        self.inputs = StepInputs(self.sampler, self.generator, t.background, self.device, self.timer,
                                 lambda rays_o, rays_d, jitter: self.march(rays_o, rays_d, jitter=jitter), prefetcher)
        self.batch_sizing = BatchSizer(t)
        self.occupancy_refresh = OccupancyRefresh(self.grid, t, self.timer, self.inputs)
        self.step = 0
        self.train_time_s = 0.0
        self.step_durations = StepDurations()
        self.run_throughput = RunThroughput()  # the job's samples/s over this process's records
        # called after each scored view of an evaluation: (views done, views in all, image record),
        # and after each chunk of its rays: (rays done, rays in all)
        self.eval_progress: Callable[[int, int, dict[str, Any]], None] | None = None
        self.eval_rays_progress: Callable[[int, int], None] | None = None
        self.tracing = TraceSchedule(cfg.profile, self.device, run_dir, self.rank, self.timer)
        self.stepper, self.step_choice = choose_step(self, self.parallel_step)
        if not self.stepper.prefetches:  # a step that never waits for the host prepares nothing ahead
            self.inputs.prefetcher = None
        self.startup: StartupReport | None = None  # set when the start-up steps are done

    # ------------------------------------------------------------------ construction hooks
    def sampler_seed(self) -> int:
        """Seed of the ray sampler (``training.seed``; data-parallel ranks add their rank)."""
        return self.cfg.training.seed

    def build_model(self) -> torch.nn.Module:
        """The trained model (one :class:`~trainer.model.field.NGPField`, with a colour map per
        training image under ``training.appearance``; the subgrid trainer builds its boxes)."""
        return build_field(self.cfg, self.field_aabb, self.field_scale, self.device, self.footprint_resolution,
                           len(self.train_frames), self.contraction)

    def build_optimizer(self) -> torch.optim.Optimizer:
        """Adam over the field (:func:`~trainer.train.optimization.build_adam`): hash-grid entries
        without weight decay, MLP weights with :attr:`l2_reg` (``optimizer.l2_reg`` resolved), and the per-image colour maps
        without weight decay when ``training.appearance`` is on (a third group)."""
        return build_adam(self.cfg.optimizer, list(self.field.encoding_parameters()),
                          list(self.field.mlp_weight_parameters()), self.device, self.l2_reg,
                          self.field.appearance_parameters())

    # ------------------------------------------------------------------ parts
    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.optim.optimizer

    @property
    def scaler(self) -> torch.amp.GradScaler:
        return self.optim.scaler

    @property
    def weight_ema(self) -> Any:
        return self.optim.weight_ema

    @property
    def n_rays(self) -> int:
        """Rays of the next step (batch sizing on the host)."""
        return self.batch_sizing.n_rays

    @property
    def samples_per_ray_ema(self) -> float | None:
        return self.batch_sizing.samples_per_ray_ema

    @property
    def prefetcher(self) -> InputPrefetcher | None:
        return self.inputs.prefetcher

    def derived_settings(self) -> dict[str, int | float]:
        """The value this run chose for each setting of
        :data:`~trainer.contract.config.DERIVED_SETTINGS` that its config leaves null (``status.json``'s
        ``derived_settings``): dotted key → the scene's box (``data.aabb_scale``), the size rule's
        factor (``data.downscale``), the hash grid's F and log2 T, its per-level scale b and finest
        resolution N_max (the one the config does not give), the distortion weight, the MLP weights'
        L2 regularisation and the cone angle the run trains with."""
        features, log2_size = self.hash_grid
        chosen: dict[str, int | float | None] = {
            "data.aabb_scale": self.aabb_scale,
            "data.downscale": self.scene.downscale,
            "encoding.n_features_per_level": features,
            "encoding.log2_hashmap_size": log2_size,
            "encoding.per_level_scale": self.grid_config.growth_factor,
            "encoding.max_resolution": self.finest_resolution,  # None: per_level_scale gives the levels
            "loss.distortion_weight": self.distortion_weight,
            "optimizer.l2_reg": self.l2_reg,
            "training.cone_angle": self.cone_angle,
        }
        assert tuple(chosen) == DERIVED_SETTINGS, "every derived setting has its value here"

        def unset(key: str) -> bool:
            block, _, name = key.partition(".")
            return getattr(getattr(self.cfg, block), name) is None

        return {key: value for key, value in chosen.items() if value is not None and unset(key)}

    def march(self, rays_o: torch.Tensor, rays_d: torch.Tensor, jitter: bool,
              generator: torch.Generator | None = None) -> PackedSamples:
        """March rays [n,3] through the occupancy grid (see :func:`trainer.render.march.march_rays`);
        with ``jitter`` the offsets come from ``generator`` (default: the training generator)."""
        return march_rays(rays_o, rays_d, self.aabb, self.grid, step_size=MIN_STEP_SIZE, cone_angle=self.cone_angle,
                          max_steps=self.cfg.training.max_march_steps, max_step_size=self.max_step_size,
                          jitter=jitter, generator=(generator or self.generator) if jitter else None,
                          near=self.cfg.training.near_distance, backend=self.march_backend,
                          background_steps=self.background_steps)

    def train_step(self) -> StepOutcome:
        """Run one optimiser step (:meth:`~trainer.train.step.Step.advance`): host stats, the
        loss and the MSE (device scalars)."""
        return self.stepper.advance()

    def synchronize(self) -> None:
        """Wait for the device (CUDA) to finish queued work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def time_budget_spent(self, time_budget_s: float) -> bool:
        """Whether the next step would end past the budget: :meth:`projected_train_time_s` above
        ``time_budget_s`` (distributed trainers agree across ranks). A run so stops within one step
        of its budget, and never starts a step it expects to overrun it (the first step always runs)."""
        return self.projected_train_time_s() > time_budget_s

    def agreed_train_time_s(self) -> float:
        """The training time the ranks agree on at a metrics record: this process's
        ``train_time_s`` (distributed trainers take rank 0's; called at the same steps on every
        rank)."""
        return self.train_time_s

    def projected_train_time_s(self) -> float:
        """Training time after the next step: ``train_time_s`` plus the last duration of a step of
        its kind (:class:`~trainer.train.budget.StepDurations`)."""
        return self.train_time_s + self.step_durations.expected_s(self.occupancy_refresh.due(self.step))

    # ------------------------------------------------------------------ snapshots
    def state_dict(self) -> dict[str, Any]:
        """The snapshot payload (:func:`~trainer.train.snapshot_state.snapshot_payload`)."""
        return snapshot_payload(self)

    def save(self, path: Path) -> Path:
        """Write a snapshot atomically (see :mod:`trainer.train.snapshot`)."""
        return save_snapshot(path, self.state_dict())

    def periodic_save(self) -> None:
        """The snapshot written every ``snapshot_every`` steps."""
        self.save(self.run_dir.snapshot_path(self.step))

    def load(self, path: Path) -> None:
        """Restore a snapshot written by :meth:`save` (:func:`~trainer.train.snapshot_state.load_snapshot_into`).

        Raises:
            SnapshotError: truncated/corrupt file, or a snapshot of another config (names the entry).
        """
        load_snapshot_into(self, Path(path))

    def warm_start(self, path: Path) -> int:
        """Start from another run's snapshot's model and occupancy grid; returns its step
        (:func:`~trainer.train.snapshot_state.warm_start_from`).

        Raises:
            SnapshotError: truncated/corrupt file, or a snapshot of another config (names the entry).
        """
        return warm_start_from(self, Path(path))

    # ------------------------------------------------------------------ loop
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
        finishes at the same step) or ``time_budget_s`` seconds of training have passed (no step
        is started that is expected to end past it, :meth:`time_budget_spent`).
        ``on_step(step, train_time_s)`` is called after every step (a progress display, the live
        viewer); ``on_log(record)`` after every interval record, ``on_eval(result)`` after every
        periodic evaluation (``eval_every`` steps and the ``training.eval_at_s`` marks,
        ``training.eval_every_max_images`` views).

        The first call starts with the start-up steps (:mod:`trainer.train.startup`): their seconds
        are not training time; when they are done, :attr:`startup` holds the report and the next
        metrics record carries it.

        Returns the last metrics record.

        Raises:
            DivergedError: the loss or a parameter is NaN or infinite at a record or a snapshot, or
                it caused a training error (an empty occupancy grid).
            TrainingError: as :meth:`~trainer.train.step.Step.advance`.
        """
        return TrainingLoop(self).run(n_steps, time_budget_s, on_log=on_log, on_eval=on_eval,
                                      snapshot_every=snapshot_every, eval_every=eval_every, on_step=on_step)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, split: str | None = None, max_images: int | None = None, save_renders: bool = True,
                 spp: int | None = None) -> dict[str, Any]:
        """Render the evaluation split and compute PSNR/SSIM (see :func:`trainer.train.evaluate.evaluate`;
        ``spp`` None takes ``training.eval_spp``)."""
        t = self.cfg.training
        with self.inference_weights():
            return evaluate(self, split=split, max_images=t.eval_max_images if max_images is None else max_images,
                            save_renders=save_renders, spp=spp)

    def inference_weights(self) -> contextlib.AbstractContextManager:
        """Within the block the field holds the weights evaluation renders with: the debiased EMA
        of ``optimizer.ema_decay`` (:mod:`trainer.train.ema`), else the trained weights."""
        if self.weight_ema is None:
            return contextlib.nullcontext()
        return self.weight_ema.applied(list(self.field.parameters()))

    def close(self) -> None:
        """Release the step's and the sampler's background work."""
        self.inputs.drop()
        self.stepper.close()
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
