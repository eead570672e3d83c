"""Distributed training: the data-parallel trainer and what it shares with the subgrid trainer
(DESIGN.md §3). The subgrid trainer is in :mod:`trainer.parallel.subgrid_train`, the choice
between them in :mod:`trainer.parallel.build`.

Data parallel (``parallel.mode = "data"``), one step on every rank r::

    occupancy update (every training.occupancy_update_every steps): cells and points drawn from
        a generator seeded identically on all ranks; σ all-reduced with MAX, so the grid stays
        identical on every rank (the EMA max-update of identical grids with identical new values)
    R = global rays (adapted: global samples → training.target_samples_per_step × world size,
        weak scaling: the target is per GPU)
    n_r = LoadBalancer split of R (the same on every rank, no communication)
    rays of rank r: its own sampler, seeded training.seed + r; jitter/background from a per-rank
        generator (seed + r)
    loss_r = Σ_{rays of r} ℓ / (3 R)               (global normaliser, see grad_sync's contract)
    backward; GradientSynchronizer sums gradients (bucket_mib, compression, overlap_comm)
    Adam step (skipped on every rank alike when no rank had samples)
    all-gather of [rays, trained samples, compute ms, loss sum, squared-error sum, samples sized
        on (marched, or kept with training.compact_samples)] per rank: the global
        loss (on the device); copied to the host without waiting and read ROWS_READ_LAG steps
        later: global batch sizing, balancing (every parallel.balance_every steps)
    the next step's rays drawn and marched on a side stream (trainer.train.prefetch) while this
        step's kernels run, unless the next step starts with an occupancy update

A rank with zero rays or zero samples still takes part in every collective.

Compute time of a step (for balancing and ``imbalance``) is the time of the step without the
occupancy update (which waits in an all-reduce) and without the gradient-sync wait: CUDA events
read a step later (:class:`DeviceClock`), the wall clock on the CPU.

Metrics: every rank writes ``metrics.rank<R>.jsonl`` (its own rays and samples); rank 0 writes
``metrics.jsonl`` with the global throughput (sums over ranks). ``loss`` and ``train_psnr_db`` are
global on every rank. Evaluation and renders run on rank 0; the others wait at a barrier.

Checkpoints (:mod:`trainer.parallel.checkpoint`) replace the single-process snapshots: every
``training.snapshot_every`` steps (``--checkpoint-every``) and at the end of the CLI run.
"""

from __future__ import annotations

import abc
import collections
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from trainer.contract.config import TrainConfig, config_to_dict
from trainer.data.sampler import RayBatch
from trainer.contract.errors import SnapshotError, TrainingError
from trainer.parallel import checkpoint as ckpt
from trainer.parallel.balance import LoadBalancer, imbalance
from trainer.parallel.grad_sync import GradientSynchronizer, allreduce_bandwidth_gb_per_s, collective_device
from trainer.contract.metrics import truncate_metrics_after
from trainer.train.divergence import check_state_dict
from trainer.train.hostcopy import HostCopy
from trainer.train.loop import StepStats, Trainer, check_finest_resolution, check_scene_model, warn_config_differences
from trainer.train.loss import drop_rays, photometric_loss
from trainer.train.precision import autocast
from trainer.train.timing import DeviceClock

__all__ = [
    "CHECKPOINT_FORMAT",
    "DataParallelTrainer",
    "DistributedTrainerBase",
    "GRID_SEED_OFFSET",
]

CHECKPOINT_FORMAT = "ngptune-dist-checkpoint"
CHECKPOINT_VERSION = 1
GRID_SEED_OFFSET = 0x5EED  # occupancy-grid generator seed = training.seed + this (all ranks)
DEFAULT_KEEP_CHECKPOINTS = 3
_ADAM_KEYS = ("exp_avg", "exp_avg_sq", "step")
BUDGET_CHECK_EVERY = 10  # steps between the ranks' agreement on the time budget
ROWS_READ_LAG = 2  # data parallel: a step's gathered rows are read on the host this many steps later


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


COMPLETE_MARKER_HINT = f"checkpoints/step_N/{ckpt.COMPLETE_MARKER} in it or below it"


class DistributedTrainerBase(Trainer, metaclass=abc.ABCMeta):
    """What the data-parallel and subgrid trainers share: rank/world size from the initialised
    process group (rank 0 of 1 without one), the shared occupancy-grid generator, global metrics,
    rank-0 evaluation hooks and sharded checkpoints.

    Args: as :class:`~trainer.train.loop.Trainer`; the process group must be initialised first
    (:func:`trainer.parallel.dist_env.init_distributed`) when there are several ranks.

    Raises:
        ConfigError: as the base trainer (the world-size rules, :func:`trainer.contract.world.check_world_size`).
    """

    mode = ""

    def _init_process(self, cfg: TrainConfig) -> None:
        self.rank, self.world_size = _rank_and_world()

    def _after_init(self) -> None:
        self.grid_generator = torch.Generator(device=self.device)
        self.grid_generator.manual_seed(self.cfg.training.seed + GRID_SEED_OFFSET)
        self.keep_checkpoints = DEFAULT_KEEP_CHECKPOINTS
        self.last_checkpoint: tuple[int, Path] | None = None  # (step, folder) of the newest save
        self._budget_agreed: HostCopy | None = None  # NCCL: the time spent agreed at the last check
        self._acc = self._new_accumulators()

    # ------------------------------------------------------------------ collectives
    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def _comm_device(self) -> torch.device:
        return collective_device() if self.distributed else torch.device("cpu")

    def _all_gather_rows(self, values: list[float]) -> torch.Tensor:
        """[world_size, len(values)] float64 on the CPU: every rank's ``values`` in rank order."""
        local = torch.tensor(values, dtype=torch.float64, device=self._comm_device())
        if not self.distributed:
            return local.unsqueeze(0).cpu()
        rows = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(rows, local)
        return torch.stack(rows).cpu()

    def _all_reduce_(self, tensor: torch.Tensor, op: dist.ReduceOp.RedOpType) -> torch.Tensor:
        if self.distributed:
            dist.all_reduce(tensor, op=op)
        return tensor

    def _barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def _time_budget_spent(self, time_budget_s: float) -> bool:
        """All ranks stop together: the slowest rank's projected training time decides
        (:meth:`~trainer.train.loop.Trainer.projected_train_time_s`). Checked every
        :data:`BUDGET_CHECK_EVERY` steps; over NCCL the decision uses the value agreed at the
        previous check (up to that many steps late), so the check never waits for the GPU."""
        if not self.distributed:
            return super()._time_budget_spent(time_budget_s)
        if self.step % BUDGET_CHECK_EVERY:
            return False
        spent = torch.tensor([self.projected_train_time_s()], dtype=torch.float64, device=self._comm_device())
        agreed = HostCopy(self._all_reduce_(spent, dist.ReduceOp.MAX))
        if spent.device.type != "cuda":
            return float(agreed.value()) >= time_budget_s
        # NCCL: decide on the value agreed at the previous check (its copy has landed by now) and
        # leave this one for the next check, so the host never waits for the step's queue here
        previous, self._budget_agreed = self._budget_agreed, agreed
        return previous is not None and float(previous.value()) >= time_budget_s

    def _all_reduce_density(self, sigma: torch.Tensor, op: dist.ReduceOp.RedOpType) -> torch.Tensor:
        """All-reduce occupancy densities across ranks (through the collective device)."""
        sigma = sigma.contiguous()
        if self.distributed:
            on_comm = sigma.to(self._comm_device())
            dist.all_reduce(on_comm, op=op)
            sigma = on_comm.to(sigma.device)
        return sigma

    def _compute_ms_since(self, t0: float) -> float:
        """Milliseconds of device work since ``t0`` (``time.perf_counter``), after a device sync."""
        self._synchronize()
        return (time.perf_counter() - t0) * 1e3

    # ------------------------------------------------------------------ metrics
    @staticmethod
    def _new_accumulators() -> dict[str, float]:
        return {"global_rays": 0.0, "global_samples": 0.0, "imbalance": 0.0, "comm_bytes": 0.0, "steps": 0.0}

    def _account(self, rows: torch.Tensor, comm_bytes: int = 0) -> list[float]:
        """Add one step's gathered rows (columns: rays, samples, compute ms, ...) to the interval."""
        times = rows[:, 2].tolist()
        self._acc["global_rays"] += float(rows[:, 0].sum())
        self._acc["global_samples"] += float(rows[:, 1].sum())
        self._acc["imbalance"] += imbalance(times)
        self._acc["comm_bytes"] += comm_bytes
        self._acc["steps"] += 1
        return times

    def _interval_record(self, interval: dict, loss_sum: torch.Tensor, mse_sum: torch.Tensor) -> dict[str, Any]:
        elapsed_s = max(time.perf_counter() - interval["t0"], 1e-9)
        record = super()._interval_record(interval, loss_sum, mse_sum)
        acc, self._acc = self._acc, self._new_accumulators()
        steps = max(acc["steps"], 1.0)
        record.update(rank=self.rank, world_size=self.world_size, imbalance=acc["imbalance"] / steps)
        # every rank records the job's throughput (from the gathered rows, rates over the timed
        # steps) beside its own (rank_*)
        timed = max(interval["steps"] - interval.get("untimed", 0), 1) / max(interval["steps"], 1)
        record.update(
            rays_per_step=acc["global_rays"] / steps,
            samples_per_step=acc["global_samples"] / steps,
            rays_per_s=acc["global_rays"] * timed / elapsed_s,
            throughput_samples_per_s=acc["global_samples"] * timed / elapsed_s,
        )
        return record

    def _broadcast_result(self, result: dict[str, Any] | None) -> dict[str, Any]:
        if not self.distributed:
            return result or {}
        box = [result]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    # ------------------------------------------------------------------ checkpoints
    @abc.abstractmethod
    def named_model_tensors(self) -> dict[str, torch.Tensor]:
        """Checkpoint names → this rank's model tensors (live, so loading fills them in place)."""

    @abc.abstractmethod
    def named_parameters_for_optimizer(self) -> dict[str, torch.nn.Parameter]:
        """Checkpoint names (without the ``optimizer.`` prefix) → this rank's trained parameters."""

    def _checkpoint_meta(self) -> dict[str, Any]:
        return {
            "format": CHECKPOINT_FORMAT,
            "version": CHECKPOINT_VERSION,
            "mode": self.mode,
            "step": self.step,
            "world_size": self.world_size,
            "config": config_to_dict(self.cfg),
            "scaler": self.scaler.state_dict(),
            "trainer_state": {
                "n_rays": self.n_rays,
                "samples_per_ray_ema": self.samples_per_ray_ema,
                "train_time_s": self.train_time_s,
                "finest_resolution": self.finest_resolution,
                "scene_model": self.scene_model,
            },
        }

    def _rank_state(self) -> dict[str, Any]:
        return self._rng_state(grid_generator=self.grid_generator.get_state())

    def _settle_previous_step(self, keep: int = 0) -> None:
        """Host bookkeeping steps left for later (data parallel), all but the newest ``keep``;
        nothing by default."""

    def checkpoint_tensors(self) -> dict[str, torch.Tensor]:
        """Everything tensor-valued a checkpoint holds for this rank: ``model``/``boxes`` entries,
        ``optimizer.<param>.<exp_avg|exp_avg_sq|step>`` (Adam, by parameter name, so they re-map
        to any rank that holds the parameter) and ``occupancy.<density|bitfield>``."""
        tensors = dict(self.named_model_tensors())
        for name, p in self.named_parameters_for_optimizer().items():
            state = self.optimizer.state.get(p, {})
            for key in _ADAM_KEYS:
                if key in state:
                    tensors[f"optimizer.{name}.{key}"] = state[key]
        for name, buf in self.grid.state_dict().items():
            tensors[f"occupancy.{name}"] = buf
        return tensors

    def save_checkpoint(self, folder: Path | None = None) -> Path:
        """Write a sharded checkpoint (collective; see :mod:`trainer.parallel.checkpoint`) and
        keep the newest ``keep_checkpoints``. Default folder: ``checkpoints/step_<N>``.

        Raises:
            SnapshotError: with neither ``folder`` nor a run directory.
            DivergedError: this rank's model holds a NaN or infinite tensor (nothing is written:
                the newest checkpoint stays the run's model).
        """
        check_state_dict(self.named_model_tensors(), self.step)
        self._settle_previous_step()  # batch size and balancer state as of this step
        if folder is None:
            if self.run_dir is None:
                raise SnapshotError("save_checkpoint: no folder given and the trainer has no run directory")
            folder = ckpt.checkpoint_dir(self.run_dir, self.step)
        path = ckpt.save_checkpoint(folder, self.checkpoint_tensors(), self._rank_state(), self._checkpoint_meta(), rank=self.rank)
        if self.rank == 0:
            ckpt.prune_checkpoints(Path(folder).parent, self.keep_checkpoints)
        self.last_checkpoint = (self.step, path)
        return path

    def _periodic_save(self) -> None:
        self.save_checkpoint()

    def load_checkpoint(self, path: Path) -> Path:
        """Resume from the newest complete checkpoint at ``path`` (a checkpoint folder, a
        ``checkpoints`` folder or a run directory); collective. Works with another world size:
        every rank loads the tensors it holds now; per-rank random states of ranks that did not
        exist are left freshly seeded; load-balancer shares of another world size are reset.

        Returns:
            The checkpoint folder used.

        Raises:
            SnapshotError: no complete checkpoint; another mode; a missing entry or another shape.
        """
        folder = ckpt.latest_checkpoint(Path(path))
        if folder is None:
            path = Path(path)
            if not path.exists():
                raise SnapshotError(f"{path}: not found (--resume takes a run directory or a checkpoint folder "
                                    "of a distributed run)")
            if path.is_file():
                raise SnapshotError(f"{path}: a single-process snapshot; a distributed run resumes from the "
                                    "checkpoints of a distributed run (its run directory or a checkpoints/step_N "
                                    "folder); resume this file without --nproc-per-node")
            hint = ""
            if list((path / "snapshots").glob("step_*.pt")):
                hint = ("; its snapshots/ hold single-process snapshots: resume them without --nproc-per-node")
            raise SnapshotError(f"{path}: no complete checkpoint found (looked for {COMPLETE_MARKER_HINT}){hint}")
        meta = ckpt.load_meta(folder)
        if self.rank == 0:
            for skipped in ckpt.skipped_incomplete(folder):
                warnings.warn(f"{skipped}: incomplete checkpoint (no {ckpt.COMPLETE_MARKER} marker: the run stopped "
                              f"while writing it) skipped; resuming from {folder.name}", stacklevel=2)
            warn_config_differences(folder, meta.get("config"), self.cfg)
        if meta.get("format") != CHECKPOINT_FORMAT or meta.get("version") != CHECKPOINT_VERSION:
            raise SnapshotError(f"{folder}: not an ngptune distributed checkpoint of version {CHECKPOINT_VERSION}")
        if meta["mode"] != self.mode:
            raise SnapshotError(
                f"{folder}: checkpoint of parallel.mode {meta['mode']!r}, this run uses {self.mode!r}"
            )
        self._check_meta(folder, meta)
        check_finest_resolution(folder, meta.get("trainer_state"), self.finest_resolution)
        check_scene_model(folder, meta.get("trainer_state"), self.scene_model)
        stored = ckpt.checkpoint_keys(folder)
        for name, p in self.named_parameters_for_optimizer().items():
            if f"optimizer.{name}.step" in stored and p not in self.optimizer.state:
                self.optimizer.state[p] = {
                    "step": torch.zeros((), dtype=torch.float32),
                    "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                    "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
                }
        wanted = {k: v for k, v in self.checkpoint_tensors().items() if not k.startswith("optimizer.") or k in stored}
        ckpt.load_tensors(folder, wanted)
        self._load_rank_state(folder, int(meta["world_size"]))
        if self.scaler.is_enabled() and meta["scaler"]:  # fp16 both then and now; else a fresh scale
            self.scaler.load_state_dict(meta["scaler"])
        state = meta["trainer_state"]
        ema = state["samples_per_ray_ema"]
        self._restore_counters(meta["step"], state, None if ema is None else float(ema))
        self._after_load(meta)
        if self.run_dir is not None:  # resuming into the run it came from: forget the lost steps
            truncate_metrics_after(self.run_dir.metrics_path(self.rank), self.step)
        return folder

    def _check_meta(self, folder: Path, meta: dict[str, Any]) -> None:
        """Mode-specific checks of a checkpoint's metadata before loading."""

    def _after_load(self, meta: dict[str, Any]) -> None:
        """Mode-specific state restored after the tensors."""

    def _rank_state_source(self, saved_world_size: int) -> int | None:
        """Which rank's ``rank<R>.pt`` this rank restores its random states from."""
        return self.rank if self.rank < saved_world_size else None

    def _load_rank_state(self, folder: Path, saved_world_size: int) -> None:
        source = self._rank_state_source(saved_world_size)
        shared = ckpt.load_rank_state(folder, 0)
        if shared is not None:
            self.grid_generator.set_state(shared["grid_generator"])
        state = None if source is None else ckpt.load_rank_state(folder, source)
        if state is not None:
            self._set_rng_state(state)

    def save(self, path: Path) -> Path:
        """``--save-snapshot`` in a distributed run writes a sharded checkpoint folder."""
        return self.save_checkpoint(Path(path))


class DataParallelTrainer(DistributedTrainerBase):
    """Data-parallel instant-NGP trainer (``parallel.mode = "data"``; module docstring).

    Every rank holds the whole field; rank r trains on its share of the global rays and the
    gradients are summed. With one process (no process group) it is a plain trainer with the
    global-batch rules, used as the single-process reference in tests.

    Attributes:
        balancer: the :class:`LoadBalancer` (ray shares).
        grad_sync: the :class:`GradientSynchronizer`, None with one process.
    """

    mode = "data"

    def _after_init(self) -> None:
        super()._after_init()
        cfg = self.cfg
        self.generator.manual_seed(cfg.training.seed + self.rank)
        self.balancer = LoadBalancer.from_config(cfg, self.world_size)
        # the global batch targets batch_scale × training.target_samples_per_step: the world size,
        # or after a resume on another world size the run's original one (the global batch is kept)
        self.batch_scale = float(self.world_size)
        self._pending: collections.deque[tuple[HostCopy, int, int, DeviceClock]] = collections.deque()
        self._previous_compute_ms = 0.0
        self.grad_sync: GradientSynchronizer | None = None
        if self.distributed:
            p = cfg.parallel
            self.grad_sync = GradientSynchronizer(
                list(self.field.parameters()), bucket_mib=p.bucket_mib, compression=p.compression, overlap=p.overlap_comm
            )

    def sampler_seed(self) -> int:
        return self.cfg.training.seed + self.rank

    def named_model_tensors(self) -> dict[str, torch.Tensor]:
        return {f"model.{k}": v for k, v in self.field.state_dict().items()}

    def named_parameters_for_optimizer(self) -> dict[str, torch.nn.Parameter]:
        return {f"model.{k}": p for k, p in self.field.named_parameters()}

    def _density_for_grid(self, positions: torch.Tensor) -> torch.Tensor:
        return self._all_reduce_density(super()._density_for_grid(positions), dist.ReduceOp.MAX)

    def _empty_batch(self) -> RayBatch:
        z3 = torch.zeros(0, 3, device=self.device)
        return RayBatch(z3, z3.clone(), z3.clone(), torch.zeros(0, 1, device=self.device),
                        torch.zeros(0, dtype=torch.long, device=self.device))

    def draw_batch(self, n_rays: int) -> RayBatch:
        """This rank's rays of the step (``n_rays`` may be 0: an empty batch)."""
        return self.sampler.sample(n_rays) if n_rays > 0 else self._empty_batch()

    def train_step(self) -> tuple[StepStats, torch.Tensor, torch.Tensor]:
        """One data-parallel step (collective). Returns this rank's stats and the *global* loss and
        MSE (identical on every rank, device scalars).

        No host synchronisation beyond the march's sample count, and that march usually ran on a
        side stream during the previous step (:mod:`trainer.train.prefetch`). The step's
        all-gathered row (rays, trained samples, compute ms, loss, squared error, samples the
        batch is sized on, per rank) is copied to
        the host without waiting and read :data:`ROWS_READ_LAG` steps later
        (:meth:`_settle_previous_step`), so global batch sizing and balancing run that many steps
        behind and the ranks' hosts never wait for each other inside a step.

        Raises:
            TrainingError: on every rank, when after the occupancy warm-up no rank had a sample.
        """
        t = self.cfg.training
        timer = self.timer
        self._maybe_update_occupancy()
        clock = DeviceClock(self.device)
        global_rays = self.n_rays
        n_local = self.balancer.rays_for_rank(global_rays, self.rank)
        step_input = self._step_input(n_local)
        assert step_input.batch.rays_o.shape[0] == n_local, "a batch must hold the rays the balancer gave this rank"
        n_samples = step_input.n_samples
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=self.device)
        sq_err_sum = torch.zeros((), device=self.device)
        n_trained, sized_on = 0, 0
        if n_samples > 0:
            samples, ray_fits, n_trained, n_kept = self._training_samples(step_input)
            sized_on = n_samples if n_kept is None else n_kept
            with timer.phase("field_forward"), autocast(self.device, t.precision):
                sigmas, rgbs = self.field(samples.positions, samples.directions)
            with timer.phase("render"):
                rgb = self._render_rgb(sigmas.float(), rgbs.float(), samples, step_input.background)
                rgb = self._appearance_rgb(rgb, step_input.batch.image_index)
                rgb = drop_rays(rgb, ray_fits, step_input.target)
                loss_sum = photometric_loss(rgb, step_input.target, self.cfg.loss)
                sq_err_sum = ((rgb.detach() - step_input.target) ** 2).sum()
            with timer.phase("backward"):
                self.scaler.scale(loss_sum / (3 * global_rays)).backward()
        clock.stop()
        any_grad = n_samples > 0
        if self.grad_sync is not None:
            with timer.phase("comm"):
                any_grad = self.grad_sync.finish()
        clock.start()
        skipped = not any_grad
        if any_grad:
            skipped = self._optimizer_step()
        clock.stop()
        with timer.phase("balance"):
            rows = self._gather_step_rows(n_local, n_trained, loss_sum.detach(), sq_err_sum, sized_on)
            denominator = 3.0 * max(global_rays, 1)
            loss = (rows[:, 3].sum() / denominator).float()
            mse = (rows[:, 4].sum() / denominator).float()
            self._pending.append((HostCopy(rows), global_rays, self.step, clock))
            self.step += 1
            self._settle_previous_step(keep=ROWS_READ_LAG)
        self._prefetch_next(self.balancer.rays_for_rank(self.n_rays, self.rank))
        return StepStats(n_local, n_trained, skipped=skipped), loss, mse

    def _gather_step_rows(self, n_local: int, n_trained: int, loss_sum: torch.Tensor, sq_err_sum: torch.Tensor,
                          sized_on: int | torch.Tensor) -> torch.Tensor:
        """[world_size, 6] float64 on the collective device, not read on the host: every rank's
        rays, trained samples (the metrics' samples, as the single-process trainer counts them),
        compute ms *of an earlier step* (see :meth:`_settle_previous_step`), loss sum,
        squared-error sum, and the samples the batch is sized on (marched, or kept before the
        capacity cut with ``training.compact_samples``; a host int or a device scalar)."""
        device = self._comm_device() if self.distributed else self.device
        row = torch.empty(6, dtype=torch.float64, device=device)
        row[0].fill_(float(n_local))  # fills from host scalars launch kernels; a host list would sync
        row[1].fill_(float(n_trained))
        row[2].fill_(self._previous_compute_ms)
        row[3].copy_(loss_sum.to(device))
        row[4].copy_(sq_err_sum.to(device))
        if isinstance(sized_on, torch.Tensor):
            row[5].copy_(sized_on.to(device))
        else:
            row[5].fill_(float(sized_on))
        if not self.distributed:
            return row.unsqueeze(0)
        rows = [torch.empty_like(row) for _ in range(self.world_size)]
        dist.all_gather(rows, row, async_op=True).wait()  # NCCL: the stream waits, the host does not
        return torch.stack(rows)

    def _settle_previous_step(self, keep: int = 0) -> None:
        """Host bookkeeping of earlier steps, oldest first, until at most ``keep`` are left
        pending: their rows (global rays, samples, loss) into the interval's metrics, the balancer
        (with the per-rank compute times those rows carry), global batch sizing; and this rank's
        compute time for the next row. Each read waits only for its own step's all-gather."""
        while len(self._pending) > keep:
            rows_copy, global_rays, step, clock = self._pending.popleft()
            self._previous_compute_ms = clock.elapsed_ms()
            rows = rows_copy.value()
            comm_bytes = self.grad_sync.last_bytes if self.grad_sync is not None else 0  # stats() would wait
            times = self._account(rows, comm_bytes)
            if any(v > 0 for v in times):  # the first steps' rows carry no earlier compute time
                self.balancer.record(times)
            global_samples = int(rows[:, 5].sum())
            if global_samples == 0 and step >= self.cfg.training.occupancy_warmup_steps:
                raise TrainingError(
                    f"no ray sample of any rank hit an occupied cell at step {step} (after the "
                    f"occupancy warm-up of {self.cfg.training.occupancy_warmup_steps} steps; occupied fraction "
                    f"{self.grid.occupancy_fraction():.3g})"
                )
            if global_samples > 0:
                self._resize_global_batch(global_rays, global_samples)

    def _resize_global_batch(self, global_rays: int, global_samples: int) -> None:
        """instant-ngp's batch rule on global counts: rays → ``target_samples_per_step × world
        size`` / (EMA of samples per ray), a multiple of 64, at most ``max_rays_per_step × world
        size`` (weak scaling: both limits are per GPU). A run resumed on another world size keeps
        the global batch of the run it continues (``batch_scale``: that run's world size), so each
        rank's share changes instead."""
        self._resize_batch(global_rays, global_samples, scale=self.batch_scale)

    def _interval_record(self, interval: dict, loss_sum: torch.Tensor, mse_sum: torch.Tensor) -> dict[str, Any]:
        self._settle_previous_step()
        steps = max(self._acc["steps"], 1.0)
        comm_bytes = self._acc["comm_bytes"] / steps
        record = super()._interval_record(interval, loss_sum, mse_sum)
        record["ray_share"] = self.balancer.shares[self.rank]
        if self.grad_sync is not None:
            record["comm_bytes_per_step"] = comm_bytes
            comm_ms = record.get("comm_ms", 0.0)
            if comm_ms > 0:
                record["comm_busbw_gb_per_s"] = allreduce_bandwidth_gb_per_s(int(comm_bytes), comm_ms, self.world_size)[1]
        return record

    def evaluate(self, split: str | None = None, max_images: int | None = None, save_renders: bool = True) -> dict[str, Any]:
        """Evaluate on rank 0 (the fields are identical); other ranks wait at a barrier and get
        rank 0's result (collective)."""
        result = super().evaluate(split, max_images, save_renders) if self.rank == 0 else None
        self._barrier()
        return self._broadcast_result(result)

    def _checkpoint_meta(self) -> dict[str, Any]:
        meta = super()._checkpoint_meta()
        meta["balancer"] = self.balancer.state_dict()
        meta["trainer_state"]["batch_scale"] = self.batch_scale
        return meta

    def _after_load(self, meta: dict[str, Any]) -> None:
        self.balancer.load_state_dict(meta["balancer"])
        saved = meta["trainer_state"].get("batch_scale", meta["world_size"])  # older checkpoints: their world size
        self.batch_scale = float(saved)

    def close(self) -> None:
        if self.grad_sync is not None:
            self.grad_sync.close()
        super().close()
